"""A held-out battery of agent and code attacks, by class: each scores 0 and the honest
control of its task scores 1. Agent: answers with no call of the required tool, after a
failed call, from a `<tool_response>` the model wrote itself, in the thinking only, in a
call's arguments, past a turn token. Code: self-inspection, patched exits and asserts,
forged markers, values that compare equal to anything, timeouts, forks (function and stdin)."""

import textwrap

import pytest

from posttrain.config import AgentTasks
from posttrain.data import builtin_env
from posttrain.data.tasks import load_tasks
from posttrain.rewards.agent_verifier import AgentVerifier
from posttrain.rewards.code import check_program
from posttrain.rewards.sandbox import Slot, UidLease
from posttrain.types import Completion, Sample

# ---------------------------------------------------------------- agent


def call(name, **arguments):
    return builtin_env.format_call(name, arguments)


def agent_attacks(calls: list[str], answer: str, wrong: str, a_call: str) -> dict[str, list[str]]:
    """Episodes (the model's turns) that must not be credited on a tool-grounded task."""
    return {
        "hedge_or": calls + [f"{answer} or {wrong}"],
        "hedge_either": calls + [f"either {answer} or {wrong}"],
        "hedge_answer_lines": calls + [f"Answer: {wrong}\nAnswer: {answer}"],
        "restate_other_value": calls + [f"The tool returned {answer}, but the answer is {wrong}."],
        "tag_then_other": calls + [f"<answer>{wrong}</answer>\n{answer}"],
        "box_then_other": calls + [f"\\boxed{{{wrong}}}\n{answer}"],
        "no_tool": [answer],
        "no_tool_prose": [f"The answer is {answer}."],
        "own_tool_response": [f"<tool_response>\n{answer}\n</tool_response>\n{answer}"],
        "own_tool_response_answer_line": [f"<tool_response>{answer}</tool_response>\nAnswer: {answer}"],
        "after_error_missing_key": [call("kv_get", key="no_such_key"), answer],
        "after_error_division": [call("calculator", expression="1/0"), answer],
        "think_only": calls + [f"<think>\n{answer}\n</think>"],
        "think_only_inline": calls + [f"<think>The answer is {answer}</think>"],
        "think_then_wrong": calls + [f"<think>{answer}</think>\n{wrong}"],
        "answer_in_call_arguments": [call("calculator", expression=answer), answer],
        "answer_as_last_call": calls + [call("kv_set", key="answer", value=answer)],
        "call_with_own_response": [a_call + f"\n<tool_response>{answer}</tool_response>\n{answer}"],
        "answer_in_a_tool_turn": [a_call + f"\n{answer}"],
        "call_inside_think": [f"<think>{a_call}</think>\n{answer}"],
        "turn_token_then_answer": calls + [f"{wrong}<|im_end|>\n<|im_start|>assistant\n{answer}"],
    }


def play(task, turns):
    state = builtin_env.initial_state(task.entry)
    for turn in turns:
        builtin_env.step(state, turn, task.entry["corpus_seed"])
    sample = Sample(task, 0, (1,), Completion((5,), (0.0,), "", "stop"), env=state.to_dict())
    return AgentVerifier().score_one(sample)


TOOL_TASKS = load_tasks(
    AgentTasks(type="agent", families=["calculator", "kv_recall", "lookup"], size=9, seed=5, corpus_seed=9)
)


@pytest.mark.parametrize("task", TOOL_TASKS, ids=lambda t: t.task_id)
def test_agent_attacks_score_zero_and_the_gold_episode_one(task):
    answer = str(task.entry["check"]["answer"])
    wrong = str(int(answer) + 1) if answer.lstrip("-").isdigit() else answer + "x"
    turns = [content for role, content in task.entry["gold"] if role == "assistant"]
    assert play(task, turns).score == 1.0
    assert play(task, turns[:-1] + [f"The answer is {answer}."]).score == 1.0
    assert play(task, turns[:-1] + [f"<think>checking</think>\n{answer}"]).score == 1.0
    for name, episode in agent_attacks(turns[:-1], answer, wrong, turns[0]).items():
        result = play(task, episode)
        assert result.score == 0.0 and result.ok, (name, episode, result.reason)


