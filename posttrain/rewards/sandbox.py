"""Running model-written Python in a sandbox, and the verdict.

Each program runs in its own process, in namespaces of its own (mount, network, IPC, UTS,
PID), chrooted into a private root that holds only read-only system and Python files and
a size-limited tmpfs work folder; with rlimits on CPU time, address space, processes,
file size and open files; as an unprivileged uid leased machine-wide (`UidLease`), so no
other pool or run on the machine uses it. The parent enforces wall time and output size,
and on the way out kills every process of the uids (a fork bomb that called setsid too).

`run_program` runs a program alone (stdin given, stdout returned). `run_function` runs a
candidate program and, on another uid in other namespaces, the trusted test harness that
calls the candidate's function through pipes (`sandbox_harness.py`).

Whatever is trusted reports on a pipe of this process that the candidate never holds: the
launcher's set-up failures, the harness's report, and the launcher's last line with how
each side ended. Stdout and stderr, which the candidate shares, are never read for a
verdict. So whatever the candidate does (any exit code or signal, output, a forged report)
makes a verdict of its run; only a failure of the sandbox itself (status `sandbox_error`)
leaves a check unscored.
What it guarantees and what it does not is in docs/rewards.md (What a reward guarantees).
"""

from __future__ import annotations

import fcntl
import json
import marshal
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

UID_BASE = 61100  # 61000..61099 were slot uids before leases: a run of an older version may still use them
UID_COUNT = 900  # sandbox uids are 61100..61999, each leased to one worker slot at a time
LEASE_DIR = Path(tempfile.gettempdir()) / "posttrain-sandbox-uids"
HERE = Path(__file__).parent
LAUNCHER = str(HERE / "sandbox_exec.py")
RUNNER = (HERE / "sandbox_runner.py").read_text()
REPORT_GRACE_S = 2.0  # the harness reports at the time limit; the parent kills this much later


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 512 * 2**20
    max_processes: int = 16
    file_bytes: int = 8 * 2**20
    disk_bytes: int = 32 * 2**20
    output_bytes: int = 64 * 1024
    reply_bytes: int = 2**20  # one reply of the candidate to the harness
    report_bytes: int = 4 * 2**20  # the harness's report


@dataclass(frozen=True)
class Verdict:
    status: str  # passed, timeout, memory, killed, error (the program's); sandbox_error (the sandbox's own)
    reason: str
    stdout_tail: str
    stderr_tail: str
    wall_seconds: float
    peak_memory_bytes: int
    returncode: int | None
    stdout: bytes = field(default=b"", repr=False)  # all of it (up to the output cap); not in to_json

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if k != "stdout"})


@dataclass(frozen=True)
class FunctionRun:
    """A candidate checked by the harness: the harness's report (None if it sent none),
    how the launcher saw both sides end, and the run as a whole (limits, output tails)."""

    report: dict | None
    launcher: dict | None
    process: Verdict


@dataclass(frozen=True)
class Slot:
    """The uids of one worker slot: the candidate's and the harness's."""

    candidate: int
    harness: int


def _tail(data: bytes, n: int = 2000) -> str:
    return data[-n:].decode("utf-8", "replace")


def _read_capped(stream, sink: bytearray, cap: int, over: threading.Event, on_over=None) -> None:
    while chunk := stream.read(65536):
        if len(sink) < cap:
            sink += chunk[: cap - len(sink)]
        if len(sink) >= cap and not over.is_set():
            over.set()
            if on_over is not None:
                on_over()


def kill_uid(uid: int) -> int:
    return kill_uids({uid})


def kill_uids(uids: set[int]) -> int:
    """SIGKILL every process owned by one of `uids`, until none is left (forks race the scan)."""
    killed = 0
    for _ in range(50):
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
            except (OSError, ValueError):
                continue
            # zombies are already dead: they wait for init to reap them
            if int(fields["Uid"].split()[0]) in uids and not fields["State"].strip().startswith("Z"):
                found.append(int(pid))
        if not found:
            return killed
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    return killed


