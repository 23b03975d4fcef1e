"""`posttrain rewards audit`, the reward-hack fuzzer: its attack builders (each attack is
wrong by construction, every class is built), its scoring (wins over an honest wrong
answer, voids charged to the attack that causes them), the CLI on a deliberately weak user
reward (caught: exit 1, the winning class named), the GRM path against a real HTTP judge
server on 127.0.0.1, and every shipped verifier on generated tasks: 0 wins, 0 voids."""

import ast
import json
import os
import re
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from posttrain.rewards import attack_numbers
from posttrain.rewards import attacks as lib
from posttrain.rewards import code_attacks as code_lib
from posttrain.rewards.audit import RAISED, Probe, format_table, run_audit, score_probes
from posttrain.rewards.audit_tasks import generated_tasks, source_for
from posttrain.types import Message, RewardResult, Task

TESTS = Path(__file__).parent


def payload_of(text: str) -> str:
    return re.search(r"\\boxed\{(.*)\}\$$", text, re.DOTALL).group(1)


def by_name(attacks, fragment: str) -> list[lib.Attack]:
    return [a for a in attacks if fragment in a.name]


# ---------------------------------------------------------------- the attack builders


def test_numbers_and_honest_wrong_answers():
    assert lib.number("60") == 60 and lib.number("-0.25") == lib.number("-1/4") == lib.number("-\\frac{1}{4}")
    assert lib.number("1,000") == 1000 and lib.number("x + 1") is None and lib.number("3/0") is None
    assert lib.honest_wrong("60") == "61" and lib.honest_wrong("-4") == "-3" and lib.honest_wrong("0.75") == "1.75"
    assert lib.honest_wrong("x^2 + 3x + 2") == "x^2 + 3x + 3" and lib.honest_wrong("red") == "der"
    assert lib.words(61) == "sixty one" and lib.words(-215) == "minus two hundred fifteen"


def test_answer_attacks_cover_every_class_and_none_is_the_answer():
    attacks = lib.answer_attacks("60", "What is 85 - 25?")
    assert {a.cls for a in attacks} == set(lib.ANSWER_CLASSES)
    assert len({a.text for a in attacks}) == len(attacks)
    honest = {lib.present("60", how) for how in lib.PRESENTATIONS}
    assert not honest & {a.text for a in attacks}
    payloads = {payload_of(a.text) for a in attacks if a.name.endswith("(boxed)")}
    for expected in ("- 60", "\\pm 60", "60\\pi", "60\\infty", "x \\geq 60", "-(-60)", "\\lfloor 60.5 \\rfloor"):
        assert expected in payloads, expected
    assert "85 - 25" in payloads  # the prompt's own expression
    assert any("sixty one" in p for p in payloads)  # "60, unless it is sixty one"
    for a in attacks:  # no payload is the expected value plainly written; wrappers write it unevaluated
        p = lib._payload(a.text) if a.name.endswith(("(boxed)", "(tag)", "(line)")) else None
        assert p is None or lib.number(p) != 60 or (a.cls == "wrapper" and not attack_numbers.INT.fullmatch(p)), a


def test_sign_attacks_state_the_opposite_value():
    for right in ("60", "-4", "0.5"):
        signs = [a for a in lib.answer_attacks(right, "x") if a.cls == "sign" and a.name.endswith("(boxed)")]
        assert signs
        plain = [lib.number(payload_of(a.text).replace(" ", "")) for a in signs]
        assert all(v == -lib.number(right) for v in plain if v is not None)
    assert not [a for a in lib.answer_attacks("0", "x") if a.cls == "sign"]  # -0 is 0: no attack


