"""The code verifier's three test formats on the real two-sandbox check: what crosses the
boundary, how exceptions come back, partial credit, each task's own time limit, and the
entry schema; the wire's strict decoding on its own."""

import json
import math
import re
import time

import pytest

from posttrain.data.coding import validate_entry
from posttrain.rewards.base import score_sync
from posttrain.rewards.code import CodeVerifier, check_program
from posttrain.rewards.sandbox import Slot, UidLease
from posttrain.rewards.sandbox_harness import WireError, loads
from posttrain.rewards.sandbox_runner import decode, encode, to_json
from posttrain.types import Completion, Message, Sample, Task


@pytest.fixture(scope="module")
def slot():
    with UidLease(2) as lease:
        yield Slot(*lease.uids)


def entry(**fields):
    return {"reward": "all_pass", "timeout_s": 5, **fields}


def test_plain_values_cross_the_boundary_both_ways(slot):
    program = "def echo(x):\n    return x\n"
    values = [
        "None",
        "True",
        "0",
        "-(10**200)",
        "1.5",
        "float('inf')",
        "-0.0",
        "'é\\n\\x00'",
        "[1, [2, []]]",
        "(1, (2,))",
        "{'a': 1, 2: 'b', (1, 2): None, None: [1]}",
        "{1, 'x', (1,)}",
        "frozenset({1})",
    ]
    tests = [f"assert echo({v}) == {v} and type(echo({v})) is type({v})" for v in values]
    tests += ["import math\nassert math.isnan(echo(float('nan')))", "assert echo(x=3) == 3"]
    result = check_program(program, entry(entry_point="echo", tests=tests), slot)
    assert result.score == 1.0, [t for t in result.tests if not t["passed"]]


def test_candidate_exceptions_come_back_as_builtin_types(slot):
    program = (
        "class Mine(Exception):\n    pass\n"
        "def f(kind):\n"
        "    if kind == 'value':\n        raise ValueError('bad value')\n"
        "    if kind == 'mine':\n        raise Mine('custom')\n"
        "    if kind == 'exit':\n        raise SystemExit(0)\n"
        "    return kind\n"
    )
    tests = [
        "try:\n    f('value')\nexcept ValueError as exc:\n    assert str(exc) == 'bad value'\n"
        "else:\n    raise AssertionError",
        "try:\n    f('mine')\nexcept Exception as exc:\n    assert 'Mine: custom' in str(exc)",
        # a test that swallows every Exception cannot turn a SystemExit into a pass
        "try:\n    f('exit')\nexcept Exception:\n    pass",
        "assert f('ok') == 'ok'",  # the candidate is still alive after the SystemExit
    ]
    result = check_program(program, entry(entry_point="f", tests=tests, reward="fraction"), slot)
    assert [t["passed"] for t in result.tests] == [True, True, False, True], result.tests
    assert result.score == pytest.approx(3 / 4)


def test_a_dead_candidate_fails_the_call_and_every_later_test(slot):
    program = "import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return x\n"
    tests = ["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3", "assert True"]
    result = check_program(program, entry(entry_point="f", tests=tests, reward="fraction"), slot)
    assert [t["passed"] for t in result.tests] == [True, False, False, False]
    assert "gone" in result.tests[1]["error"] and result.tests[3]["error"].startswith("not run")


def test_check_format_fraction_and_where_it_stopped(slot):
    check = (
        "def check(candidate):\n"
        "    assert True, 'not counted: tests nothing'\n"
        "    assert candidate(1) == 2\n"
        "    assert candidate(2) == 4\n"
        "    for i in range(3):\n"
        "        assert candidate(i) == 2 * i\n"
        "    value = candidate(-1)\n"  # raises in the candidate: the check stops here
        "    assert value == -2\n"
    )
    half = "def f(x):\n    if x < 0:\n        raise ValueError\n    return 2 * x if x != 1 else 3\n"
    result = check_program(half, entry(entry_point="f", check=check, reward="fraction"), slot)
    assert [t["passed"] for t in result.tests] == [False, True, False, False]
    assert result.tests[3]["error"].startswith("not reached") and result.score == pytest.approx(1 / 4)
    right = "def f(x):\n    return 2 * x\n"
    assert check_program(right, entry(entry_point="f", check=check), slot).score == 1.0
    assert check_program(half, entry(entry_point="f", check=check), slot).score == 0.0


def test_check_context_holds_trusted_helpers(slot):
    context = "def helper(n):\n    return n * 10\n\ndef f(n):\n    '''stub: the candidate writes it'''\n"
    check = "def check(candidate):\n    assert candidate(3) == helper(3) + 1\n"
    good = check_program("def f(n):\n    return 31\n", entry(entry_point="f", check=check, context=context), slot)
    assert good.score == 1.0, good.reason
    helper_only = "def helper(n):\n    return 0\ndef f(n):\n    return 1\n"  # the candidate's helper is not the tests'
    assert check_program(helper_only, entry(entry_point="f", check=check, context=context), slot).score == 0.0


def test_io_format_compares_whitespace_normalized_and_gives_partial_credit(slot):
    io = [{"input": "1 2\n", "output": "3\n"}, {"input": "2 2\n", "output": "4"}, {"input": "5 5\n", "output": "10\n"}]
    program = "a, b = map(int, input().split())\nprint('  ', a + b if a != 2 else 5, '\\n\\n')\n"
    result = check_program(program, entry(io=io, reward="fraction"), slot)
    assert [t["passed"] for t in result.tests] == [True, False, True] and result.score == pytest.approx(2 / 3)
    assert check_program(program, entry(io=io), slot).tests[-1]["error"].startswith("not run")


