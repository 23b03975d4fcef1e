"""The verifier table and the task-source table are the one place verifiers and sources are
named. A toy verifier and a toy task source, registered here alone, go through everything a
shipped one does: task building, the reward router, `posttrain validate`'s preflight (gold
check included), `posttrain rewards try` and `posttrain rewards audit`. Nothing in posttrain/
names them. An entry may name a part by its path (`module:function`), as the shipped ones
name the parts of `rewards try` and the audit, which read the table. And a grep: outside the
tables, posttrain/ compares no verifier names and chains no `isinstance` over task-source
types."""

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar, Literal

import pytest
import yaml
from pydantic import Field

from posttrain.cli import main
from posttrain.config import RewardConfig, StageBase
from posttrain.config.answers import AnswerSource
from posttrain.config.lazy import LazyError, lazy_fields
from posttrain.config.verifiers import VERIFIER_FACTS, VerifierFacts, verifier_facts
from posttrain.data import registry as sources
from posttrain.data.heldout import held_out
from posttrain.data.preflight import preflight_file
from posttrain.data.registry import SourceKind
from posttrain.data.tasks import load_tasks
from posttrain.rewards import audit, audit_tasks, try_task
from posttrain.rewards import registry as verifiers
from posttrain.rewards.audit import answer_call_probes
from posttrain.rewards.registry import Verifier
from posttrain.rewards.router import reward_router
from posttrain.rewards.try_task import try_scored
from posttrain.stages import registry as stages
from posttrain.stages.registry import StageType, restore_nothing
from posttrain.types import Completion, Message, RewardResult, Sample, Task

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"posttrain/rewards/registry.py", "posttrain/data/registry.py", "posttrain/config/verifiers.py"}
# a verifier compared with a name or a list of names: `verifier == "code"`, `v.verifier in ("a", "b")`
COMPARED = re.compile(r"verifier\b[\"'\]\)]*\s*(==|!=)\s*[\"']|verifier\b[\"'\]\)]*\s+(not\s+)?in\s+[(\[{A-Z]")
SOURCE_TYPES = re.compile(r"isinstance\([^)]*\b\w+Tasks\b")


class EchoVerifier:
    """Scores 1 when the response is the task's answer, letter for letter."""

    name = "echo"

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        return [self._one(s) for s in samples]

    def _one(self, sample: Sample) -> RewardResult:
        same = sample.completion.text.strip() == sample.task.entry.get("word", sample.task.answer)
        return RewardResult(float(same), "the answer, exactly" if same else "not the answer", self.name)


class EchoTasks(AnswerSource):
    """Words to say back, scored by the toy verifier `echo` (with `answer_format` and
    `gold_check`, as the sources with reference answers have)."""

    type: Literal["echo_words"]
    size: int = Field(6, ge=1)
    seed: int = 0
    part: Literal["train", "eval", "all"] = "train"
    broken_gold: bool = Field(False, description="Reference answers the verifier does not accept.")


def echo_tasks(source: EchoTasks) -> list[Task]:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    out = []
    for i in range(source.size):
        word = words[(i + source.seed) % len(words)] + ("" if source.part == "train" else "-eval")
        answer = word.upper() if source.broken_gold else word
        prompt = (Message("user", f"Say {word}, and nothing else."),)
        out.append(Task(f"echo/{source.seed}/{i}", "echo_words", prompt, answer, {"word": word}, "echo"))
    return out


def echo_audit_tasks(name: str, n: int, seed: int, options: dict) -> list[Task]:
    return load_tasks(EchoTasks(type="echo_words", size=n, seed=seed))


def echo_preflight(stage, leaf, where: str) -> list[Task]:
    return preflight_file(leaf, where)


class EchoStage(StageBase):
    """Scores its echo tasks (the router, the gold check); trains nothing."""

    type: Literal["echo_stage"]
    tasks: EchoTasks
    reward: RewardConfig = Field(default_factory=RewardConfig)

    scores_tasks: ClassVar[bool] = True
    trains: ClassVar[str] = "nothing"

    def task_sources(self) -> dict:
        return {"tasks": self.tasks}


@pytest.fixture
def echo():
    verifier = verifiers.register(
        Verifier(
            VerifierFacts("echo", needs_answer=True),
            build=lambda stage, leaves, judge: EchoVerifier() if leaves else None,
            alone=lambda alone: (EchoVerifier(), None),
            gold=lambda stage, leaf: EchoVerifier(),
            try_row=try_scored,
            audit_tasks=echo_audit_tasks,
            probes=answer_call_probes,
        )
    )
    source = sources.register(
        SourceKind(EchoTasks, echo_tasks, lambda source: ("echo",), echo_preflight, generated=True)
    )
    stage = stages.register(StageType(EchoStage, lambda run: None, restore_nothing))
    yield verifier, source
    stages.unregister("echo_stage")
    sources.unregister("echo_words")
    verifiers.unregister("echo")
    assert "echo" not in VERIFIER_FACTS and "echo_words" not in sources.SOURCE_KINDS and stage


