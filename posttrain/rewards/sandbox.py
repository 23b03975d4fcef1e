"""Running model-written Python in a sandbox, and the verdict.

Each program runs in its own process, in namespaces of its own (mount, network, IPC, UTS),
chrooted into a private root that holds only read-only system and Python files and a
size-limited tmpfs work folder; with rlimits on CPU time, address space, processes, file
size and open files; as an unprivileged uid that belongs to its worker slot alone, leased
machine-wide (`UidLease`), so no other pool or run on the machine uses it. The parent
enforces wall time and output size, and on the way out kills every process of that uid
(a fork bomb that called setsid included).

What it guarantees and what it does not is in the README (Sandbox).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

UID_BASE = 61100  # 61000..61099 were slot uids before leases: a run of an older version may still use them
UID_COUNT = 900  # sandbox uids are 61100..61999, each leased to one worker slot at a time
LEASE_DIR = Path(tempfile.gettempdir()) / "posttrain-sandbox-uids"
SETUP_ERROR = "POSTTRAIN_SANDBOX_SETUP_ERROR"


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 512 * 2**20
    max_processes: int = 16
    file_bytes: int = 8 * 2**20
    disk_bytes: int = 32 * 2**20
    output_bytes: int = 64 * 1024


@dataclass(frozen=True)
class Verdict:
    status: str  # passed, failed, timeout, memory, killed, error
    reason: str
    stdout_tail: str
    stderr_tail: str
    wall_seconds: float
    peak_memory_bytes: int
    returncode: int | None

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def _tail(data: bytes, n: int = 2000) -> str:
    return data[-n:].decode("utf-8", "replace")


def _read_capped(stream, sink: bytearray, cap: int, over: threading.Event) -> None:
    while chunk := stream.read(65536):
        if len(sink) < cap:
            sink += chunk[: cap - len(sink)]
        if len(sink) >= cap:
            over.set()


def kill_uid(uid: int) -> int:
    """SIGKILL every process owned by `uid`, until none is left (forks race the scan)."""
    killed = 0
    for _ in range(50):
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            # zombies are already dead: they wait for init to reap them
            if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
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


def run_program(program: str, tests: str | None = None, limits: Limits = Limits(), uid: int | None = None) -> Verdict:
    """Run `program` (then `tests`, in the same module) and judge it, as `uid` (one this
    process leased), or as a uid leased for this one run."""
    if uid is None:
        with UidLease(1) as lease:
            return run_program(program, tests, limits, lease.uids[0])
    root = tempfile.mkdtemp(prefix="posttrain-sandbox-")
    source = program if tests is None else f"{program}\n\n{tests}\n"
    spec = {
        "root": root,
        "uid": uid,
        "python": os.path.realpath(sys._base_executable),
        "python_prefix": sys.base_prefix,
        "files": {"main.py": source},
        **{k: int(v) for k, v in asdict(limits).items() if k not in ("wall_seconds", "output_bytes")},
    }
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", os.path.join(os.path.dirname(__file__), "sandbox_exec.py"), json.dumps(spec)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    out, err, over = bytearray(), bytearray(), threading.Event()
    readers = [
        threading.Thread(target=_read_capped, args=(s, b, limits.output_bytes, over), daemon=True)
        for s, b in ((proc.stdout, out), (proc.stderr, err))
    ]
    for r in readers:
        r.start()
    status, rusage, cause = None, None, None
    while status is None:
        pid, status_raw, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status = status_raw
            break
        if time.perf_counter() - started > limits.wall_seconds:
            cause = "timeout"
        elif over.is_set():
            cause = "output"
        if cause:
            _kill(proc.pid, uid)
            _, status, rusage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.002)
    proc.returncode = os.waitstatus_to_exitcode(status)
    kill_uid(uid)
    for r in readers:
        r.join(timeout=2)
    shutil.rmtree(root, ignore_errors=True)
    wall = time.perf_counter() - started
    return _judge(proc.returncode, cause, bytes(out), bytes(err), wall, rusage.ru_maxrss * 1024, limits, tests)


def _kill(pid: int, uid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    kill_uid(uid)


def _judge(
    code: int, cause: str | None, out: bytes, err: bytes, wall: float, peak: int, limits: Limits, tests: str | None
) -> Verdict:
    def verdict(status: str, reason: str) -> Verdict:
        return Verdict(status, reason, _tail(out), _tail(err), round(wall, 4), peak, code)

    text = err.decode("utf-8", "replace")
    if SETUP_ERROR in text:
        return verdict("error", "sandbox setup failed" + text.split(SETUP_ERROR, 1)[1].strip()[:300])
    if cause == "timeout":
        return verdict("timeout", f"wall clock over {limits.wall_seconds}s: killed with all its processes")
    if cause == "output":
        return verdict("killed", f"output over {limits.output_bytes} bytes: killed")
    if code == -signal.SIGXCPU:
        return verdict("timeout", f"CPU time over {limits.cpu_seconds}s")
    if "MemoryError" in text:
        return verdict("memory", f"memory limit of {limits.memory_bytes // 2**20} MiB reached")
    if code == -signal.SIGXFSZ or "File too large" in text:
        return verdict("killed", f"file size over {limits.file_bytes} bytes")
    if code is not None and code < 0:
        return verdict("killed", f"killed by signal {signal.Signals(-code).name}")
    if code == 0:
        return verdict("passed", "all tests passed" if tests else "exited 0")
    last = text.strip().splitlines()[-1] if text.strip() else f"exit code {code}"
    if "AssertionError" in last:
        return verdict("failed", f"a test failed: {last[:300]}")
    return verdict("failed" if tests else "error", last[:300])


class SandboxPool:
    """Runs checks in parallel; each worker slot has its own uid, so slots never see,
    signal or exhaust the process limit of each other."""

    def __init__(self, workers: int = 2, limits: Limits = Limits()):
        self.limits = limits
        self._lease = UidLease(workers)
        self._slots = self._lease.uids
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=workers)

    def _run(self, program: str, tests: str | None) -> Verdict:
        with self._lock:
            uid = self._slots.pop()
        try:
            return run_program(program, tests, self.limits, uid)
        finally:
            with self._lock:
                self._slots.append(uid)

    def map(self, jobs: list[tuple[str, str | None]]) -> list[Verdict]:
        return list(self._executor.map(lambda job: self._run(*job), jobs))

    def close(self) -> None:
        self._executor.shutdown()
        self._lease.release()
