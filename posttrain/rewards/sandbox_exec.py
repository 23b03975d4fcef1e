"""Inside the sandbox: the launcher that isolates each side of a check, then starts it.

Run as root by `posttrain.rewards.sandbox` with `python -I -S -B` (never imported; stdlib
only, and only fast-loading modules), the spec as marshal data on stdin. A side is one
program (a candidate, or the test harness) in new mount, network, IPC, UTS and PID
namespaces of its own, chrooted into a private root on a small tmpfs holding only
read-only binds of /usr, the Python installation and three device files, plus a
size-limited tmpfs work folder; with resource limits; as an unprivileged uid of its own.
Mode `program`: one side, its stdin the spec's input. Mode `function`: the candidate's
side (its runner and program, no tests) and the harness's side (forked from here with
the tests, another uid), joined by two pipes.
"""

import _ctypes
import _signal
import marshal
import os
import resource
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
SIGKILL, SIGSTOP = 9, 19
SETUP_ERROR = "POSTTRAIN_SANDBOX_SETUP_ERROR"
SETUP_EXIT = 97


# libc through _ctypes itself: `import ctypes` would cost a few ms of every check
class _Int(_ctypes._SimpleCData):
    _type_ = "i"


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    _handle = _ctypes.dlopen(None, os.RTLD_NOW)


def _libc(name: str, *args) -> None:
    if _Function((name, _Libc))(*args) != 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"{name}{args[:2]}: {os.strerror(err)}")


def _mount(src, dst, fstype, flags, data=None) -> None:
    enc = lambda s: s.encode() if isinstance(s, str) else s  # noqa: E731
    _libc("mount", enc(src), enc(dst), enc(fstype), flags, enc(data))


def _bind_ro(src: str, root: str) -> None:
    dst = root + src
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    _mount(src, dst, None, MS_BIND | MS_REC)
    _mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_REC)


def _build_root(spec: dict, side: dict) -> str:
    root = side["root"]
    os.makedirs(root, exist_ok=True)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for top in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(top):
            os.symlink(os.readlink(top), root + top)
        elif os.path.isdir(top):
            _bind_ro(top, root)
    for path in ["/usr", spec["python_prefix"], "/dev/null", "/dev/zero", "/dev/urandom"]:
        _bind_ro(path, root)
    work = root + "/sandbox"
    os.makedirs(work)
    _mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec['disk_bytes']},mode=0777")
    for name, text in side.get("files", {}).items():
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    os.makedirs(root + "/tmp", mode=0o1777)
    return root


def _limit(spec: dict) -> None:
    limits = {
        resource.RLIMIT_AS: spec["memory_bytes"],
        resource.RLIMIT_NPROC: spec["max_processes"],
        resource.RLIMIT_FSIZE: spec["file_bytes"],
        resource.RLIMIT_NOFILE: 64,
        resource.RLIMIT_CORE: 0,
    }
    for kind, value in limits.items():
        resource.setrlimit(kind, (value, value))
    # soft < hard: the CPU limit first sends SIGXCPU, which tells a CPU timeout from a kill
    resource.setrlimit(resource.RLIMIT_CPU, (spec["cpu_seconds"], spec["cpu_seconds"] + 1))


def _place_fds(fds: dict[int, int]) -> None:
    """Make `fds` (target -> source) the only open descriptors, at their target numbers."""
    high = {target: os.dup2(source, 200 + target) for target, source in fds.items()}  # clobbers no source
    for target, copy in high.items():
        os.dup2(copy, target)
    os.closerange(max(fds) + 1, 1 << 16)


def _isolate(spec: dict, side: dict) -> None:
    """The side's own root, limits and uid (run in the side's namespaces, as root)."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = _build_root(spec, side)
    os.chroot(root)
    os.chdir("/sandbox")
    _limit(spec)
    os.setgroups([])
    os.setgid(side["uid"])
    os.setuid(side["uid"])


def _program(spec: dict, side: dict, fds: dict, run) -> None:
    """The side's program: exec Python on its files, or (the harness) call `run`."""
    stdin = None
    if "stdin" in side:  # the input lives in memory, not in the side's files
        stdin = os.memfd_create("stdin")
        os.write(stdin, side["stdin"].encode())
        os.lseek(stdin, 0, os.SEEK_SET)
    null = os.open("/dev/null", os.O_RDWR)
    _place_fds({k: (null if v == "null" else stdin if v == "stdin" else v) for k, v in fds.items()})
    _isolate(spec, side)
    if run is not None:
        run()
        os._exit(0)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/sandbox", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
    os.execve(spec["python"], [spec["python"], "-I", "-S", "-B", *side["argv"]], env)


