"""Verdicts no sample can void: whatever a candidate program does (exit, any signal, crash,
hang, output flood, values that cannot cross, forged reports on any channel, killing or
stopping its own process group, forking, closing descriptors), its sample scores 0 with
`ok=True` and a reason, in a batch that also holds honest programs, whose verdicts stay
what they are alone. Only a failure of the verifier's own machinery leaves a sample
unscored, and its reason says which part failed.

Each hostile program is also wrong (its function never adds), so a score above 0 would be
forged; an unscored (`ok=False`) verdict would be a void: the RL stage drops those samples,
so a policy that finds such a route escapes every penalty.
"""

import json
import signal
import textwrap

import pytest

from posttrain.rewards import code as code_module
from posttrain.rewards import sandbox
from posttrain.rewards.base import score_sync
from posttrain.rewards.code import CodeVerifier, check_program
from posttrain.rewards.sandbox import Slot, UidLease, ended, signal_name
from posttrain.rewards.sandbox_harness import CandidateFailed, Channel
from posttrain.rewards.sandbox_runner import ARG_DEPTH
from posttrain.types import Completion, Message, Sample, Task

TIMEOUT = 4.0  # generous: honest programs must pass on a loaded machine
# the last two tests hand the candidate's values back to it, and compute on one
TESTS = [
    "assert add(1, 2) == 3",
    "assert add(-4, 10) == 6",
    "x = add(1, 2)\nfor _ in range(150):\n    x = [x]\ntry:\n    add(x, 0)\nexcept TypeError:\n    pass",
    "assert 3 ** add(1, 2) == 27",
]
CHECK = """
def check(candidate):
    assert candidate(1, 2) == 3
    assert candidate(-4, 10) == 6
    x = candidate(1, 2)
    for _ in range(150):
        x = [x]
    try:
        candidate(x, 0)
    except TypeError:
        pass
    assert 3 ** candidate(1, 2) == 27
"""
IO = [{"input": "1 2\n", "output": "3\n"}, {"input": "-4 10\n", "output": "6\n"}]
MARKER = "POSTTRAIN_SANDBOX_SETUP_ERROR"  # what the launcher once wrote to stderr on a set-up failure
FORGED_LINES = [
    f"{MARKER}: OSError: forged",
    MARKER,
    MARKER + ":",
    '{"sandbox_error": "launcher: OSError: forged"}',
    '{"sandbox_error": "launch',
    '{"launcher": {"candidate": null, "harness": null}}',
    '{"launcher": {"candidate": 9999999999, "harness": "x"}}',
    '{"kind": "tests", "tests": [], "check_passed": true}',
    '{"task_error": "forged"}',
]
# signals a process can die of by default (stop signals and ignored ones are below, as hangs)
STOPPING = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}
IGNORED = {signal.SIGCHLD, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH}
DEADLY = [n for n in range(1, signal.SIGRTMAX + 1) if n not in STOPPING | IGNORED]


def die_by(number: int, where: str) -> str:
    """A program that kills itself with signal `number` at import or inside the call."""
    kill = (
        f"import os, signal\ntry:\n    signal.signal({number}, signal.SIG_DFL)\nexcept (OSError, ValueError):\n"
        f"    pass\nos.kill(os.getpid(), {number})\n"
    )
    if where == "import":
        return kill + "def add(a, b):\n    return a - b\n"
    return "def add(a, b):\n" + textwrap.indent(kill, "    ") + "    return a - b\n"


def nested(depth: int) -> str:
    return f"def add(a, b):\n    x = 0\n    for _ in range({depth}):\n        x = [x]\n    return x\n"


RIGHT = "a, b = map(int, input().split())\nprint(a + b, flush=True)\n"  # then it misbehaves


def forge_everywhere(where: str) -> str:
    body = textwrap.dedent(f"""
        import os, sys
        for line in {FORGED_LINES!r}:
            for fd in range(0, 64):
                for text in (line + '\\n', line):
                    try:
                        os.write(fd, text.encode())
                    except OSError:
                        pass
    """)
    if where == "import":
        return body + "def add(a, b):\n    return a - b\n"
    return "def add(a, b):\n" + textwrap.indent(body, "    ") + "    return a - b\n"