class UidLease:
    """Sandbox uids held by this process alone, machine-wide: one lock file per uid, held
    with flock while the lease lives (the kernel drops it if the process dies). Two runs,
    two pools or a `posttrain sandbox` call on one machine never share a uid, so one can
    never kill or exhaust the processes of another's programs."""

    def __init__(self, count: int):
        LEASE_DIR.mkdir(parents=True, exist_ok=True)
        self.fds: dict[int, int] = {}
        for uid in range(UID_BASE, UID_BASE + UID_COUNT):
            if len(self.fds) == count:
                break
            fd = os.open(LEASE_DIR / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            kill_uid(uid)  # whatever a crashed earlier holder left behind
            self.fds[uid] = fd
        if len(self.fds) < count:
            self.release()
            raise RuntimeError(
                f"no {count} free sandbox uids in {UID_BASE}..{UID_BASE + UID_COUNT - 1}: "
                f"other sandbox pools on this machine hold them (locks in {LEASE_DIR})"
            )

    @property
    def uids(self) -> list[int]:
        return list(self.fds)

    def release(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}

    def __enter__(self) -> UidLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _spec(limits: Limits, mode: str, root: str, **sides) -> dict:
    return {
        "mode": mode,
        "python": os.path.realpath(sys._base_executable),
        "python_prefix": sys.base_prefix,
        **{k: int(v) for k, v in asdict(limits).items() if k not in ("wall_seconds", "output_bytes")},
        **{name: dict(side, name=name, root=os.path.join(root, name)) for name, side in sides.items()},
    }


@dataclass(frozen=True)
class _Launched:
    """How one launcher run went: what the trusted pipe carried, and what the parent saw."""

    returncode: int
    cause: str | None  # timeout, output (the parent killed it) or None
    out: bytes
    err: bytes
    wall: float
    peak: int
    report: dict | None  # the harness's report
    launcher: (
        dict | None
    )  # the launcher's last line: each side's wait status (a program alone: and if it left one running)
    sandbox_errors: list[str]


def _launch(spec: dict, limits: Limits, uids: set[int], wall: float) -> _Launched:
    """Start the launcher on `spec`, wait for it (killing it and all of `uids` past `wall`
    seconds or the output cap), and read what it reported on its own pipe."""
    started, cause = time.perf_counter(), None
    report_r, report_w = os.pipe()
    report, report_over, report_stream = bytearray(), threading.Event(), os.fdopen(report_r, "rb")
    try:
        proc = subprocess.Popen(
            # -S: the launcher is stdlib-only, and Python starts 4x faster without site
            [sys.executable, "-I", "-S", "-B", LAUNCHER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            pass_fds=(report_w,),
        )
    finally:
        os.close(report_w)  # the launcher and the sides it starts hold it; the reader sees the end when all exit
    out, err, over = bytearray(), bytearray(), threading.Event()
    stop = lambda: _kill(proc.pid, uids)  # noqa: E731  past the output cap, from the reader thread
    readers = [
        threading.Thread(target=_read_capped, args=(s, b, limits.output_bytes, over, stop), daemon=True)
        for s, b in ((proc.stdout, out), (proc.stderr, err))
    ]
    readers.append(
        threading.Thread(
            target=_read_capped, args=(report_stream, report, limits.report_bytes, report_over), daemon=True
        )
    )
    for r in readers:
        r.start()
    try:
        proc.stdin.write(marshal.dumps(dict(spec, report_fd=report_w)))
        proc.stdin.close()
    except BrokenPipeError:  # the launcher died at start: no launcher line says so
        pass
    exited = os.pidfd_open(proc.pid)  # readable once the launcher exits: no polling
    try:
        if not select.select([exited], [], [], max(started + wall - time.perf_counter(), 0))[0]:
            _kill(proc.pid, uids)
            cause = "timeout"
    finally:
        os.close(exited)
    _, status, rusage = os.wait4(proc.pid, 0)
    if cause is None and over.is_set():
        cause = "output"
    proc.returncode = os.waitstatus_to_exitcode(status)
    if cause or proc.returncode != 0:
        # the launcher waited for each namespace's PID 1, whose exit kills all inside:
        # only a launcher that was killed or failed can leave a process behind
        kill_uids(uids)
    for r in readers:
        r.join(timeout=2)
    if not readers[-1].is_alive():
        report_stream.close()
    seconds = time.perf_counter() - started
    harness, launcher, errors = _parse_report(b"" if report_over.is_set() else bytes(report))
    if report_over.is_set():
        harness = None  # over the cap: the harness's report is cut, so it counts as none
    return _Launched(
        proc.returncode, cause, bytes(out), bytes(err), seconds, rusage.ru_maxrss * 1024, harness, launcher, errors
    )


def run_program(program: str, limits: Limits = Limits(), uid: int | None = None, stdin: str = "") -> Verdict:
    """Run `program` alone as `uid` (one this process leased, or one leased for this run),
    with `stdin` as its standard input, and judge how it ended."""
    if uid is None:
        with UidLease(1) as lease:
            return run_program(program, limits, lease.uids[0], stdin)
    root = tempfile.mkdtemp(prefix="posttrain-sandbox-")
    try:
        side = {"uid": uid, "files": {"main.py": program}, "argv": ["main.py"], "stdin": stdin}
        spec = _spec(limits, "program", root, candidate=side)
        launched = _launch(spec, limits, {uid}, limits.wall_seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return _judge(launched, limits, limits.wall_seconds, function=False)


def run_function(program: str, harness: dict, limits: Limits, slot: Slot) -> FunctionRun:
    """Run `program` as the candidate (module `solution`, stdin /dev/null) and the harness
    with `harness` (its spec: tests, entry point, time limit) on the slot's two uids."""
    candidate = {"uid": slot.candidate, "files": {"runner.py": RUNNER, "solution.py": program}, "argv": ["runner.py"]}
    tester = {"uid": slot.harness, "spec": dict(harness, reply_bytes=limits.reply_bytes)}
    root = tempfile.mkdtemp(prefix="posttrain-sandbox-")
    wall = limits.wall_seconds + REPORT_GRACE_S
    try:
        spec = _spec(limits, "function", root, candidate=candidate, harness=tester)
        launched = _launch(spec, limits, {slot.candidate, slot.harness}, wall)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    launcher = None
    if launched.launcher is not None:
        launcher = {side: ended(status) for side, status in launched.launcher.items()}
    return FunctionRun(launched.report, launcher, _judge(launched, limits, wall, function=True))


def _parse_report(data: bytes) -> tuple[dict | None, dict | None, list[str]]:
    """The harness's report, the launcher's line (each side's wait status) and the sandbox's
    own errors, from the trusted pipe; a line that does not parse counts as none."""
    report = launcher = None
    errors = []
    for line in data.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        if "\\ud" in line.decode("ascii", "replace").lower():
            item = clean_text(item)
        if set(item) == {"sandbox_error"}:
            errors.append(str(item["sandbox_error"]))
        elif set(item) == {"launcher"} and isinstance(item["launcher"], dict):
            launcher = item["launcher"]
        else:
            report = item
    return report, launcher, errors


def clean_text(value):
    """`value` with every string made valid Unicode (a lone surrogate the candidate put in a
    message becomes U+FFFD), so that the verdict can be printed and written anywhere."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, list):
        return [clean_text(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): clean_text(v) for k, v in value.items()}
    return value


def signal_name(number: int) -> str:
    """A signal's name, for any number a process can die of (real-time ones included)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        pass
    if signal.SIGRTMIN < number < signal.SIGRTMAX:
        return f"SIGRTMIN+{number - signal.SIGRTMIN}"
    return f"signal {number}"


def exit_code(status: int) -> int:
    """A wait status as an exit code (negative: the signal that ended the process)."""
    try:
        return os.waitstatus_to_exitcode(status)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"the launcher sent a wait status that is not one: {status!r}") from None


def ended(status: int | None) -> str:
    """How a process with this wait status ended (None: killed after the tests)."""
    if status is None:
        return "still running after the tests: killed"
    code = exit_code(status)
    return f"killed by {signal_name(-code)}" if code < 0 else f"exited with code {code}"


def _kill(pid: int, uids: set[int]) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    kill_uids(uids)


def _judge(run: _Launched, limits: Limits, limit: float, function: bool) -> Verdict:
    """The verdict on a launcher run. Only the trusted pipe and how the launcher ended can
    make it a `sandbox_error`; the program's exit status (or, for a function check, the
    launcher's finishing) makes the rest; stderr only words the reason of a failure."""
    code = run.returncode

    def verdict(status: str, reason: str) -> Verdict:
        return Verdict(status, reason, _tail(run.out), _tail(run.err), round(run.wall, 4), run.peak, code, run.out)

    if run.sandbox_errors:
        return verdict("sandbox_error", "sandbox setup failed: " + run.sandbox_errors[0][:300])
    if run.cause == "timeout":
        return verdict("timeout", f"wall clock over {limit}s: killed with all its processes")
    if run.cause == "output":
        return verdict("killed", f"output over {limits.output_bytes} bytes: killed")
    if run.launcher is None or (not function and "candidate" not in run.launcher):
        how = f"killed by {signal_name(-code)}" if code < 0 else f"exit code {code}"
        return verdict("sandbox_error", f"sandbox failed: the launcher ended ({how}) without its report")
    if function:
        return verdict("passed" if code == 0 else "sandbox_error", f"launcher exit code {code}")
    status = run.launcher["candidate"]
    if status is None:
        return verdict("killed", "the program ended without an exit status: killed")
    if run.launcher.get("candidate_left_running"):  # whatever they did next cannot depend on the scheduler
        return verdict("killed", "left a process running when it ended: killed with it")
    code = exit_code(status)
    text = run.err.decode("utf-8", "replace")
    if code == 0:
        return verdict("passed", "exited 0")
    if code == -signal.SIGXCPU:
        return verdict("timeout", f"CPU time over {limits.cpu_seconds}s")
    if code == -signal.SIGXFSZ or "File too large" in text:
        return verdict("killed", f"file size over {limits.file_bytes} bytes")
    if "MemoryError" in text:
        return verdict("memory", f"memory limit of {limits.memory_bytes // 2**20} MiB reached")
    if code < 0:
        return verdict("killed", f"killed by {signal_name(-code)}")
    last = text.strip().splitlines()[-1] if text.strip() else f"exit code {code}"
    return verdict("error", last[:300])


class SandboxPool:
    """Runs checks in parallel; each worker slot has its own two uids (candidate and
    harness), so slots never see, signal or exhaust the process limit of each other."""

    def __init__(self, workers: int = 2, limits: Limits = Limits()):
        self.limits = limits
        self._lease = UidLease(2 * workers)
        uids = self._lease.uids
        self._slots = [Slot(uids[2 * i], uids[2 * i + 1]) for i in range(workers)]
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=workers)

    def _run(self, fn, item):
        with self._lock:
            slot = self._slots.pop()
        try:
            return fn(item, slot)
        finally:
            with self._lock:
                self._slots.append(slot)

    def run(self, fn, items: list) -> list:
        """`fn(item, slot)` for each item, in parallel slots; results in order."""
        return list(self._executor.map(lambda item: self._run(fn, item), items))

    def map(self, programs: list[str]) -> list[Verdict]:
        """Each program alone (`run_program`)."""
        return self.run(lambda program, slot: run_program(program, self.limits, slot.candidate), programs)

    def close(self) -> None:
        self._executor.shutdown()
        self._lease.release()