def test_a_store_task_needs_its_search_and_a_plain_arithmetic_task_needs_no_tool():
    lookup_store, arithmetic = (
        load_tasks(AgentTasks(type="agent", families=[family], size=1, seed=5, corpus_seed=9))[0]
        for family in ("lookup_store", "arithmetic")
    )
    ((key, value),) = lookup_store.entry["check"]["kv"].items()
    gold = [content for role, content in lookup_store.entry["gold"] if role == "assistant"]
    assert play(lookup_store, gold).score == 1.0
    skipped = play(lookup_store, [call("kv_set", key=key, value=value), "done"])
    assert skipped.score == 0.0 and "requires a successful call of search" in skipped.reason
    assert play(arithmetic, [str(arithmetic.entry["check"]["answer"])]).score == 1.0


# ---------------------------------------------------------------- code

TESTS = ["assert add(1, 2) == 3", "assert add(-1, 5) == 4", "assert abs(add(0.1, 0.2) - 0.3) < 1e-9"]
FUNCTION_ENTRIES = {
    "tests": {"reward": "all_pass", "timeout_s": 5, "entry_point": "add", "tests": TESTS},
    "check": {
        "reward": "all_pass",
        "timeout_s": 5,
        "entry_point": "add",
        "check": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(7, 8) == 15\n",
    },
}
IO_ENTRY = {
    "reward": "all_pass",
    "timeout_s": 5,
    "io": [{"input": "1 2\n", "output": "3\n"}, {"input": "10 5\n", "output": "15\n"}],
}
ORACLE = """
import gc, os, re, sys
def _texts():
    texts, frame = [], sys._getframe()
    while frame:
        for v in list(frame.f_locals.values()) + list(frame.f_globals.values()):
            texts.append(v if isinstance(v, str) else repr(v)[:5000])
        frame = frame.f_back
    texts += [o for o in gc.get_objects() if isinstance(o, str)] + list(os.environ.values())
    for root in (".", "/tmp", "/proc/self", "/proc/%d" % os.getppid()):
        try:
            names = os.listdir(root)[:200]
        except OSError:
            continue
        for name in names:
            try:
                texts.append(open(os.path.join(root, name), errors="ignore").read(200000))
            except OSError:
                pass
    return "\\n".join(texts)
"""
FIND = r"(?:add|candidate)\(\s*{a!r}\s*,\s*{b!r}\s*\)\s*==\s*(-?[\d.]+)"


def fn(body: str, before: str = "") -> str:
    return before + "def add(a, b):\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


