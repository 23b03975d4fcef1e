"""The code sandbox against hostile programs: each one fails its sample with a reason,
and the parent (this test process) is untouched and never hangs."""

import os
import socket
import time

import pytest

from posttrain.rewards.code import check_program
from posttrain.rewards.sandbox import Limits, SandboxPool, Slot, UidLease, kill_uid, kill_uids, run_program

FAST = Limits(wall_seconds=4, cpu_seconds=2, memory_bytes=256 * 2**20, max_processes=8, output_bytes=16384)


def run(program, limits=FAST, stdin=""):
    with UidLease(1) as lease:
        started = time.perf_counter()
        verdict = run_program(program, limits, uid=lease.uids[0], stdin=stdin)
        # a limit against a hang (which waits forever), not a speed check: room for a loaded machine
        assert time.perf_counter() - started < limits.wall_seconds + 15, "the parent waited too long"
        assert kill_uid(lease.uids[0]) == 0, "a sandboxed process outlived its run"
    return verdict


def check(program, entry):
    with UidLease(2) as lease:
        result = check_program(program, {"reward": "all_pass", "timeout_s": 4, **entry}, Slot(*lease.uids))
        assert kill_uids(set(lease.uids)) == 0, "a sandboxed process outlived its check"
    return result


def test_correct_program_passes_and_wrong_fails():
    program = "def add(a, b):\n    return a + b\n"
    assert check(program, {"entry_point": "add", "tests": ["assert add(2, 3) == 5"]}).status == "passed"
    wrong = check("def add(a, b):\n    return a - b\n", {"entry_point": "add", "tests": ["assert add(2, 3) == 5"]})
    assert wrong.status == "failed" and wrong.score == 0 and "AssertionError" in wrong.tests[0]["error"]


def test_program_reads_its_stdin_and_its_output_comes_back():
    verdict = run("import sys\nprint(sys.stdin.read()[::-1])", stdin="abc")
    assert verdict.status == "passed" and verdict.stdout == b"cba\n"
    assert run("print(input())").status == "error"  # stdin empty: EOFError, never the parent's stdin


@pytest.mark.parametrize(
    "name, program, status, words",
    [
        ("infinite loop", "while True:\n    pass\n", "timeout", "CPU time"),
        ("sleeping forever", "import time\ntime.sleep(100)\n", "timeout", "wall clock"),
        ("memory bomb", "x = bytearray(2**34)\n", "memory", "memory limit"),
        ("growing memory", "x = []\nwhile True:\n    x.append(' ' * 2**20)\n", "memory", "memory limit"),
        ("huge output", "while True:\n    print('x' * 1000)\n", "killed", "output over"),
        ("huge file", "f = open('big', 'w')\nwhile True:\n    f.write('x' * 2**20)\n", "killed", "file size"),
    ],
)
def test_resource_abuse_is_stopped(name, program, status, words):
    # the CPU limit must hit first even when the machine is busy: a wall clock well above it
    limits = Limits(**{**FAST.__dict__, "wall_seconds": 20}) if words == "CPU time" else FAST
    if status == "memory":  # page faults under a host's memory pressure are CPU time (reclaim): the memory limit
        limits = Limits(**{**FAST.__dict__, "wall_seconds": 30, "cpu_seconds": 20})  # must be what stops it
    verdict = run(program, limits=limits)
    assert verdict.status == status and words in verdict.reason, (name, verdict)


def test_fork_bomb_is_contained():
    program = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    verdict = run(program)
    assert verdict.status in ("timeout", "killed"), verdict


LEFT = "left a process running"
FORKS = {  # each prints the right line and exits 0; what its children do decides
    "a child it waited for": ("import os\nif os.fork() == 0:\n    os._exit(0)\nos.wait()\nprint(3)\n", "passed"),
    "a detached child (setsid)": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint(3)\n",
        LEFT,
    ),
    "a sleeping child": ("import os, time\nprint(3, flush=True)\nif os.fork() == 0:\n    time.sleep(60)\n", LEFT),
    "a grandchild whose parent exited": (
        "import os, time\nprint(3, flush=True)\nif os.fork() == 0:\n    if os.fork() == 0:\n        time.sleep(60)\n",
        LEFT,
    ),
    "a stopped child": (
        "import os, signal\nprint(3, flush=True)\nif os.fork() == 0:\n    os.kill(os.getpid(), signal.SIGSTOP)\n",
        LEFT,
    ),
}


@pytest.mark.parametrize("name", FORKS)
def test_a_program_that_leaves_a_process_running_fails_and_the_process_is_killed(name):
    # a child left running could still write (or flood) its output: a verdict that waited on the
    # scheduler would pass or fail by chance; `run` checks that nothing of the uid outlives the run
    program, want = FORKS[name]
    for _ in range(3):
        verdict = run(program)
        if want == "passed":
            assert verdict.status == "passed" and verdict.stdout == b"3\n", (name, verdict)
        else:
            assert verdict.status == "killed" and want in verdict.reason, (name, verdict)


def test_cannot_read_system_or_project_files():
    here = os.path.abspath(__file__)
    for path in ("/etc/passwd", here, os.path.expanduser("~/.bashrc"), "/proc/1/environ"):
        verdict = run(f"print(open({path!r}).read())")
        assert verdict.status == "error" and (
            "FileNotFoundError" in verdict.reason or "PermissionError" in verdict.reason
        ), (path, verdict)
    listing = run("import os\nprint(sorted(os.listdir('/')))")
    assert "work" not in listing.stdout_tail and "etc" not in listing.stdout_tail