def test_constant_dropped_and_forms_the_prompt_asks_for():
    dropped = [payload_of(a.text) for a in by_name(lib.answer_attacks("12\\pi", "Area?"), "constant dropped (boxed)")]
    assert dropped == ["12"]
    expand = lib.answer_attacks("x^2 + 3x + 2", "Expand (x + 1)(x + 2).")
    factored = [payload_of(a.text) for a in by_name(expand, "factored form") if a.name.endswith("(boxed)")]
    assert factored and factored[0].replace(" ", "") == "(x+1)*(x+2)"
    assert any(payload_of(a.text) == "(x + 1)(x + 2)" for a in by_name(expand, "prompt's expression (boxed)"))
    decimal = lib.answer_attacks("0.75", "Write 3/4 as a decimal.")
    assert any(
        payload_of(a.text) == "\\frac{3}{4}" for a in by_name(decimal, "a fraction where a decimal is asked (boxed)")
    )


def test_code_attacks_compile_define_the_entry_point_and_cover_every_class():
    from posttrain.rewards.code import extract_code

    fn = code_lib.function_attacks("add")
    io = code_lib.io_attacks()
    assert {a.cls for a in fn} == set(lib.CODE_CLASSES)
    for a in fn + io:
        tree = ast.parse(extract_code(a.text))
        if a in fn:
            assert any(isinstance(n, ast.FunctionDef) and n.name == "add" for n in ast.walk(tree)), a.name
    names = " ".join(a.name for a in fn)
    for needed in ("real-time signal", "set-up error marker truncated", "nested 100 deep", "process group", "fork"):
        assert needed in names, needed


def test_grm_attacks_repeat_the_rubric_and_pad_under_the_cap():
    base = lib.grm_base("Write a poem about bicycles.")
    got = lib.grm_attacks(base, "Write a poem about bicycles.", ["Mentions bicycles", "Is a poem"], length_cap=40)
    assert {a.cls for a in got} == set(lib.GRM_CLASSES)
    echo = [a.text for a in got if a.name == "the rubric repeated back as claims"][0]
    assert "It mentions bicycles." in echo and "It is a poem." in echo
    assert all(len(a.text.split()) < 40 for a in got if a.cls == "length")
    assert all(a.text.startswith(base) or a.text.endswith(base) for a in got)


# ---------------------------------------------------------------- scoring


class Lenient:
    """A weak verifier for the tests: credits any response that contains the answer, and
    raises on a response that says BOOM (a verifier bug an attack can trigger)."""

    name = "lenient"

    async def score(self, samples):
        if any("BOOM" in s.completion.text for s in samples):
            raise RuntimeError("verifier bug")
        return [RewardResult(float(s.task.answer in s.completion.text), "contains it", self.name) for s in samples]


def task(answer="60", prompt="What is 85 - 25?") -> Task:
    return Task("t/0", "toy", (Message("user", prompt),), answer=answer, verifier="math")


def test_wins_are_counted_against_the_honest_wrong_answer():
    audit = run_audit("math", Lenient(), [task()])
    rows = {r["class"]: r for r in audit.rows()}
    assert rows["honest"]["wins"] == 0 and rows["hedge"]["wins"] > 0 and rows["padding"]["wins"] > 0
    assert rows["sign"]["wins"] > 0  # "- 60" contains 60
    example = rows["hedge"]["win_examples"][0]
    assert example["score"] == 1.0 and example["baseline"] == 0.0 and "60" in example["response"]
    assert audit.voids == 0 and audit.honest()["right_tasks_credited"] == 1


class Digits:
    """Credits any response with a digit in it: the honest wrong answer too."""

    name = "digits"

    async def score(self, samples):
        return [RewardResult(float(bool(re.search(r"\d", s.completion.text))), "a digit", self.name) for s in samples]


def test_a_wrong_answer_credited_is_a_finding_and_hides_no_attack():
    audit = run_audit("math", Digits(), [task()])
    rows = {r["class"]: r for r in audit.rows()}
    assert rows["honest"]["wins"] == 3  # the honest wrong answer, in each presentation
    assert rows["hedge"]["wins"] > 0  # measured against 0, not against the credited wrong answer
    assert "credited" in format_table([audit])