def stage_of(**tasks) -> EchoStage:
    return EchoStage(name="s", type="echo_stage", lr=1e-4, steps=1, tasks=EchoTasks(type="echo_words", **tasks))


def sample(task: Task, text: str) -> Sample:
    return Sample(task, 0, (0,), Completion((0,), (0.0,), text, "stop"))


def test_the_toy_source_builds_its_tasks_through_the_table(echo):
    tasks = load_tasks(EchoTasks(type="echo_words", size=3, seed=1))
    assert [(t.task_id, t.answer, t.verifier) for t in tasks] == [
        ("echo/1/0", "bravo", "echo"),
        ("echo/1/1", "charlie", "echo"),
        ("echo/1/2", "delta", "echo"),
    ]
    held = held_out(EchoTasks(type="echo_words", seed=1), 10)  # the default eval part: seed moved, `part: eval`
    assert (held.seed, held.part) == (11, "eval")
    assert verifier_facts("echo").needs_answer


def test_the_router_builds_and_routes_the_toy_verifier(echo):
    import asyncio

    stage = stage_of(size=2)
    router = reward_router(stage)
    assert isinstance(router.sources["echo"], EchoVerifier) and "math" in router.sources
    tasks = load_tasks(stage.tasks)
    results = asyncio.run(router.score([sample(tasks[0], "alpha"), sample(tasks[1], "alpha")]))
    assert [(r.score, r.source) for r in results] == [(1.0, "echo"), (0.0, "echo")]


def test_without_the_registration_the_toy_is_unknown():
    with pytest.raises(TypeError, match="unknown task source EchoTasks"):
        load_tasks(EchoTasks(type="echo_words"))
    assert "echo" not in verifiers.VERIFIERS and not verifier_facts("echo").needs_answer


def pipeline(model, **tasks) -> dict:
    stage = {"name": "s", "type": "echo_stage", "lr": 1e-4, "steps": 1, "tasks": {"type": "echo_words", **tasks}}
    return {"name": "echo", "model": {"name": str(model)}, "wandb": {"enabled": False}, "stages": [stage]}