def test_cannot_reach_a_listening_host_port():
    """A real server on the host's loopback: the program's connect fails (its namespace
    has no network), and no connection ever arrives."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        program = (
            "import socket\n"
            "for host in ('127.0.0.1', 'localhost', '0.0.0.0'):\n"
            "    try:\n"
            f"        socket.create_connection((host, {port}), timeout=1)\n"
            "        print('connected', host)\n"
            "    except OSError as exc:\n"
            "        print('refused', host, type(exc).__name__)\n"
        )
        verdict = run(program)
        with pytest.raises(socket.timeout):
            server.accept()  # nothing connected, not even late
    assert verdict.status == "passed" and "connected" not in verdict.stdout_tail, verdict
    assert verdict.stdout_tail.count("refused") == 3, verdict


def test_cannot_signal_the_parent():
    program = f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\n"
    verdict = run(program)
    assert verdict.status == "error" and (
        "PermissionError" in verdict.reason or "ProcessLookupError" in verdict.reason
    ), verdict


def test_cannot_delete_files():
    marker = os.path.abspath(__file__)
    verdict = run("import shutil\nshutil.rmtree('/usr')\n")
    assert verdict.status == "error"
    assert os.path.exists(marker) and os.path.isdir("/usr/lib")


def test_two_pools_on_one_machine_never_share_a_uid():
    """Two runs on one machine: each pool's slots hold uids no other pool has, so killing
    what one slot left behind can never kill another run's program."""
    first, second = SandboxPool(workers=2, limits=FAST), SandboxPool(workers=2, limits=FAST)
    try:
        uids = lambda pool: {u for slot in pool._slots for u in (slot.candidate, slot.harness)}  # noqa: E731
        assert not uids(first) & uids(second) and len(uids(first)) == 4
        slow = "import time\ntime.sleep(1.5)\n"
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as both:
            a = both.submit(first.map, [slow] * 2)
            b = both.submit(second.map, ["x = 2"] * 8)  # its slots are cleaned 8 times
            assert [v.status for v in a.result() + b.result()] == ["passed"] * 10
    finally:
        first.close()
        second.close()
    import fcntl

    from posttrain.rewards.sandbox import LEASE_DIR

    for uid in uids(first):  # released on close: the uids are free again
        fd = os.open(LEASE_DIR / f"{uid}.lock", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)


def test_pool_runs_checks_in_parallel_slots():
    pool = SandboxPool(workers=2, limits=FAST)
    entry = {"entry_point": "f", "reward": "all_pass", "timeout_s": 4}
    try:
        results = pool.run(
            lambda job, slot: check_program(job[0], dict(entry, tests=[job[1]]), slot),
            [(f"def f():\n    return {i}", f"assert f() == {i}") for i in range(6)]
            + [("def f(): return 1", "assert f() == 2")],
        )
    finally:
        pool.close()
    assert [r.status for r in results] == ["passed"] * 6 + ["failed"]


def test_humaneval_canonical_solutions_pass_and_broken_ones_fail():
    """All 164 HumanEval problems in the two-sandbox check (format `check`, the prompt as
    trusted context): canonical solutions pass, a solution that raises fails."""
    from posttrain.config import CodingTasks
    from posttrain.data.tasks import load_tasks
    from posttrain.rewards.base import score_sync
    from posttrain.rewards.code import CodeVerifier
    from posttrain.types import Completion, Sample

    tasks = load_tasks(CodingTasks(type="coding", split="humaneval"))
    broken = [t.entry["context"] + "    raise ValueError('broken')\n" for t in tasks[:40]]  # prompt + a body
    verifier = CodeVerifier(workers=2)
    try:
        good = score_sync(verifier, [Sample(t, 0, (1,), Completion((1,), (0.0,), t.answer, "stop")) for t in tasks])
        bad = score_sync(
            verifier, [Sample(t, 0, (1,), Completion((1,), (0.0,), b, "stop")) for t, b in zip(tasks, broken)]
        )
    finally:
        verifier.close()
    failures = [(t.task_id, r.reason) for t, r in zip(tasks, good) if r.score != 1.0]
    assert not failures, failures[:5]
    assert len(good) == 164 and all(r.ok and r.score == 0.0 for r in bad), [r.reason for r in bad if r.score]


def test_cli_prints_one_json_verdict_and_exits_0(tmp_path):
    import json
    import subprocess
    import sys

    (tmp_path / "p.py").write_text("while True:\n    pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "sandbox", str(tmp_path / "p.py"), "--timeout", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == "timeout" and {
        "reason",
        "stdout_tail",
        "stderr_tail",
        "wall_seconds",
        "peak_memory_bytes",
    } <= set(verdict)


def test_cli_checks_a_program_against_a_tests_file(tmp_path):
    import json
    import subprocess
    import sys

    (tmp_path / "p.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "t.py").write_text("import math\nassert add(1, 2) == 3\nassert add(2, 2) == 5\n")
    (tmp_path / "check.py").write_text("def check(candidate):\n    assert candidate(2, 2) == 4\n")

    def cli(*args):
        cmd = [sys.executable, "-m", "posttrain.cli", "sandbox", str(tmp_path / "p.py"), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    verdict = json.loads(cli("--tests", str(tmp_path / "t.py")).stdout)
    assert (verdict["status"], verdict["passed"], verdict["total"]) == ("failed", 1, 2)
    assert [t["passed"] for t in verdict["tests"]] == [True, False]
    passed = json.loads(cli("--tests", str(tmp_path / "check.py"), "--entry-point", "add").stdout)
    assert passed["status"] == "passed" and passed["score"] == 1.0
    missing = cli("--tests", str(tmp_path / "t.py"), "--entry-point", "nope")
    assert json.loads(missing.stdout)["score"] == 0.0  # the proxy calls a function the program lacks
    bad = cli("--entry-point", "add")
    assert bad.returncode == 2 and "--entry-point needs --tests" in bad.stderr