def test_each_task_has_its_own_time_limit():
    program = "import time\ndef f():\n    time.sleep(1.5)\n    return 1\n"
    tasks = [
        Task(
            f"t{limit}",
            "t",
            (Message("user", "x"),),
            entry=entry(entry_point="f", tests=["assert f() == 1"], timeout_s=limit),
            verifier="code",
        )
        for limit in (60.0, 0.8)  # 1.5 s of sleep: well inside 60 s however loaded the machine
    ]
    verifier = CodeVerifier(workers=2)
    try:
        started = time.perf_counter()
        slow, fast = score_sync(
            verifier, [Sample(t, 0, (1,), Completion((1,), (0.0,), program, "stop")) for t in tasks]
        )
        took = time.perf_counter() - started
    finally:
        verifier.close()
    assert slow.score == 1.0 and fast.score == 0.0 and "time limit" in fast.reason, (slow.reason, fast.reason)
    assert took < 120  # against a hang: neither task waited for another's limit


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"entry_point": "f"}, "exactly one of `tests`, `check`, `io`"),
        ({"entry_point": "f", "tests": ["assert f() == 1"], "io": []}, "exactly one"),
        ({"tests": ["assert f() == 1"]}, "entry_point"),
        ({"entry_point": "f", "tests": []}, "non-empty list"),
        ({"entry_point": "f", "tests": ["assert f( == 1"]}, "tests[0] is not valid Python"),
        ({"entry_point": "f", "check": "assert True"}, "define a function check"),
        ({"entry_point": "f", "check": "def check(c): pass", "context": "def ("}, "context is not valid"),
        ({"io": [{"input": "1"}]}, "exactly `input` and `output`"),
        ({"io": [{"input": "1", "output": 2}]}, "must be strings"),
        ({"io": [{"input": "1", "output": "2"}], "entry_point": "f"}, "no entry_point"),
        ({"entry_point": "f", "tests": ["assert f()"], "reward": "most"}, "reward must be"),
        ({"entry_point": "f", "tests": ["assert f()"], "timeout_s": 0}, "timeout_s"),
    ],
)
def test_entry_schema_names_the_problem(bad, words):
    with pytest.raises(ValueError, match=None) as caught:
        validate_entry({"reward": "all_pass", "timeout_s": 5, **bad})
    assert words in str(caught.value), str(caught.value)


def test_keys_of_other_layers_are_left_alone():
    # SFT scratchpads and MOPD's cell fields travel in the same entry
    extra = {"scratchpads": {"full": "1+2=3"}, "cell": "coding-max", "effort": "max", "budget": 40}
    checked = validate_entry({"entry_point": "f", "tests": ["assert f()"], **extra})
    assert checked["scratchpads"] == {"full": "1+2=3"} and checked["cell"] == "coding-max"


def test_a_broken_task_is_unscored_not_zero(slot):
    result = check_program("def f():\n    return 1\n", entry(entry_point="f", tests=["assert f() ==="]), slot)
    assert not result.ok and result.reason.startswith("task error")
    context_fails = entry(entry_point="f", tests=["assert f() == 1"], context="raise RuntimeError('broken context')")
    result = check_program("def f():\n    return 1\n", context_fails, slot)
    assert not result.ok and "broken context" in result.reason


@pytest.mark.parametrize(
    "line, words",
    [
        (b'{"id": 1, "id": 2}', "duplicate key"),
        (b'{"id": "x", "return": NaN}', "bare NaN"),
        (b"[" * 5000 + b"]" * 5000, "not wire JSON"),
        (b'{"id": "x", "return": ' + b"9" * 30000 + b"}", "not wire JSON"),
    ],
)
def test_reply_parsing_is_strict(line, words):
    with pytest.raises(WireError, match=re.escape(words)):
        loads(line)


@pytest.mark.parametrize(
    "form, words",
    [
        ({"$float": "1.5"}, "bad $float"),
        ({"$code": []}, "unknown tag"),
        ({"$tuple": [], "$set": []}, "exactly one tag"),
        ({"$set": [[1]]}, "unhashable"),
        ({"$dict": [[1, 2, 3]]}, "pairs"),
        ({"a": 1}, "unknown tag"),
    ],
)
def test_decoding_rejects_what_is_not_the_grammar(form, words):
    with pytest.raises(WireError, match=re.escape(words)):
        decode(form)


def test_encoding_round_trips_and_refuses_subclasses():
    value = {"k": [1, (2.5, None), {3}, frozenset(), float("-inf")], 7: True}
    assert decode(json.loads(to_json(encode(value)))) == value
    assert math.isnan(decode(json.loads(to_json(encode(float("nan"))))))
    for bad in (type("I", (int,), {})(1), object(), b"bytes", [1, type("S", (str,), {})("x")]):
        with pytest.raises(WireError):
            encode(bad)


def test_the_sandbox_path_loads_only_fast_modules():
    """Every check starts the launcher and the candidate's runner afresh: neither may pull
    in json, re, enum, ctypes or the signal module (each a few ms of every check)."""
    import subprocess
    import sys
    from pathlib import Path

    import posttrain

    root = str(Path(posttrain.__file__).parent.parent)
    probe = (
        f"import sys; sys.path.insert(0, {root!r}); import posttrain.rewards.sandbox_harness; "
        "import posttrain.rewards.sandbox_runner; "
        "print(sorted({'json', 're', 'enum', 'ctypes', 'signal', 'pydantic'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