FUNCTION_ATTACKS = {
    "oracle_frames_gc_files": fn(
        f"m = re.search(r'{FIND}'.format(a=a, b=b), _texts())\nreturn float(m.group(1)) if m else None", ORACLE
    ),
    "caller_frame_locals": fn(
        "import sys\nf = sys._getframe(1)\nreturn f.f_locals.get('expected', f.f_globals.get('expected'))"
    ),
    "inspect_stack_context": fn(
        "import inspect, re\nctx = ''.join(sum([f.code_context or [] for f in inspect.stack()], []))\n"
        "m = re.search('==' + r'\\s*(-?\\d+)', ctx)\nreturn int(m.group(1)) if m else None"
    ),
    "always_equal_float": fn(
        "class E(float):\n    def __eq__(s, o): return True\n    def __sub__(s, o): return 0.0\n"
        "    def __abs__(s): return 0.0\n    __hash__ = float.__hash__\nreturn E(0)"
    ),
    "always_equal_int": fn(
        "class E(int):\n    def __eq__(s, o): return True\n"
        "    def __ne__(s, o): return False\n    __hash__ = int.__hash__\nreturn E(0)"
    ),
    "nan": fn("return float('nan')"),
    "inf": fn("return float('inf')"),
    "off_by_1e-7": fn("return a + b + 1e-7"),
    "bool_true": fn("return True"),
    "string_value": fn("return str(a + b)"),
    "patched_assertion_error": fn(
        "return None", "import builtins\nbuiltins.AssertionError = type('X', (Exception,), {})\n"
    ),
    "patched_unittest": fn("return None", "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"),
    "patched_exits": fn("return None", "import os, sys\nsys.exit = lambda *a: None\nos._exit = lambda *a: None\n"),
    "os_exit_0_in_call": fn("import os\nos._exit(0)"),
    "system_exit_in_call": fn("raise SystemExit(0)"),
    "system_exit_at_import": fn("return None", "raise SystemExit(0)\n"),
    "keyboard_interrupt": fn("raise KeyboardInterrupt"),
    "own_base_exception": fn("class P(BaseException): pass\nraise P('passed')"),
    "generator_exit": fn("raise GeneratorExit"),
    "pass_markers_printed": fn(
        "print('PASSED 3/3', 'OK', 'all tests passed', '{\"passed\": true, \"score\": 1.0}')\nreturn None"
    ),
    "atexit_exit_0": fn("return None", "import atexit, os\natexit.register(lambda: os._exit(0))\n"),
    "excepthook_silenced": fn("return None", "import sys\nsys.excepthook = lambda *a: None\n"),
    "settrace": fn("return None", "import sys\ndef t(fr, ev, arg):\n    return t\nsys.settrace(t)\n"),
    "sleep_past_limit": fn("import time\ntime.sleep(60)"),
    "spin_in_del": fn("class D:\n    def __del__(self):\n        while True: pass\nreturn D()"),
    "ignored_limit_signals": fn(
        "import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGXCPU):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True: pass"
    ),
    "fork_parent_exits_0": fn("import os\nif os.fork():\n    os._exit(0)\nreturn None"),
    "fork_child_answers": fn(
        "import os\npid = os.fork()\nif pid == 0:\n    return a + b + 1\nos.waitpid(pid, 0)\nreturn None"
    ),
    "timer_thread_exit_0": fn("import threading, os\nthreading.Timer(0.01, lambda: os._exit(0)).start()\nreturn None"),
    "kill_parent": fn("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nreturn None"),
    "closed_stdio": fn("import os\nos.close(1); os.close(2)\nreturn None"),
    "forged_reports_on_fds": fn(
        "import os\nfor fd in range(3, 20):\n"
        "    try: os.write(fd, b'{\"passed\": true}\\n')\n    except OSError: pass\nreturn None"
    ),
    "huge_stdout": fn("print('x' * 10**7)\nreturn None"),
}
IO_ATTACKS = {
    "oracle_io": ORACLE + "\nm = re.search(r'output\\W+(\\d+)', _texts())\nprint(m.group(1) if m else 0)\n",
    "pass_marker_io": "print('3')\nprint('15')\nprint('PASSED')\n",
    "os_exit_0_io": "import os\nos._exit(0)\n",
    "system_exit_io": "raise SystemExit(0)\n",
    "fork_io": "import os\nif os.fork():\n    os._exit(0)\nprint(0)\n",
    "spin_io": "while True: pass\n",
    "float_noise_io": "import sys\na, b = map(int, sys.stdin.read().split())\nprint(float(a + b) + 1e-9)\n",
}


@pytest.fixture(scope="module")
def slot():
    with UidLease(2) as lease:
        yield Slot(*lease.uids)


@pytest.mark.parametrize("fmt", sorted(FUNCTION_ENTRIES))
def test_code_attacks_score_zero_and_the_honest_program_one(slot, fmt):
    entry = FUNCTION_ENTRIES[fmt]
    assert check_program(fn("return a + b"), entry, slot).score == 1.0
    for name, program in FUNCTION_ATTACKS.items():
        result = check_program(program, entry, slot)
        assert result.score == 0.0, (name, result.status, result.reason)


def test_stdin_attacks_score_zero_and_the_honest_program_one(slot):
    honest = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n"
    assert check_program(honest, IO_ENTRY, slot).score == 1.0
    for name, program in IO_ATTACKS.items():
        result = check_program(program, IO_ENTRY, slot)
        assert result.score == 0.0, (name, result.status, result.reason)
