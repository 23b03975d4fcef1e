"""Your own data with no silent traps (issue 27): reference answers read by `answer_format`,
the gold checked before anything starts, environments that fail in the driver as one
line, health flags and the stop for a reward with no signal, checkpoint retention and the
disk it saves, and config errors that say what was meant.

The CLI tests run `posttrain validate` (no Ray); the runs at the end are `slow`."""

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from posttrain.config import HealthConfig
from posttrain.config.files import ConfigError, validate_pipeline
from posttrain.data.answers import guesses, read_answer
from posttrain.records.health import HealthMonitor

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}:{FIXTURES}"}


# ---------------------------------------------------------------- datasets of common shapes


def gsm8k_rows(count: int = 40, seed: int = 0) -> list[dict]:
    """GSM8K's shape: a question, and a worked solution ending in `#### N`."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        a = rng.randint(1, 7)
        b = 8 - a if i % 2 else 7 - a
        name = rng.choice(["Tom", "Ann", "Bob", "Eve"])
        rows.append(
            {
                "question": f"{name} has {a} apples and buys {b} more. How many apples does {name} have?",
                "answer": f"{name} starts with {a} apples.\nThen {a} + {b} = <<{a}+{b}={a + b}>>{a + b}.\n#### {a + b}",
            }
        )
    return rows


def math_rows(count: int = 20) -> list[dict]:
    """MATH's shape: a `problem` and a `solution` whose answer is the last \\boxed{}."""
    return [
        {
            "problem": f"Simplify $\\frac{{{2 * k}}}{{{4 * k}}} + {k}$.",
            "solution": f"We have $\\frac{{{2 * k}}}{{{4 * k}}} = \\frac{{1}}{{2}}$, so the sum is "
            f"$\\boxed{{\\frac{{{2 * k + 1}}}{{2}}}}$.",
            "level": "Level 2",
        }
        for k in range(1, count + 1)
    ]


def final_line_rows(count: int = 20) -> list[dict]:
    """Explanations whose last line states the answer (`The answer is red.`)."""
    fruits = {"cherry": "red", "banana": "yellow", "lime": "green", "plum": "purple", "orange": "orange"}
    return [
        {"q": f"What colour is a ripe {fruit} ({k})?", "a": f"Think of a ripe {fruit}.\nThe answer is {colour}."}
        for k in range(count // len(fruits) + 1)
        for fruit, colour in fruits.items()
    ][:count]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pipeline(tasks: dict, **stage) -> dict:
    return {
        "name": "traps",
        "model": {"name": "tiny"},
        "stages": [{"name": "rl", "type": "rl", "lr": 1e-4, "steps": 2, "tasks": tasks, **stage}],
    }


def validate(tmp_path: Path, config: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "validate", str(tmp_path / "p.yaml")],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=cwd or ROOT,
        timeout=300,
    )