def test_validate_runs_the_toy_sources_preflight_and_gold_check(echo, tiny_dir, tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(pipeline(tiny_dir)))
    assert main(["validate", str(good)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(pipeline(tiny_dir, broken_gold=True)))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: stages[0].tasks: gold check: 0 of 6 sampled reference answers" in err
    assert "through verifier echo" in err


def test_rewards_try_scores_a_row_of_the_toy_verifier(echo, tmp_path, capsys):
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"verifier": "echo", "prompt": "Say golf.", "answer": "golf"}))
    right, wrong = tmp_path / "right.txt", tmp_path / "wrong.txt"
    right.write_text("golf\n")
    wrong.write_text("hotel")
    assert main(["rewards", "try", "--task-file", str(task), "--response-file", str(right), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["score"] == 1.0
    assert main(["rewards", "try", "--task-file", str(task), "--response-file", str(wrong), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["score"], out["reason"], out["source"]) == (0.0, "not the answer", "echo")


def test_rewards_audit_attacks_the_toy_verifier(echo, capsys):
    code = main(["rewards", "audit", "--verifier", "echo", "--tasks", "2", "--quick", "--json"])
    report = json.loads(capsys.readouterr().out)
    (audit,) = report["verifiers"]
    assert audit["verifier"] == "echo" and audit["tasks"] == 2
    classes = {row["class"] for row in audit["classes"]}
    assert "honest" in classes and len(classes) > 3  # the answer attacks ran against it
    reference = audit["reference"]  # the strict reference's check: the toy echoes bare words only
    assert reference["controls"] > 0 and not reference["false_positives"]
    failed = report["wins"] or report["voids"] or not reference["evidence"]
    assert code == (1 if failed else 0)


def test_the_parts_the_table_names_by_path_are_its_try_and_audit_functions():
    """A typo in a path of the table fails here, not in a user's `rewards audit`."""
    named = {(v.name, field): lazy.resolve() for v in verifiers.VERIFIERS.values() for field, lazy in lazy_fields(v)}
    assert all(callable(function) for function in named.values())
    assert named[("code", "read_row")] is try_task.code_row and named[("grm", "try_row")] is try_task.try_judged
    assert named[("math", "audit_tasks")] is audit_tasks.answer_tasks
    assert named[("env", "probes")] is audit.env_call_probes


def test_importing_the_table_imports_none_of_the_modules_that_read_it():
    readers = ["try_task", "try_grm", "audit", "audit_tasks", "audit_input", "debug", "router"]
    code = (
        "import sys, posttrain.rewards.registry; "
        f"print([m for m in {readers} if 'posttrain.rewards.' + m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def with_read_row(path: str) -> Verifier:
    return Verifier(VerifierFacts("echo"), build=lambda stage, leaves, judge: None, read_row=path, try_row=try_scored)


@pytest.mark.parametrize(
    "path, problem",
    [
        ("posttrain.rewards.try_task:unread", "module posttrain.rewards.try_task has no function unread"),
        ("posttrain.rewards.try_task:TASK_KEYS", "module posttrain.rewards.try_task has no function TASK_KEYS"),
        ("posttrain.rewards.no_such_module:read", "there is no module posttrain.rewards.no_such_module"),
        ("no_such_package.rows:read", "there is no module no_such_package"),
    ],
)
def test_a_part_at_a_wrong_path_fails_naming_the_entry_and_the_path(path, problem, tmp_path):
    verifiers.register(with_read_row(path))
    try:
        with pytest.raises(LazyError) as caught:
            verifiers.get_verifier("echo").part("read_row")
        assert str(caught.value) == f"verifier 'echo': read_row: {path!r}: {problem}"
        task = tmp_path / "task.json"  # `rewards try` reads the row through the entry: the same error
        task.write_text(json.dumps({"verifier": "echo", "prompt": "Say golf.", "answer": "golf"}))
        (tmp_path / "response.txt").write_text("golf")
        with pytest.raises(LazyError, match=re.escape(f"verifier 'echo': read_row: {path!r}")):
            main(["rewards", "try", "--task-file", str(task), "--response-file", str(tmp_path / "response.txt")])
    finally:
        verifiers.unregister("echo")


def test_a_module_at_a_right_path_that_cannot_import_its_own_dependency_says_so(tmp_path, monkeypatch):
    (tmp_path / "echo_rows.py").write_text("import no_such_dependency\n\n\ndef read(row, name): ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    verifiers.register(with_read_row("echo_rows:read"))
    try:
        with pytest.raises(ModuleNotFoundError) as caught:
            verifiers.get_verifier("echo").part("read_row")
        assert caught.value.name == "no_such_dependency" and not isinstance(caught.value, LazyError)
    finally:
        verifiers.unregister("echo")
        sys.modules.pop("echo_rows", None)


@pytest.mark.parametrize("path", ["posttrain.rewards.try_task.code_row", "code_row", "posttrain.rewards.try_task:"])
def test_a_part_that_is_not_a_path_is_refused_when_registered(path):
    with pytest.raises(ValueError, match=re.escape(f"verifier 'echo': read_row: {path!r} is not a path")):
        verifiers.register(with_read_row(path))
    assert "echo" not in verifiers.VERIFIERS and "echo" not in VERIFIER_FACTS


def test_no_verifier_names_or_source_type_chains_outside_the_tables():
    found = []
    for path in sorted((ROOT / "posttrain").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        if name in TABLES:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if COMPARED.search(code) or SOURCE_TYPES.search(code):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "ask the verifier or task-source table instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        'if task.verifier == "code":',
        "if verifier in ANSWER_VERIFIERS:",
        'episodes = [s for s in xs if s.task.verifier in ("agent", "env")]',
        'if row["verifier"] != "user":',
        "if isinstance(leaf, (HFTasks, EnvTasks)):",
    ],
)
def test_the_grep_finds_what_it_forbids(line):
    assert COMPARED.search(line) or SOURCE_TYPES.search(line)


def test_the_docs_verifier_runs_as_written(tmp_path, capsys):
    """docs/add-a-verifier.md: its module and its table line, run as written; then the
    verifier is tried and audited as a shipped one is."""
    import types

    from posttrain.rewards.audit import run_audit
    from posttrain.rewards.audit_tasks import generated_tasks, source_for

    module_block, line_block = re.findall(r"```python\n(.*?)```", (ROOT / "docs/add-a-verifier.md").read_text(), re.S)
    exact = types.ModuleType("exact")
    exec(module_block, exact.__dict__)
    exec(line_block, {**vars(verifiers), "exact": exact})
    try:
        tasks = generated_tasks("exact", 3)
        assert {t.verifier for t in tasks} == {"exact"}
        audit = run_audit("exact", source_for("exact"), tasks, quick=True)
        assert audit.outcomes and audit.wins == 0 and audit.voids == 0
        row, response = tmp_path / "task.json", tmp_path / "response.txt"
        row.write_text(json.dumps({"verifier": "exact", "prompt": "Say golf.", "answer": "golf"}))
        response.write_text("golf")
        assert main(["rewards", "try", "--task-file", str(row), "--response-file", str(response), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["score"] == 1.0
    finally:
        verifiers.unregister("exact")