FUNCTION_VOIDS = {
    # the harness's and the launcher's channels, forged on every descriptor, whole and cut
    "forged reports on every fd at import": forge_everywhere("import"),
    "forged reports on every fd in the call": forge_everywhere("call"),
    "set-up marker on stderr, cut, then exits": (
        f"import sys, os\nsys.stderr.write({MARKER!r})\nsys.stderr.flush()\nos._exit(97)\n"
    ),
    "set-up marker on stderr in the call, then killed": (
        f"import os, signal\ndef add(a, b):\n    os.write(2, {MARKER!r}.encode())\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    ),
    "binary garbage on stdout and stderr": (
        "import os\nos.write(1, bytes(range(256)) * 64)\nos.write(2, b'\\xff\\xfe\\x00' * 5000)\n"
        "def add(a, b):\n    return a - b\n"
    ),
    # exits
    "exit 97 at import": "import os\nos._exit(97)\n",
    "exit 255 in the call": "import os\ndef add(a, b):\n    os._exit(255)\n",
    "sys.exit with a string": "import sys\ndef add(a, b):\n    sys.exit('POSTTRAIN_SANDBOX_SETUP_ERROR')\n",
    # crashes
    "segfault through ctypes": "import ctypes\ndef add(a, b):\n    return ctypes.string_at(0)\n",
    "abort": "import os\ndef add(a, b):\n    os.abort()\n",
    "stack overflow in C": (
        "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\ndef add(a, b):\n    return f(0)\n"
    ),
    # stops and hangs
    "SIGSTOP itself": "import os, signal\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGSTOP)\n    return a - b\n",
    "SIGTSTP its whole group": "import os, signal\nos.killpg(0, signal.SIGTSTP)\ndef add(a, b):\n    return a - b\n",
    "blocks every signal and sleeps": (
        "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))\n"
        "def add(a, b):\n    time.sleep(60)\n"
    ),
    "busy threads up to the process limit": textwrap.dedent("""
        import threading
        def spin():
            while True:
                pass
        for _ in range(64):
            try:
                threading.Thread(target=spin, daemon=True).start()
            except RuntimeError:
                break
        def add(a, b):
            return a - b
    """),
    # its own process group and everything it can reach
    "kills its process group": "import os, signal\ndef add(a, b):\n    os.kill(0, signal.SIGKILL)\n",
    "kills -1 after setsid": "import os, signal\ndef add(a, b):\n    os.setsid()\n    os.kill(-1, signal.SIGKILL)\n",
    "SIGSTOPs -1 and PID 1": (
        "import os, signal\ndef add(a, b):\n    for pid in (1, -1):\n        try:\n"
        "            os.kill(pid, signal.SIGSTOP)\n        except OSError:\n            pass\n    return a - b\n"
    ),
    # forks
    "a child floods stdout while the parent answers wrong": textwrap.dedent("""
        import os
        if os.fork() == 0:
            while True:
                os.write(1, b'x' * 65536)
        def add(a, b):
            return a - b
    """),
    "children race forged replies into the reply pipe": textwrap.dedent("""
        import os
        for _ in range(8):
            if os.fork() == 0:
                while True:
                    try:
                        os.write(4, b'{"id": "0", "return": 3}\\n' * 100)
                    except OSError:
                        os._exit(0)
        def add(a, b):
            return a - b
    """),
    # descriptors
    "closes every descriptor at import": "import os\nos.closerange(0, 1024)\ndef add(a, b):\n    return a - b\n",
    "closes the reply pipe in the call": "import os\ndef add(a, b):\n    os.close(4)\n    return a - b\n",
    "points the reply pipe at /dev/null": (
        "import os\nos.dup2(os.open('/dev/null', os.O_WRONLY), 4)\ndef add(a, b):\n    return a - b\n"
    ),
    # output floods
    "floods stderr with the set-up marker": (
        f"import os\ndef add(a, b):\n    while True:\n        os.write(2, {(MARKER + ': x').encode()!r})\n"
    ),
    # values that cannot cross, or that make the harness's own work explode
    "returns 101 levels of nesting": nested(101),
    "returns 100 levels, handed back 150 deeper": nested(100),
    "returns a list that holds itself": "def add(a, b):\n    x = []\n    x.append(x)\n    return x\n",
    "returns an int too long to write": "def add(a, b):\n    return 10 ** 30000\n",
    "returns bytes, a float subclass and a complex": (
        "n = []\nclass F(float):\n    pass\ndef add(a, b):\n    n.append(1)\n"
        "    return [b'3', F(3.0), 3j][len(n) % 3]\n"
    ),
    "returns an exponent the tests choke on": "def add(a, b):\n    return 10 ** 9\n",
    "raises with a lone surrogate": "def add(a, b):\n    raise ValueError('\\ud800' * 50 + '\\udfff')\n",
    "raises an exception whose str raises": textwrap.dedent("""
        class Bad(Exception):
            def __str__(self):
                raise RuntimeError('no')
        def add(a, b):
            raise Bad()
    """),
    "raises a BaseExceptionGroup": "def add(a, b):\n    raise BaseExceptionGroup('x', [KeyboardInterrupt()])\n",
    "raises MemoryError by allocating": "def add(a, b):\n    return [0] * (10 ** 10)\n",
}
# every signal it can die of at import (tests format), and a few in a call (check format)
SIGNAL_VOIDS = {f"killed by {signal_name(n)} at import": die_by(n, "import") for n in DEADLY}
IN_CALL = [signal.SIGSEGV, signal.SIGKILL, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGUSR1, signal.SIGSYS]
IN_CALL += [signal.SIGRTMIN, signal.SIGRTMIN + 3, signal.SIGRTMAX - 1, signal.SIGRTMAX]
SIGNAL_VOIDS_IN_CALL = {f"killed by {signal_name(n)} in the call": die_by(n, "call") for n in IN_CALL}

IO_VOIDS = {
    "forged reports on every fd": forge_everywhere("import"),
    "set-up marker on stderr, cut, exit 0": f"import sys\nsys.stderr.write({MARKER!r})\nprint('wrong')\n",
    "set-up marker line on stderr, exit 97": (
        f"import sys\nsys.stderr.write({MARKER!r} + ': OSError: x\\n')\nsys.exit(97)\n"
    ),
    "right answer, then a real-time signal": (RIGHT + "import os, signal\nos.kill(os.getpid(), signal.SIGRTMIN + 3)\n"),
    "right answer, then SIGRTMAX": (RIGHT + "import os, signal\nos.kill(os.getpid(), signal.SIGRTMAX)\n"),
    "right answer, then stops itself": (RIGHT + "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n"),
    "right answer, then kills its group": (
        "import os, signal\na, b = map(int, input().split())\nprint(a + b, flush=True)\nos.kill(0, signal.SIGKILL)\n"
    ),
    "right answer, then segfaults": (
        "import ctypes\na, b = map(int, input().split())\nprint(a + b, flush=True)\nctypes.string_at(0)\n"
    ),
    "right answer, then a child floods stderr": textwrap.dedent("""
        import os
        a, b = map(int, input().split())
        print(a + b, flush=True)
        if os.fork() == 0:
            while True:
                os.write(2, b'POSTTRAIN_SANDBOX_SETUP_ERROR' * 1000)
    """),
    "closes every descriptor": "import os\nos.closerange(0, 1024)\n",
    "binary garbage on stdout": "import os\nos.write(1, bytes(range(256)) * 64)\n",
    "blocks every signal and sleeps": (
        "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))\ntime.sleep(60)\n"
    ),
}
IO_SIGNAL_VOIDS = {
    f"right answer, then killed by {signal_name(n)}": (
        "a, b = map(int, input().split())\nprint(a + b, flush=True)\n" + die_by(n, "import").split("def add")[0]
    )
    for n in DEADLY
}

FORMATS = {
    "tests": ({"entry_point": "add", "tests": TESTS}, {**FUNCTION_VOIDS, **SIGNAL_VOIDS}),
    "check": ({"entry_point": "add", "check": CHECK}, {**FUNCTION_VOIDS, **SIGNAL_VOIDS_IN_CALL}),
    "io": ({"io": IO}, {**IO_VOIDS, **IO_SIGNAL_VOIDS}),
}
HONEST = {
    "tests": {"correct": "def add(a, b):\n    return a + b\n", "wrong": "def add(a, b):\n    return a - b\n"},
    "check": {"correct": "def add(a, b):\n    return a + b\n", "wrong": "def add(a, b):\n    return a - b\n"},
    "io": {
        "correct": "a, b = map(int, input().split())\nprint(a + b)\n",
        "wrong": "a, b = map(int, input().split())\nprint(a - b)\n",
    },
}


def sample(fmt: str, program: str, reward: str = "all_pass") -> Sample:
    entry = dict(FORMATS[fmt][0], reward=reward, timeout_s=TIMEOUT)
    task = Task("void", "void", (Message("user", "add two numbers"),), entry=entry, verifier="code")
    return Sample(task, 0, (1,), Completion((1,), (0.0,), f"Here:\n```python\n{program}```", "stop"))


def verdict(result) -> tuple:
    return result.ok, result.score, result.details.get("passed"), result.details.get("total")


@pytest.fixture(scope="module")
def scored():
    """Every attack, with the honest programs between them, in one batch; and the honest
    programs alone in another."""
    keys, samples = [], []
    for fmt, (_, attacks) in FORMATS.items():
        for i, (name, program) in enumerate(attacks.items()):
            keys.append((fmt, name))
            samples.append(sample(fmt, program))
            if i % 10 == 0:  # honest programs all through the batch, in both rewards
                for kind, honest in HONEST[fmt].items():
                    for reward in ("all_pass", "fraction"):
                        keys.append((fmt, f"honest {kind} {reward} #{i}"))
                        samples.append(sample(fmt, f"{honest}# {i}\n", reward))  # not deduplicated
    alone_keys, alone = [], []
    for fmt, programs in HONEST.items():
        for kind, honest in programs.items():
            for reward in ("all_pass", "fraction"):
                alone_keys.append((fmt, kind, reward))
                alone.append(sample(fmt, honest, reward))
    verifier = CodeVerifier(workers=2)
    try:
        mixed = dict(zip(keys, score_sync(verifier, samples)))
        honest_alone = dict(zip(alone_keys, score_sync(verifier, alone)))
    finally:
        verifier.close()
    return mixed, honest_alone


CASES = [(fmt, name) for fmt, (_, attacks) in FORMATS.items() for name in attacks]


@pytest.mark.parametrize("fmt, name", CASES, ids=[f"{f}: {n}" for f, n in CASES])
def test_every_attack_scores_zero_and_is_scored(scored, fmt, name):
    result = scored[0][(fmt, name)]
    assert result.ok and result.score == 0.0 and result.reason, (result.reason, json.dumps(result.details)[:1500])
    result.reason.encode("utf-8")  # printable and writable whatever the candidate raised with
    json.dumps(result.details, ensure_ascii=False).encode("utf-8")


def test_honest_verdicts_are_the_same_in_a_batch_of_attacks(scored):
    mixed, alone = scored
    assert alone[("tests", "correct", "all_pass")].score == 1.0
    assert alone[("io", "correct", "all_pass")].score == 1.0
    assert alone[("check", "wrong", "all_pass")].score == 0.0
    assert all(r.ok for r in alone.values())
    honest = {k: r for k, r in mixed.items() if k[1].startswith("honest")}
    assert len(honest) >= 3 * 4 * 5
    for (fmt, label), result in honest.items():
        kind, reward = label.split()[1:3]
        assert verdict(result) == verdict(alone[(fmt, kind, reward)]), (fmt, label, result.reason)


def test_the_battery_covers_every_class():
    assert len(DEADLY) >= 50 and signal.SIGRTMIN + 3 in DEADLY and signal.SIGRTMAX in DEADLY
    assert len(FUNCTION_VOIDS) >= 30 and len(IO_VOIDS) >= 10


def test_every_signal_has_a_name_and_a_fate():
    for number in range(1, signal.SIGRTMAX + 1):
        assert signal_name(number)
        assert ended(number) == f"killed by {signal_name(number)}"  # a wait status of a signal death
    assert signal_name(signal.SIGRTMIN + 6) == "SIGRTMIN+6" and signal_name(200) == "signal 200"
    assert ended(97 << 8) == "exited with code 97" and "killed" in ended(None)


def test_an_argument_that_cannot_cross_fails_the_call_not_the_task():
    import os

    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    channel = Channel(requests_w, replies_r, deadline=1e12, reply_bytes=2**20)
    value = 0
    for _ in range(ARG_DEPTH + 1):
        value = [value]
    with pytest.raises(CandidateFailed, match="cannot cross"):
        channel.proxy("add")(value, 0)
    assert channel.failures == 1 and not channel.task_errors and channel.calls == 0
    for fd in (requests_r, requests_w, replies_r, replies_w):
        os.close(fd)


# ---------------------------------------------------------------- the verifier's own failures


@pytest.fixture
def slot():
    with UidLease(2) as lease:
        yield Slot(*lease.uids)


ENTRY = {"entry_point": "add", "tests": ["assert add(1, 2) == 3"], "reward": "all_pass", "timeout_s": TIMEOUT}


def test_a_sandbox_that_cannot_start_the_program_is_unscored_and_says_where(slot, monkeypatch):
    real = sandbox._spec
    monkeypatch.setattr(sandbox, "_spec", lambda *a, **k: dict(real(*a, **k), python="/nonexistent/python"))
    for entry in (ENTRY, {"io": IO, "reward": "all_pass", "timeout_s": TIMEOUT}):
        result = check_program("def add(a, b):\n    return a + b\n", entry, slot)
        assert not result.ok and result.status == "error", result
        assert "sandbox setup failed" in result.reason and "candidate set-up" in result.reason, result.reason


def test_a_launcher_that_dies_is_unscored_and_says_so(slot, monkeypatch, tmp_path):
    dead = tmp_path / "launcher.py"
    dead.write_text("import sys\nsys.stdin.read()\nsys.exit(3)\n")
    monkeypatch.setattr(sandbox, "LAUNCHER", str(dead))
    result = check_program("def add(a, b):\n    return a + b\n", ENTRY, slot)
    assert not result.ok and "launcher ended (exit code 3) without its report" in result.reason, result.reason


def test_a_verifier_error_leaves_only_its_own_sample_unscored(monkeypatch):
    real = code_module.check_program

    def flaky(program, entry, slot):
        if "BREAK THE VERIFIER" in program:
            raise RuntimeError("a bug of the verifier")
        return real(program, entry, slot)

    monkeypatch.setattr(code_module, "check_program", flaky)
    honest = HONEST["tests"]["correct"]
    samples = [sample("tests", honest), sample("tests", "# BREAK THE VERIFIER\n" + honest), sample("tests", honest)]
    verifier = CodeVerifier(workers=2)
    try:
        results = score_sync(verifier, samples)
    finally:
        verifier.close()
    assert [r.ok for r in results] == [True, False, True] and [r.score for r in results] == [1.0, 0.0, 1.0]
    assert results[1].reason == "verifier error: RuntimeError: a bug of the verifier"


# The verifier's own process with every signal it can touch blocked and ignored, through raw
# system calls as a non-libc parent (a CI agent, a container runtime) may leave them: libc
# will not touch 32 and 33, and blocked masks and ignored actions both survive exec.
HOSTILE_PARENT = """
import ctypes, json, os, sys
sys.path[:0] = json.loads(sys.argv[1])
import test_reward_voids as t
from posttrain.rewards.base import score_sync
from posttrain.rewards.code import CodeVerifier

libc = ctypes.CDLL(None, use_errno=True)
ignore = (ctypes.c_ulong * 8)(1)  # SIG_IGN, no flags, empty mask
for n in range(1, 65):
    if n not in (9, 17, 19):  # SIGCHLD stays: the verifier waits for its children
        libc.syscall(ctypes.c_long(13), ctypes.c_long(n), ignore, None, ctypes.c_long(8))
every = ctypes.c_ulong(2**64 - 1)
assert libc.syscall(ctypes.c_long(14), ctypes.c_long(0), ctypes.byref(every), None, ctypes.c_long(8)) == 0
status = open("/proc/self/status").read()
assert "SigBlk:\\tfffffffe7ffbfeff" in status or "SigBlk:\\tfffffffffffbfeff" in status, status
names = json.loads(sys.argv[2])
samples = [t.sample(fmt, {**t.FORMATS[fmt][1], **t.HONEST[fmt]}[name]) for fmt, name in names]
verifier = CodeVerifier(workers=2)
try:
    print(json.dumps([[r.ok, r.score, r.reason] for r in score_sync(verifier, samples)]))
finally:
    verifier.close()
"""


@pytest.mark.skipif(__import__("platform").machine() != "x86_64", reason="raw x86_64 signal system calls")
def test_a_parent_that_blocks_and_ignores_signals_changes_no_verdict():
    import os
    import subprocess
    import sys

    deaths = [32, 33, signal.SIGRTMIN, signal.SIGTERM, signal.SIGUSR1, signal.SIGRTMAX]
    names = [("io", f"right answer, then killed by {signal_name(n)}") for n in deaths]
    names += [("check", f"killed by {signal_name(signal.SIGRTMAX)} in the call"), ("io", "correct")]
    here = os.path.dirname(os.path.abspath(__file__))
    path = json.dumps([here, os.path.dirname(here)])
    out = subprocess.run(
        [sys.executable, "-c", HOSTILE_PARENT, path, json.dumps(names)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    for (fmt, name), (ok, score, reason) in zip(names[:-1], results[:-1]):
        assert ok and score == 0.0 and ("killed by" in reason or fmt != "io"), (fmt, name, reason)
    assert results[-1][:2] == [True, 1.0], results[-1]