def refused(proc: subprocess.CompletedProcess) -> str:
    """The one line of a refusal (exit 2)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    return lines[0]


# ---------------------------------------------------------------- answer formats


def test_each_answer_format_reads_the_final_answer():
    assert read_answer("Step 1.\nStep 2.\n#### 1,234", "gsm8k") == "1234"
    assert read_answer("so $x = \\boxed{\\frac{1}{2}}$ and not \\boxed{3}? no: \\boxed{\\frac{3}{4}}", "boxed") == (
        "\\frac{3}{4}"
    )
    assert read_answer("the set is \\boxed{\\{1, 2\\}}", "boxed") == "\\{1, 2\\}"
    assert read_answer("work\n\nThe final answer is 42.\n", "final_line") == "42"
    assert read_answer("work\n**Answer:** -3", "final_line") == "-3"
    assert read_answer("blah\n17", "final_line") == "17"
    assert read_answer("Result: [7] (checked)", "regex: \\[(\\d+)\\]") == "7"
    assert read_answer("x = 2 + 3 = 5", "trap_rewards:after_equals") == "5"
    assert read_answer("ignored", "trap_rewards:from_row", {"final": 9}) == "9"
    assert read_answer(" as is ", None) == " as is "
    for text, spec in (("no marker", "gsm8k"), ("no box", "boxed"), ("x", "regex: (\\d+)"), ("", "final_line")):
        with pytest.raises(ValueError, match=spec.split(":")[0]):
            read_answer(text, spec)
    with pytest.raises(ValueError, match="found no answer"):
        read_answer("no equals sign", "trap_rewards:after_equals")


def test_a_function_given_by_its_file_path(tmp_path):
    (tmp_path / "fmt.py").write_text("def last_word(text):\n    return text.split()[-1]\n")
    assert read_answer("the answer: yes", f"{tmp_path}/fmt.py:last_word") == "yes"


def test_the_formats_a_sample_reads_as():
    assert guesses([r["answer"] for r in gsm8k_rows(5)])[0] == "gsm8k"
    assert guesses([r["solution"] for r in math_rows(5)])[0] == "boxed"
    assert guesses([r["a"] for r in final_line_rows(5)]) == ["final_line"]


def test_answer_format_values_in_the_config():
    tasks = {"type": "user", "path": str(ROOT / "pyproject.toml")}
    for value, expected in (
        ({"regex": "answer: (\\d+)"}, "regex: answer: (\\d+)"),
        ("regex: (\\d+)", "regex: (\\d+)"),
        ("gsm8k", "gsm8k"),
        ("pkg.mod:fn", "pkg.mod:fn"),
    ):
        raw = pipeline({**tasks, "path": "x.jsonl", "answer_format": value})
        raw["stages"][0]["tasks"]["path"] = str(FIXTURES / "user_rewards.py")  # any file: the suffix is checked
        with pytest.raises(ConfigError, match="must end with .jsonl"):
            validate_pipeline(raw, "p.yaml")
    from posttrain.config.answers import answer_format_spec

    assert answer_format_spec({"regex": "answer: (\\d+)"}) == "regex: answer: (\\d+)"
    assert answer_format_spec("final_line") == "final_line"
    with pytest.raises(ValueError, match="did you mean 'gsm8k'"):
        answer_format_spec("gsm8")
    with pytest.raises(ValueError, match="does not compile"):
        answer_format_spec("regex: (unclosed")


# ---------------------------------------------------------------- the gold check


def test_a_gsm8k_shaped_dataset_without_its_format_is_refused_naming_it(tmp_path):
    data = write_jsonl(tmp_path / "gsm.jsonl", gsm8k_rows())
    tasks = {"type": "hf", "path": str(data), "prompt_key": "question", "answer_key": "answer", "verifier": "math"}
    line = refused(validate(tmp_path, pipeline(tasks)))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks: gold check: 0 of 16 sampled reference answers")
    assert "`answer_format: gsm8k`" in line and "#### " in line
    ok = validate(tmp_path, pipeline({**tasks, "answer_format": "gsm8k"}))
    assert ok.returncode == 0, ok.stderr
    assert "answer_format: gsm8k" in ok.stdout  # the resolved config keeps it


def test_the_same_from_a_saved_dataset_and_in_a_mixture(tmp_path):
    import datasets

    datasets.Dataset.from_list(gsm8k_rows()).save_to_disk(str(tmp_path / "saved"))
    tasks = {"type": "hf", "path": str(tmp_path / "saved"), "prompt_key": "question", "answer_key": "answer"}
    mixture = {"type": "mixture", "sources": [{"type": "arithmetic", "size": 10}, tasks]}
    line = refused(validate(tmp_path, pipeline(mixture)))
    assert "stages[0].tasks.sources[1]: gold check: 0 of 16" in line and "`answer_format: gsm8k`" in line


def test_a_final_line_reference_is_named_too(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", final_line_rows())
    tasks = {"type": "hf", "path": str(data), "prompt_key": "q", "answer_key": "a"}
    tasks["verifier"] = "user"  # words: matched, not read as mathematics
    line = refused(validate(tmp_path, pipeline(tasks)))
    assert "`answer_format: final_line`" in line
    assert validate(tmp_path, pipeline({**tasks, "answer_format": "final_line"})).returncode == 0


def test_a_boxed_solution_as_reference_is_refused_without_its_format(tmp_path):
    """MATH's shape: the math verifier reads a reference's final box as the expected answer
    (as it reads a response's), so the gold check passes, but a verifier comparing with the
    whole solution credits more than the answer: refused without `answer_format: boxed`
    (issue 56; this test accepted it before), and a response that boxes the right value is
    credited."""
    from posttrain.rewards.math_verifier import judge

    rows = math_rows()
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    tasks = {"type": "hf", "path": str(data), "prompt_key": "problem", "answer_key": "solution", "verifier": "math"}
    assert "set `answer_format: boxed`" in refused(validate(tmp_path, pipeline(tasks)))
    assert validate(tmp_path, pipeline({**tasks, "answer_format": "boxed"})).returncode == 0
    assert judge(rows[0]["solution"], "So it is $\\boxed{\\frac{3}{2}}$.").score == 1.0
    assert judge(rows[0]["solution"], "So it is $\\boxed{\\frac{1}{2}}$.").score == 0.0


def test_a_chat_dataset_whose_last_turn_is_a_worked_solution(tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": r["question"]}, {"role": "assistant", "content": r["answer"]}]}
        for r in gsm8k_rows()
    ]
    tasks = {"type": "hf", "path": str(write_jsonl(tmp_path / "chat.jsonl", rows)), "messages_key": "messages"}
    tasks["verifier"] = "user"
    assert "`answer_format: gsm8k`" in refused(validate(tmp_path, pipeline(tasks)))
    assert validate(tmp_path, pipeline({**tasks, "answer_format": "gsm8k"})).returncode == 0


def test_a_user_file_and_a_user_reward_function(tmp_path):
    rows = [{"id": str(i), "prompt": r["question"], "answer": r["answer"]} for i, r in enumerate(gsm8k_rows())]
    tasks = {"type": "user", "path": str(write_jsonl(tmp_path / "u.jsonl", rows))}
    assert "`answer_format: gsm8k`" in refused(validate(tmp_path, pipeline(tasks)))
    assert validate(tmp_path, pipeline({**tasks, "answer_format": "gsm8k"})).returncode == 0
    stingy = {**tasks, "answer_format": "gsm8k", "reward": "trap_rewards:stingy"}
    line = refused(validate(tmp_path, pipeline(stingy)))
    assert "gold check: 0 of 16" in line and "your reward function trap_rewards:stingy" in line
    assert "pays nothing" in line
    assert validate(tmp_path, pipeline({**stingy, "gold_check": False})).returncode == 0


def test_a_format_that_reads_no_row_and_a_function_that_cannot_load(tmp_path):
    data = write_jsonl(tmp_path / "gsm.jsonl", gsm8k_rows())
    tasks = {"type": "hf", "path": str(data), "prompt_key": "question", "answer_key": "answer"}
    line = refused(validate(tmp_path, pipeline({**tasks, "answer_format": "boxed"})))
    assert "no usable task" in line and "no \\boxed{...} answer" in line
    assert line.endswith("; the references read as `answer_format: gsm8k`")
    line = refused(validate(tmp_path, pipeline({**tasks, "answer_format": "trap_rewards:absent"})))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks.answer_format: cannot load trap_rewards:absent")


def test_sft_stages_are_not_gold_checked(tmp_path):
    data = write_jsonl(tmp_path / "gsm.jsonl", gsm8k_rows())
    tasks = {"type": "hf", "path": str(data), "prompt_key": "question", "answer_key": "answer"}
    config = pipeline(tasks)
    config["stages"] = [{"name": "sft", "type": "sft", "lr": 1e-3, "steps": 1, "data": tasks}]
    assert validate(tmp_path, config).returncode == 0  # SFT trains on worked solutions: nothing is scored


# ---------------------------------------------------------------- environments


def env_tasks(name: str, **kw) -> dict:
    return {"type": "env", "env": f"trap_envs:{name}", "size": 20, "timeout_s": 2, **kw}


def test_a_tool_that_raises_in_a_gold_episode_is_one_line(tmp_path):
    line = refused(validate(tmp_path, pipeline(env_tasks("Raising"))))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks: tool kv_")
    assert "(gold episode of task 'trap_envs:Raising/0/" in line
    assert line.endswith("raised RuntimeError: unit converter offline")


def test_a_tool_that_hangs_in_a_gold_episode_is_one_line(tmp_path):
    started = time.time()
    line = refused(validate(tmp_path, pipeline(env_tasks("Hanging"))))
    assert "did not return within timeout_s=2s" in line and "tool kv_" in line
    assert time.time() - started < 240  # the hung call (an hour) does not hold the command


def test_an_environment_reward_that_never_pays_its_gold(tmp_path):
    line = refused(validate(tmp_path, pipeline(env_tasks("Stingy"))))
    assert "gold check: 0 of 16 sampled gold episodes" in line and "never pays" in line
    assert "check trap_envs:Stingy.reward" in line
    assert validate(tmp_path, pipeline(env_tasks("KVStore"))).returncode == 0


def test_an_environment_class_that_does_not_exist_is_reported_at_its_key(tmp_path):
    line = refused(validate(tmp_path, pipeline(env_tasks("Absent"))))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks.env: cannot load trap_envs:Absent")
    config = pipeline(env_tasks("KVStore"))
    config["stages"] = [{"name": "sft", "type": "sft", "lr": 1e-3, "steps": 1, "data": env_tasks("Absent")}]
    assert refused(validate(tmp_path, config)).startswith(f"{tmp_path / 'p.yaml'}: stages[0].data.env: ")


# ---------------------------------------------------------------- health: no silent loss of signal


def step_row(**values) -> dict:
    row = {
        "reward/mean": 0.4,
        "reward/std": 0.3,
        "samples/scored": 32.0,
        "groups/zero_advantage_frac": 0.25,
        "samples/unscored_frac": 0.0,
        "samples/dropped_frac": 0.0,
    }
    return {**row, **values}


def test_flags_for_a_reward_without_signal_and_for_lost_samples():
    out = io.StringIO()
    monitor = HealthMonitor(HealthConfig(), "rl", 2, stream=out)
    assert monitor.check(1, step_row()) == []
    fired = {f.name for f in monitor.check(2, step_row(**{"groups/zero_advantage_frac": 1.0, "reward/std": 0.0}))}
    assert fired == {"zero_advantage", "constant_reward"}
    lost = {
        f.name: f for f in monitor.check(3, step_row(**{"samples/unscored_frac": 0.8, "samples/dropped_frac": 0.8}))
    }
    assert set(lost) == {"unscored", "dropped"} and lost["unscored"].bound == 0.25
    # one scored sample (or none) is no evidence of a constant reward
    assert monitor.check(4, step_row(**{"reward/std": 0.0, "samples/scored": 1.0})) == []
    # MOPD with alpha 0 trains on its teachers: the reward's signal is not what it learns from
    quiet = HealthMonitor(HealthConfig(), "mopd", 2, stream=out, outcome=False)
    assert quiet.check(1, step_row(**{"groups/zero_advantage_frac": 1.0, "reward/std": 0.0})) == []


def test_the_stop_after_n_steps_without_signal():
    config = HealthConfig(stop_after=3)
    monitor = HealthMonitor(config, "rl", 2, stream=io.StringIO())
    flat = step_row(**{"groups/zero_advantage_frac": 1.0, "reward/std": 0.0, "reward/mean": 0.5})
    for step, row in enumerate([flat, flat, step_row(), flat, flat], 1):
        monitor.step(step, row)
        assert monitor.stop_reason() is None  # a step with signal starts the count again
    monitor.step(6, flat)
    reason = monitor.stop_reason()
    assert reason.startswith("[rl] stopped at step 6: for 3 steps in a row its reward carried no signal")
    assert "every scored sample got 0.5" in reason and "health.stop_after" in reason and "\n" not in reason
    never = HealthMonitor(HealthConfig(stop_on=[], stop_after=1), "rl", 2, stream=io.StringIO())
    never.step(1, flat)
    assert never.stop_reason() is None


def test_dashboard_health_lists_the_new_checks(tmp_path):
    from posttrain.dashboard.data import Run

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.resolved.yaml").write_text(yaml.safe_dump(pipeline({"type": "arithmetic"})))
    rows = [
        {"stage": "rl", "step": s, **step_row(**{"health/flags": 1.0, "health/zero_advantage": 1.0})} for s in (1, 2)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    checks = {c["name"]: c for c in Run(run, 0).health()["jobs"][0]["checks"]}
    assert checks["zero_advantage"]["steps"] == [[1, 2]] and checks["unscored"]["count"] == 0


def test_the_step_shares_of_unscored_and_dropped_samples():
    from posttrain.rollout.queue import PartialRolloutQueue
    from posttrain.stages.rl import sample_shares
    from posttrain.types import RewardResult

    queue = PartialRolloutQueue(2)
    before = (sum(queue.dropped.values()), queue.trained)
    queue.dropped["reward_flagged"] += 3
    queue.dropped["stale"] += 1
    queue.trained += 4
    rewards = [RewardResult(0.0, "unscored", "user", ok=False)] * 3 + [RewardResult(1.0, "ok", "user")] * 5
    assert sample_shares(rewards, queue, before) == {
        "samples/scored": 5.0,
        "samples/unscored_frac": 3 / 8,
        "samples/dropped_frac": 0.5,
    }
    assert sample_shares([], queue, (4, 4))["samples/dropped_frac"] == 0.0


def test_the_driver_stops_after_writing_a_checkpoint(tmp_path):
    from types import SimpleNamespace

    from posttrain.errors import RunStopped
    from posttrain.stages.rl import STATE_FILE, RLRun

    saved = []

    class Stub(RLRun):
        def __init__(self):  # the stop alone: no engines, no trainer
            self.stage, self.step = SimpleNamespace(name="rl"), 4
            self.infra = SimpleNamespace(run_dir=tmp_path)

        def save(self, folder):
            folder.mkdir(parents=True)
            (folder / STATE_FILE).write_text("{}")
            saved.append(folder.name)

    monitor = HealthMonitor(HealthConfig(stop_after=2), "rl", 2, stream=io.StringIO())
    run = Stub()
    flat = step_row(**{"groups/zero_advantage_frac": 1.0, "reward/std": 0.0})
    monitor.step(3, flat)
    run.stop_if_no_signal(monitor)  # one step: goes on
    monitor.step(4, flat)
    with pytest.raises(RunStopped, match=r"^\[rl\] stopped at step 4: .* Checkpoint: .*step_000004$"):
        run.stop_if_no_signal(monitor)
    assert saved == ["step_000004"]


# ---------------------------------------------------------------- checkpoint retention


def fake_checkpoints(stage_dir: Path, steps, state="rollout_state.json") -> None:
    for step in steps:
        folder = stage_dir / f"step_{step:06d}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"0" * 1000)
        (folder / state).write_text(json.dumps({"step": step}))


def test_keep_last_and_keep_best(tmp_path):
    from posttrain.config import KeepBest
    from posttrain.records.checkpoints import checkpoint_disk, retain

    stage_dir = tmp_path / "checkpoints" / "rl"
    fake_checkpoints(stage_dir, range(1, 7))
    (stage_dir / "final").mkdir()
    (stage_dir / ".step_000007.tmp").mkdir()  # being written: never touched
    (stage_dir / "step_000008").mkdir()  # not whole (no state file): never touched
    rewards = {1: 0.1, 2: 0.9, 3: 0.2, 4: 0.3, 5: 0.1, 6: 0.2}
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"stage": "rl", "step": s, "reward/mean": r}) + "\n" for s, r in rewards.items())
    )
    assert checkpoint_disk(tmp_path)["bytes"] > 6000
    removed = retain(stage_dir, "rollout_state.json", 2, KeepBest(metric="reward/mean"), tmp_path, "rl")
    assert sorted(p.name for p in removed) == ["step_000001", "step_000003", "step_000004"]
    left = sorted(p.name for p in stage_dir.iterdir())
    assert left == [
        ".step_000007.tmp",
        "best.json",
        "final",
        "step_000002",
        "step_000005",
        "step_000006",
        "step_000008",
    ]
    assert json.loads((stage_dir / "best.json").read_text())["step"] == 2
    fake_checkpoints(stage_dir, [9])
    retain(stage_dir, "rollout_state.json", 1, None)
    assert sorted(p.name for p in stage_dir.glob("step_*")) == ["step_000008", "step_000009"]


def test_dry_run_predicts_the_checkpoint_disk():
    from posttrain.runtime.dryrun import disk_lines

    stage = {"name": "rl", "type": "rl", "lr": 1e-4, "steps": 100, "save_every": 10, "tasks": {"type": "arithmetic"}}
    every = validate_pipeline({"model": {"name": "tiny"}, "stages": [stage]})
    kept = validate_pipeline({"model": {"name": "tiny"}, "stages": [{**stage, "keep_last": 2}]})
    assert "stage rl: 9 step checkpoint(s) + final (every step checkpoint kept)" in "\n".join(disk_lines(every))
    assert "stage rl: 2 step checkpoint(s) + final (keep_last 2)" in "\n".join(disk_lines(kept))
    # a judge stage keeps each phase's: SFT 150 steps saved every 50 (keep 1) and its final, RL's final
    judge = {"name": "judge", "type": "judge", "lr": 1e-4, "steps": 150, "save_every": 50, "keep_last": 1}
    judged = validate_pipeline({"model": {"name": "tiny"}, "stages": [{**judge, "rl": {"steps": 20}}]})
    assert "stage judge: 1 step checkpoint(s) + 2 finals (keep_last 1)" in "\n".join(disk_lines(judged))


# ---------------------------------------------------------------- config errors that help


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"prompts_per_stpe": 4}, "stages[0].prompts_per_stpe: unknown key; did you mean 'prompts_per_step'?"),
        ({"tasks": {"type": "arithmetc"}}, "did you mean 'arithmetic'?"),
        ({"tasks": {"type": "hf", "path": "x.jsonl", "verifer": "math"}}, "did you mean 'verifier'?"),
        ({"keep_best": {"metric": "reward/mean", "mode": "maximum"}}, "keep_best.mode: must be one of"),
        ({"partial": {"lamda": 0.5}}, "stages[0].partial.lamda: unknown key; did you mean 'lambda'?"),
    ],
)
def test_did_you_mean(tmp_path, change, expected):
    (tmp_path / "x.jsonl").write_text("{}\n")
    stage = {"name": "rl", "type": "rl", "lr": 1e-4, "steps": 2, "tasks": {"type": "arithmetic"}, **change}
    if "path" in stage["tasks"]:
        stage["tasks"]["path"] = str(tmp_path / "x.jsonl")
    with pytest.raises(ConfigError) as info:
        validate_pipeline({"model": {"name": "tiny"}, "stages": [stage]}, "p.yaml")
    assert expected in str(info.value)


def test_a_model_check_is_reported_at_its_own_key(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", gsm8k_rows(2))
    stage = {"name": "rl", "type": "rl", "lr": 1e-4, "steps": 2}
    stage["tasks"] = {"type": "hf", "path": str(data), "prompt_key": "question", "verifier": "math"}
    with pytest.raises(ConfigError) as info:
        validate_pipeline({"model": {"name": "tiny"}, "stages": [stage]}, "p.yaml")
    assert (
        str(info.value) == "p.yaml: stages[0].tasks.answer_key: verifier math compares with an answer: name its column"
    )
    with pytest.raises(ConfigError, match=r"^p.yaml: health.stop_on\[0\]: .*did you mean 'constant_reward'\?"):
        validate_pipeline(
            {"model": {"name": "tiny"}, "stages": [stage], "health": {"stop_on": ["constant_rewrd"]}}, "p.yaml"
        )


# ---------------------------------------------------------------- docs/tasks.md's GSM8K example, offline


def readme_hf_example() -> dict:
    """The `tasks:` mapping of the docs' Hugging Face dataset example (docs/tasks.md)."""
    text = (ROOT / "docs" / "tasks.md").read_text()
    start = text.index("**A Hugging Face dataset**")
    block = text[text.index("```yaml", start) + len("```yaml") : text.index("```", text.index("```yaml", start) + 7)]
    return yaml.safe_load(block)["tasks"]


def cached_gsm8k(home: Path, rows: list[dict]) -> None:
    """`openai/gsm8k` as the hub serves it (config `main`, a parquet file per split), in a
    Hugging Face cache under `home` that is read offline."""
    import datasets
    from test_hf_tasks import hub_cache

    snapshot = hub_cache(home, "openai/gsm8k")
    (snapshot / "main").mkdir(exist_ok=True)
    datasets.Dataset.from_list(rows).to_parquet(str(snapshot / "main" / "train-00000-of-00001.parquet"))
    (snapshot / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n---\n"
    )


def test_the_readme_gsm8k_example_validates_offline_and_without_its_format_is_refused(tmp_path):
    cached_gsm8k(tmp_path / "hf", gsm8k_rows(60))
    tasks = readme_hf_example()
    assert tasks["path"] == "openai/gsm8k" and tasks["answer_format"] == "gsm8k"
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    ENV.update(env)
    try:
        ok = validate(tmp_path, pipeline(tasks))
        assert ok.returncode == 0, ok.stderr
        without = {k: v for k, v in tasks.items() if k != "answer_format"}
        assert "`answer_format: gsm8k`" in refused(validate(tmp_path, pipeline(without)))
    finally:
        for key in env:
            ENV.pop(key)


# ---------------------------------------------------------------- runs (the real stack)


def start(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "posttrain.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**ENV, **(env or {})},
        cwd=ROOT,
    )


def metrics(run: Path, stage: str) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["stage"] == stage]


