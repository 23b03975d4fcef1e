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

Everything trusted reports on one pipe of the verifier's (`report_fd`), never on stdout or
stderr, which the candidate shares: a failure of the sandbox (`{"sandbox_error": ...}`),
the harness's report, and last this launcher's own line with each side's wait status
(`{"launcher": {...}}`). The candidate never holds that pipe: its side keeps it
close-on-exec until the program starts, so nothing it prints, however truncated, can pass
for one of these lines. Each side's PID 1 sends its program's wait status to this
launcher over a pipe of its own, whatever signal ended the program, and whether the
program left a process running (a program run alone then fails: what that process
would do next depends on the scheduler, never on the program's answer).
"""

import _ctypes
import marshal
import os
import resource
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
SIGKILL = 9
SETUP_EXIT = 97
CONTROL_FD = 9  # where a side keeps the report pipe (close-on-exec) while it sets up
READY_FD = 8  # function mode: the harness closes its end once set up; the candidate starts then


# libc through _ctypes itself: `import ctypes` would cost a few ms of every check
class _Int(_ctypes._SimpleCData):
    _type_ = "i"


class _Long(_ctypes._SimpleCData):
    _type_ = "l"


class _Char(_ctypes._SimpleCData):
    _type_ = "c"


class _SigAction(_ctypes.Array):  # the kernel's struct sigaction, all zero: SIG_DFL, no flags, empty mask
    _type_ = _Char
    _length_ = 64


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    _handle = _ctypes.dlopen(None, os.RTLD_NOW)


def sandbox_error(control: int, where: str, exc: BaseException) -> None:
    """Report a failure of the sandbox itself on the trusted pipe (one short, atomic line)."""
    try:
        from _json import encode_basestring_ascii

        text = f"{where}: {type(exc).__name__}: {exc}"[:1000]
        os.write(control, ('{"sandbox_error": ' + encode_basestring_ascii(text) + "}\n").encode("ascii"))
    except BaseException:  # nothing left to report on
        pass


def _libc(name: str, *args) -> None:
    if _Function((name, _Libc))(*args) != 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"{name}{args[:2]}: {os.strerror(err)}")


# rt_sigaction and rt_sigprocmask by machine: raw, since libc refuses to touch the two
# signals it reserves for itself (32 and 33), which a parent may still have blocked or ignored
RT_SIGNAL_SYSCALLS = {"x86_64": (13, 14), "aarch64": (134, 135), "ppc64le": (173, 174), "s390x": (174, 175)}
SIGSETSIZE, NSIG = 8, 64


def _default_signals() -> None:
    """Every signal unblocked and at its default action, whatever the verifier's process
    inherited: a parent's blocked or ignored signal must not change how a program can end
    (ignored actions and the blocked mask both survive exec)."""
    syscall = _Function(("syscall", _Libc))
    numbers = RT_SIGNAL_SYSCALLS.get(os.uname().machine)
    if numbers is None:  # elsewhere, libc's view: all but its own two signals
        import signal

        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for n in range(1, signal.NSIG):
            try:
                signal.signal(n, signal.SIG_DFL)
            except (OSError, ValueError, RuntimeError):
                pass
        return
    sigaction, sigprocmask = numbers
    empty = _SigAction()
    for n in range(1, NSIG + 1):
        if n in (9, 19):  # SIGKILL and SIGSTOP cannot be changed
            continue
        if syscall(_Long(sigaction), _Long(n), empty, None, _Long(SIGSETSIZE)) != 0:
            err = _ctypes.get_errno()
            raise OSError(err, f"rt_sigaction({n}): {os.strerror(err)}")
    if syscall(_Long(sigprocmask), _Long(2), empty, None, _Long(SIGSETSIZE)) != 0:  # SIG_SETMASK: none blocked
        err = _ctypes.get_errno()
        raise OSError(err, f"rt_sigprocmask: {os.strerror(err)}")


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
    _close_all_but(list(fds))


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


def _program(spec: dict, side: dict, fds: dict, control: int, run) -> None:
    """The side's program: exec Python on its files, or (the harness) call `run`. A failure
    before the program starts is reported on `control` as the sandbox's own."""
    report_on = control
    try:
        stdin = None
        if "stdin" in side:  # the input lives in memory, not in the side's files
            stdin = os.memfd_create("stdin")
            os.write(stdin, side["stdin"].encode())
            os.lseek(stdin, 0, os.SEEK_SET)
        null = os.open("/dev/null", os.O_RDWR)
        placed = {k: (null if v == "null" else stdin if v == "stdin" else v) for k, v in fds.items()}
        _place_fds({**placed, CONTROL_FD: control})
        report_on = CONTROL_FD
        os.set_inheritable(CONTROL_FD, False)  # the report pipe closes as the program starts
        if run is None:  # under memory pressure the kernel kills the candidate first, not the sandbox
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        _isolate(spec, side)
        if run is None:
            if READY_FD in fds:  # nothing the candidate does can starve the harness's set-up
                os.read(READY_FD, 1)
                os.close(READY_FD)
            env = {"PATH": "/usr/bin:/bin", "HOME": "/sandbox", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
            _default_signals()
            os.execve(spec["python"], [spec["python"], "-I", "-S", "-B", *side["argv"]], env)
        if READY_FD in fds:
            os.close(READY_FD)  # set up: the candidate may start
        os.close(CONTROL_FD)  # the harness reports on its own descriptor
    except BaseException as exc:
        sandbox_error(report_on, f"{side['name']} set-up", exc)
        os._exit(SETUP_EXIT)
    try:
        run()
    except BaseException:
        os._exit(1)
    os._exit(0)


def _namespace_init(spec: dict, side: dict, fds: dict, control: int, run, status_fd: int) -> str:
    """PID 1 of the side's namespace: start the program, reap orphans, and return its
    wait status, followed by " left" if a process of the namespace still ran when the
    program ended (its orphans are PID 1's children by then; it dies with PID 1)."""
    program = os.fork()
    if program == 0:
        _program(spec, side, fds, control, run)  # never returns
    _close_all_but([status_fd])
    while True:
        pid, status = os.wait()
        if pid == program:
            break
    while True:  # the zombies are done; a live child was left running
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return str(status)
        if pid == 0:
            return f"{status} left"


def _close_all_but(keep: list[int]) -> None:
    """Close every descriptor above 2 but `keep`."""
    start = 3
    for fd in sorted({k for k in keep if k > 2}):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, 1 << 16)


def start_side(spec: dict, side: dict, fds: dict, control: int, run=None) -> tuple[int, int]:
    """Fork the side: a process (host PID namespace) that unshares the namespaces, forks
    their PID 1 and waits for it; killing it kills the namespace. Returns its pid and the
    read end of a pipe on which PID 1 writes the program's wait status (nothing: killed)."""
    status_r, status_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(status_w)
        return pid, status_r
    try:
        _close_all_but([v for v in fds.values() if isinstance(v, int)] + [control, status_w])
        _libc("unshare", CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID)
        if os.fork() == 0:
            # killing the side kills its PID 1, and so everything in the namespace
            _libc("prctl", PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
            os.write(status_w, _namespace_init(spec, side, fds, control, run, status_w).encode())
            os._exit(0)
        _close_all_but([])
        os.wait()
        os._exit(0)
    except BaseException as exc:
        sandbox_error(control, f"{side['name']} side", exc)
    os._exit(SETUP_EXIT)


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


def side_status(side: tuple[int, int], block: bool = True) -> tuple[bool, int | None, bool]:
    """(ended, its program's wait status, whether the program left a process running when
    it ended): not ended if it runs and not `block`; a status of None if the side ended
    without one (killed before its program ended)."""
    pid, status_r = side
    if _wait(pid, block) is None:
        return False, None, False
    data = os.read(status_r, 64).split()
    os.close(status_r)
    return True, int(data[0]) if data else None, data[1:] == [b"left"]


def run_function(spec: dict, control: int) -> dict:
    """The candidate and the harness, two sides joined by two pipes; the harness reports
    on `control`. Returns how each side ended."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, root)
    from posttrain.rewards import sandbox_harness  # stdlib only; loaded before any chroot

    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    ready_r, ready_w = os.pipe()
    candidate_fds = {0: "null", 1: 1, 2: 2, 3: requests_r, 4: replies_w, READY_FD: ready_r}
    candidate = start_side(spec, spec["candidate"], candidate_fds, control)
    harness_run = lambda: _harness(sandbox_harness, spec["harness"]["spec"])  # noqa: E731
    harness_fds = {0: "null", 1: "null", 2: 2, 3: requests_w, 4: replies_r, 5: control, READY_FD: ready_w}
    harness = start_side(spec, spec["harness"], harness_fds, control, harness_run)
    for fd in (requests_r, requests_w, replies_r, replies_w, ready_r, ready_w):
        os.close(fd)
    _, harness_status, _ = side_status(harness)
    ended, candidate_status, _ = side_status(candidate, block=False)
    if not ended:
        os.kill(candidate[0], SIGKILL)  # its namespace's PID 1 dies with it (PDEATHSIG), and all inside
        side_status(candidate)
    return {"candidate": candidate_status, "harness": harness_status}  # wait statuses; None: killed


def _harness(module, spec: dict) -> None:
    os.dup2(0, 2)  # set-up is over: stderr to /dev/null too (test output is not the verdict)
    module.main(spec, 3, 4, 5)


def main() -> None:
    spec = marshal.loads(sys.stdin.buffer.read())  # from the verifier, trusted
    control = spec["report_fd"]
    try:
        _libc("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        if spec["mode"] == "function":
            statuses = run_function(spec, control)
        else:
            _, status, left = side_status(start_side(spec, spec["candidate"], {0: "stdin", 1: 1, 2: 2}, control))
            statuses = {"candidate": status, "candidate_left_running": int(left)}
    except BaseException as exc:  # the verifier reports this as a sandbox error, not a program failure
        sandbox_error(control, "launcher", exc)
        sys.exit(SETUP_EXIT)
    fields = ",".join(f'"{side}":{"null" if status is None else int(status)}' for side, status in statuses.items())
    os.write(control, ('{"launcher":{' + fields + "}}\n").encode("ascii"))


if __name__ == "__main__":
    main()