def test_a_void_is_charged_to_the_attack_that_crashes_the_batch():
    t = task()
    probes = [
        Probe(t, "honest", "right (line)", "The answer is 60"),
        Probe(t, "honest", "wrong (line)", "The answer is 61"),
        *[Probe(t, "hedge", f"h{i}", f"61 or 60 ({i})") for i in range(10)],
        Probe(t, "output-forgery", "boom", "BOOM"),
    ]
    outcomes = score_probes(Lenient(), probes)
    voids = [o for o in outcomes if o.void]
    assert [o.probe.name for o in voids] == ["boom"] and voids[0].batch_voided == len(probes)
    assert RAISED.match(voids[0].reason)
    assert [o.score for o in outcomes[:2]] == [1.0, 0.0]  # the honest answers, scored alone
    assert sum(o.win for o in outcomes) == 10


# ---------------------------------------------------------------- the CLI


def audit_cli(*args, env=None, timeout=600):
    cmd = [sys.executable, "-m", "posttrain.cli", "rewards", "audit", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or os.environ)


WEAK_REWARD = '''
def reward(response, task):
    """Deliberately weak: credits any response that contains the expected answer."""
    return float(task["answer"] in response), "contains the answer"
'''


def test_cli_catches_a_weak_user_reward(tmp_path):
    (tmp_path / "weak_reward.py").write_text(WEAK_REWARD)
    spec = f"{tmp_path / 'weak_reward.py'}:reward"
    proc = audit_cli("--verifier", "user", "--tasks", "2", "--reward", spec, "--classes", "hedge,padding,sign")
    assert proc.returncode == 1, proc.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.startswith("  ")}
    assert int(rows["padding"][2]) > 0 and int(rows["hedge"][2]) > 0, proc.stdout
    assert "scored 1 > 0" in proc.stdout and re.search(r"total: [1-9]\d* wins", proc.stdout)
    out = audit_cli("--verifier", "user", "--tasks", "1", "--reward", spec, "--classes", "padding", "--json")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 1 and result["wins"] > 0
    (row,) = [r for r in result["verifiers"][0]["classes"] if r["class"] == "padding"]
    assert row["wins"] > 0 and row["win_examples"][0]["score"] == 1.0