def _namespace_init(spec: dict, side: dict, fds: dict, run, status_fd: int) -> int:
    """PID 1 of the side's namespace: start the program, reap orphans, return its status."""
    program = os.fork()
    if program == 0:
        try:
            _program(spec, side, fds, run)
        except BaseException as exc:
            os.write(2, f"{SETUP_ERROR}: {type(exc).__name__}: {exc}\n".encode())
        os._exit(SETUP_EXIT)
    _close_all_but([status_fd])
    while True:
        pid, status = os.wait()
        if pid == program:
            return status


def _close_all_but(keep: list[int]) -> None:
    """Close every descriptor above 2 but `keep`."""
    start = 3
    for fd in sorted({k for k in keep if k > 2}):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, 1 << 16)


def start_side(spec: dict, side: dict, fds: dict, run=None) -> int:
    """Fork the side: a process (host PID namespace) that unshares the namespaces, forks
    their PID 1, and exits the way the side's program did. Returns its pid."""
    pid = os.fork()
    if pid:
        return pid
    try:
        _close_all_but([v for v in fds.values() if isinstance(v, int)])
        _libc("unshare", CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID)
        read_end, write_end = os.pipe()
        if os.fork() == 0:
            os.close(read_end)
            # killing the side kills its PID 1, and so everything in the namespace
            _libc("prctl", PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
            os.write(write_end, str(_namespace_init(spec, side, fds, run, write_end)).encode())
            os._exit(0)
        os.close(write_end)
        _close_all_but([read_end])
        os.wait()
        report = os.read(read_end, 64).decode()
        _exit_like(int(report) if report else None)
    except BaseException as exc:
        os.write(2, f"{SETUP_ERROR}: {type(exc).__name__}: {exc}\n".encode())
    os._exit(SETUP_EXIT)


def _exit_like(status: int | None) -> None:
    """Exit the way a process with wait status `status` did, so that its parent sees the same."""
    code = os.waitstatus_to_exitcode(status) if status is not None else SETUP_EXIT
    if code < 0:
        if -code not in (SIGKILL, SIGSTOP):
            _signal.signal(-code, _signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


_reaped: dict[int, int] = {}


def _wait(pid: int, block: bool = True) -> int | None:
    """`pid`'s wait status (None if it runs and not `block`), reaping any orphan that
    reaches this subreaper meanwhile."""
    while pid not in _reaped:
        try:
            done, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return None
        if not done:
            return None
        _reaped[done] = status
    return _reaped[pid]


def run_function(spec: dict) -> None:
    """The candidate and the harness, two sides joined by two pipes; the harness reports
    on `report_fd` (from the verifier), then this launcher adds how the candidate ended."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, root)
    from posttrain.rewards import sandbox_harness  # stdlib only; loaded before any chroot

    report_fd = spec["report_fd"]
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    candidate = start_side(spec, spec["candidate"], {0: "null", 1: 1, 2: 2, 3: requests_r, 4: replies_w})
    harness_run = lambda: _harness(sandbox_harness, spec["harness"]["spec"])  # noqa: E731
    harness_fds = {0: "null", 1: "null", 2: 2, 3: requests_w, 4: replies_r, 5: report_fd}
    harness = start_side(spec, spec["harness"], harness_fds, harness_run)
    for fd in (requests_r, requests_w, replies_r, replies_w):
        os.close(fd)
    harness_status = _wait(harness)
    candidate_status = _wait(candidate, block=False)
    if candidate_status is None:
        os.kill(candidate, SIGKILL)  # its namespace's PID 1 dies with it (PDEATHSIG), and all inside
        _wait(candidate)
    line = {"launcher": {"candidate": candidate_status, "harness": harness_status}}  # wait statuses; None: killed
    os.write(report_fd, sandbox_harness.dumps(line))


def _harness(module, spec: dict) -> None:
    os.dup2(0, 2)  # set-up is over: stderr to /dev/null too (test output is not the verdict)
    module.main(spec, 3, 4, 5)


def main() -> None:
    spec = marshal.loads(sys.stdin.buffer.read())  # from the verifier, trusted
    _libc("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if spec["mode"] == "function":
        run_function(spec)
        sys.exit(0)
    side = start_side(spec, spec["candidate"], {0: "stdin", 1: 1, 2: 2})
    _exit_like(_wait(side))


if __name__ == "__main__":
    try:
        main()
    except OSError as exc:  # the parent reports this as a sandbox error, not a program failure
        sys.stderr.write(f"{SETUP_ERROR}: {type(exc).__name__}: {exc}\n")
        sys.exit(SETUP_EXIT)