@pytest.mark.slow
@pytest.mark.system
def test_gsm8k_with_its_format_trains_with_a_signal_and_keep_last_survives_a_kill(tmp_path):
    """docs/tasks.md's example on a small GSM8K-shaped dataset (offline): SFT on its answers,
    then RL whose groups have non-zero advantages from the first step; `keep_last: 2` leaves
    two step checkpoints plus `final`, and a run killed mid-stage resumes."""
    cached_gsm8k(tmp_path / "hf", gsm8k_rows(60))
    tasks = readme_hf_example()
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    config = {
        "name": "gsm8k",
        "model": {"name": "tiny"},
        "rollout": {"max_model_len": 128, "kv_cache_gib": 0.25},
        "trainer": {"workers": 1},
        "wandb": {"enabled": False},
        "stages": [
            {"name": "sft", "type": "sft", "steps": 30, "lr": 2e-3, "batch_size": 16, "data": tasks},
            {
                "name": "rl",
                "type": "rl",
                "steps": 6,
                "lr": 1e-4,
                "prompts_per_step": 4,
                "group_size": 4,
                "max_tokens": 8,
                "save_every": 1,
                "keep_last": 2,
                "tasks": tasks,
            },
        ],
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    proc = start("run", str(tmp_path / "p.yaml"), "--run-dir", str(run), env=env)
    marker = run / "checkpoints" / "rl" / "step_000003" / "rollout_state.json"
    deadline = time.time() + 600
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert marker.exists(), proc.communicate()[0][-3000:] if proc.poll() is not None else "timed out"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    steps = sorted(p.name for p in (run / "checkpoints" / "rl").glob("step_*"))
    assert len(steps) <= 2 and steps[-1] >= "step_000003", steps  # older ones deleted as the run went

    resumed = start("run", "--resume", str(run), env=env)
    out = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, out[-3000:]
    left = sorted(p.name for p in (run / "checkpoints" / "rl").iterdir())
    assert left == ["final", "step_000004", "step_000005"], left
    rows = metrics(run, "rl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[0]["groups/zero_advantage_frac"] < 1.0, rows[0]  # a signal from the first step
    assert rows[0]["reward/std"] > 0 and "health/zero_advantage" not in rows[0]
    for r in rows:
        assert r["samples/unscored_frac"] == 0.0 and r["samples/dropped_frac"] < 0.5


@pytest.mark.slow
@pytest.mark.system
def test_a_run_whose_reward_is_constant_stops_after_its_steps(tmp_path):
    rows = [{"id": str(i), "prompt": f"Say something about the number {i}."} for i in range(20)]
    tasks = {"type": "user", "path": str(write_jsonl(tmp_path / "u.jsonl", rows)), "reward": "trap_rewards:constant"}
    config = {
        "name": "flat",
        "model": {"name": "tiny"},
        "rollout": {"max_model_len": 96, "kv_cache_gib": 0.25},
        "trainer": {"workers": 1},
        "wandb": {"enabled": False},
        "health": {"stop_after": 2},
        "stages": [
            {
                "name": "rl",
                "type": "rl",
                "steps": 10,
                "lr": 1e-4,
                "prompts_per_step": 2,
                "group_size": 2,
                "max_tokens": 4,
                "tasks": tasks,
            }
        ],
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    proc = start("run", str(tmp_path / "p.yaml"), "--run-dir", str(run))
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 1, out[-3000:]
    stops = [line for line in out.splitlines() if line.startswith("posttrain: ")]
    assert len(stops) == 1, out[-3000:]
    assert stops[0].startswith("posttrain: [rl] stopped at step 2: for 2 steps in a row its reward carried no signal")
    assert "every scored sample got 0.5" in stops[0] and stops[0].endswith("step_000002")
    assert (run / "checkpoints" / "rl" / "step_000002" / "rollout_state.json").is_file()  # nothing lost
    rows = metrics(run, "rl")
    assert [r["step"] for r in rows] == [1, 2] and all(r["health/constant_reward"] == 0.0 for r in rows)
    state = json.loads((run / "run_state.json").read_text())
    assert state["stages"]["rl"]["status"] == "running"  # not done: `--resume` could continue it
