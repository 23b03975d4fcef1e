"""The suite's xdist scheduling (tests/xdist_scheduling.py) on a small suite of its own, run
as `make test` runs: a worker that dies never hangs the run, and a test that takes a worker
down fails the run, named, with the dead worker's stacks (a crash is never passed as green)."""

import collections
import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).parent

FILES = {
    "test_a.py": "def test_a1(): pass\ndef test_a2(): pass\ndef test_a3(): pass\n",
    "test_b.py": textwrap.dedent("""
        import ctypes, os, pathlib
        def test_crash_once():
            marker = pathlib.Path(os.environ["CRASH_MARKER"])
            if not marker.exists():
                marker.write_text("crashed once")
                ctypes.string_at(0)  # a segfault, as a native library's bug would cause
        def test_b_after(): pass
    """),
    "test_c.py": "import os\ndef test_c_before(): pass\ndef test_always_crashes(): os._exit(1)\n"
    "def test_c_after(): pass\n",
    **{f"test_d{i}.py": f"def test_d{i}(): pass\n" for i in range(4)},
}


def test_a_crashed_worker_never_hangs_the_run_and_its_test_fails_the_run(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(TESTS), "CRASH_MARKER": str(tmp_path / "marker")}
    env.pop("POSTTRAIN_TEST_FAULTS", None)  # this run's controller makes its own folder
    args = ["-n", "2", "--dist", "loadfile", "-p", "xdist_scheduling", "-p", "no:cacheprovider", "-o", "addopts="]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-rA", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,  # xdist 3.8's own scheduling hangs here until killed
        env=env,
        cwd=tmp_path,
    )
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    assert "2 failed, 10 passed" in out and "rerun" not in out, out[-3000:]
    assert "FAILED test_c.py::test_always_crashes" in out and "FAILED test_b.py::test_crash_once" in out
    # the rest of each crashed file still runs, on a fresh worker
    assert "PASSED test_b.py::test_b_after" in out and "PASSED test_c.py::test_c_after" in out
    assert "crashed while running 'test_b.py::test_crash_once'" in out
    # the segfault's Python stack is in the log, from the dead worker's faulthandler file
    assert "Python stacks at the crash" in out and "Segmentation fault" in out, out[-3000:]
    assert 'test_b.py", line 7 in test_crash_once' in out, out[-3000:]


class _DeadWorker:
    """A worker whose channel closed after its last report: every send raises, as execnet's does."""

    shutting_down = False

    class gateway:  # noqa: N801 (xdist's attribute)
        id = "gw9"

    def send_runtest_some(self, indices):
        raise OSError("cannot send (already closed?)")

    def shutdown(self):
        raise OSError("cannot send (already closed?)")


def test_a_worker_that_died_before_its_next_file_is_left_for_xdist_to_remove():
    """Seen on a fast CPU: the controller handled a worker's last report after the worker
    had exited, and the send of its next file raised out of xdist's loop (INTERNALERROR)."""
    from xdist_scheduling import CrashSafeLoadFileScheduling

    sched = object.__new__(CrashSafeLoadFileScheduling)  # the unit alone, without a pytest session
    sched.crashes, sched.workqueue, sched.numnodes = {}, collections.OrderedDict(), 2
    node = _DeadWorker()
    sched.registered_collections = {node: ["c.py::c1", "c.py::c2", "c.py::c3", "d.py::d1"]}
    sched.assigned_work = {node: {"c.py": {"c.py::c1": True, "c.py::c2": False, "c.py::c3": False}}}
    sched.workqueue["d.py"] = {"d.py::d1": False}
    sched._reschedule(node)  # raised OSError before
    assert "d.py" in sched.assigned_work[node] and not sched.workqueue
    assert sched.remove_node(node) == "c.py::c2"  # the test it died in: reported failed
    assert list(sched.workqueue) == ["c.py", "d.py"]  # nothing it was given is lost
    assert sched.workqueue["c.py"] == {"c.py::c1": True, "c.py::c2": True, "c.py::c3": False}  # c2 not run again