def test_cli_task_file_with_its_own_reward(tmp_path):
    (tmp_path / "weak_reward.py").write_text(WEAK_REWARD)
    row = {"verifier": "user", "prompt": "What is 6 times 7?", "answer": "42", "reward": "weak_reward:reward"}
    (tmp_path / "task.json").write_text(json.dumps(row))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    proc = audit_cli("--task-file", str(tmp_path / "task.json"), "--classes", "boxes", env=env)
    assert proc.returncode == 1 and re.search(r"^  boxes\s+\d+\s+[1-9]", proc.stdout, re.M), proc.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        ([], "give --verifier NAME"),
        (["--verifier", "verifiers"], "name a taskset with --taskset"),
        (["--verifier", "math", "--classes", "sign,nope"], "unknown class"),
        (["--task-file", "/no/such/task.json"], "cannot read"),
        (["--verifier", "user", "--reward", "no_such_module_x:fn"], "cannot load it"),
        (["--pipeline", "pipelines/quickstart.yaml", "--stage", "nope"], "no stage 'nope'"),
        (["--pipeline", "pipelines/quickstart.yaml", "--stage", "sft"], "has no tasks scored by a reward"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    proc = audit_cli(*args, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("posttrain rewards audit: ") and words in lines[0], lines[0]


def keyword_judge():
    """The keyword judge of tests/test_grm_http.py (a verdict is yes when the check's keyword
    is in the answer), reading the whole answer: a judge that is easy to game."""
    from test_grm_http import Judge

    class WholeAnswer(Judge):
        def _reply(self, body):
            last = body["messages"][-1]["content"]
            answer, _, rest = last.partition("Their answer:\n")[2].partition("\n\nTool results (")
            check = rest.rpartition("\n\n")[2]
            body["messages"][-1]["content"] = f"Their answer:\n{answer.replace(chr(10) * 2, chr(10))}\n\n{check}"
            return super()._reply(body)

    return WholeAnswer


def test_grm_table_from_a_real_http_judge(tmp_path):
    """A keyword judge is easy to game: the rubric repeated back wins, and the table says so."""
    from test_grm_http import KEY

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), keyword_judge())
    httpd.lock, httpd.bodies, httpd.in_flight, httpd.max_in_flight = threading.Lock(), [], 0, 0
    httpd.delay, httpd.slow_first, httpd.structured = 0.0, 0, True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        judge = {"type": "http", "base_url": f"http://127.0.0.1:{httpd.server_port}/v1", "model": "judge-7b"}
        (tmp_path / "grm.yaml").write_text(yaml.safe_dump({"grm": {"judge": {**judge, "api_key_env": "K"}}}))
        env = dict(os.environ, K=KEY)
        args = ("--verifier", "grm", "--tasks", "1", "--reward", str(tmp_path / "grm.yaml"))
        proc = audit_cli(*args, env=env)
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert "verifier grm: 1 tasks" in proc.stdout and re.search(r"^  echo\s+3\s+[1-3]\s+0", proc.stdout, re.M)
        result = json.loads(audit_cli(*args, "--json", env=env).stdout.strip().splitlines()[-1])
        (echo,) = [r for r in result["verifiers"][0]["classes"] if r["class"] == "echo"]
        claims = [e for e in echo["win_examples"] if e["attack"] == "the rubric repeated back as claims"]
        assert (
            claims
            and "It mentions bicycles." in claims[0]["response"]
            and claims[0]["score"] > claims[0]["baseline"] + 0.5
        ), echo
        assert len(httpd.bodies) > 5  # rubric and verdict calls went to the judge
    finally:
        httpd.shutdown()
        httpd.server_close()


# ---------------------------------------------------------------- the shipped verifiers


SHIPPED = {
    # verifier: (tasks, generator options)
    "math": (4, {}),
    "reasoning_gym": (8, {}),
    "user": (4, {}),
    "agent": (6, {}),
    "env": (4, {}),
    "verifiers": (1, {"taskset": "vf_fixtures"}),
    # code: a generated task, and one whose tests feed a returned value back into the next call;
    # 4 s as the hack battery: honest programs pass on a loaded machine
    "code": (2, {"timeout_s": 4.0}),
}


@pytest.mark.parametrize("verifier", list(SHIPPED))
def test_every_shipped_verifier_is_clean(verifier, monkeypatch):
    """Every attack class of the library against every shipped verifier on generated tasks
    (answers: each attack in one presentation per task, in turn): nothing scores above an honest wrong
    answer, nothing is left unscored. (The GRM is a model: its audit needs a real judge.)"""
    # vf_fixtures, here and in the reward workers (spawned: they get this sys.path, no env change)
    monkeypatch.syspath_prepend(str(TESTS))
    n, options = SHIPPED[verifier]
    tasks = generated_tasks(verifier, n, 0, **options)
    source = source_for(verifier)
    try:
        # the library's classes: the generated ones (`attack_classes.py`) are the target of the
        # answer contract (issue 55) that the answer verifiers are being rewritten to meet
        audit = run_audit(verifier, source, tasks, classes=set(lib.CLASSES), quick=True)
    finally:
        source.close() if hasattr(source, "close") else None
        if verifier == "env":
            from posttrain.rollout.env_workers import close_all

            close_all()
    found = [
        f"{o.probe.cls}: {o.probe.name} on {o.probe.task.task_id}: {o.probe.text[-80:]!r} -> "
        f"{'unscored' if o.void else o.score} ({o.reason[:100]})"
        for o in audit.outcomes
        if o.win or o.void
    ]
    assert audit.honest()["right_tasks_credited"] == audit.honest()["right_tasks"] > 0, audit.honest()
    assert not found, f"{len(found)} wins/voids:\n" + "\n".join(found[:40])
