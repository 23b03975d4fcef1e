"""Inside the sandbox: the launcher that isolates itself, then becomes the program.

Run as root by `posttrain.rewards.sandbox` (never imported). In order: new mount, network,
IPC and UTS namespaces; a private root on a small tmpfs holding only read-only binds of
/usr, the Python installation and three device files, plus a size-limited tmpfs work
folder with the program; chroot into it; resource limits; drop to an unprivileged uid of
its own; exec Python in isolated mode. Arguments: a JSON object (see `sandbox.py`).
"""

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
PR_SET_CHILD_SUBREAPER = 36
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src, dst, fstype, flags, data=None) -> None:
    enc = lambda s: s.encode() if isinstance(s, str) else s  # noqa: E731
    _check(_libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), f"mount {src} -> {dst}")


def _bind_ro(src: str, root: str) -> None:
    dst = root + src
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    _mount(src, dst, None, MS_BIND | MS_REC)
    _mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_REC)


def _build_root(spec: dict) -> str:
    root = spec["root"]
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
    for name, text in spec["files"].items():
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


def main() -> None:
    """Three processes: this launcher (host PID namespace, a subreaper); A, PID 1 of a new
    PID namespace, which only reaps; B, the program. When B exits, A reports B's wait
    status through a pipe and exits, and the kernel kills whatever B left in the namespace
    (setsid escapees too). Everything is reaped, so no zombie keeps counting against the
    slot uid's process limit. Then the launcher exits the way B did."""
    spec = json.loads(sys.argv[1])
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID), "unshare")
    _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl")
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.close(read_end)
        os.write(write_end, str(_namespace_init(spec)).encode())
        os._exit(0)
    os.close(write_end)
    _reap_all()
    report = os.read(read_end, 64).decode()
    code = os.waitstatus_to_exitcode(int(report)) if report else 97
    if code < 0:  # die of the same signal, so the parent sees what the program saw
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def _reap_all() -> None:
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def _namespace_init(spec: dict) -> int:
    """PID 1: start the program, reap orphans, return the program's wait status."""
    program = os.fork()
    if program == 0:
        try:
            become_program(spec)
        except Exception as exc:
            sys.stderr.write(f"POSTTRAIN_SANDBOX_SETUP_ERROR: {type(exc).__name__}: {exc}\n")
            sys.stderr.flush()
        os._exit(97)
    while True:
        pid, status = os.wait()
        if pid == program:
            return status


def become_program(spec: dict) -> None:
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = _build_root(spec)
    os.chroot(root)
    os.chdir("/sandbox")
    _limit(spec)
    os.setgroups([])
    os.setgid(spec["uid"])
    os.setuid(spec["uid"])
    env = {"PATH": "/usr/bin:/bin", "HOME": "/sandbox", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
    os.execve(spec["python"], [spec["python"], "-I", "-B", "main.py"], env)


if __name__ == "__main__":
    try:
        main()
    except OSError as exc:  # the parent reports this as a sandbox error, not a program failure
        sys.stderr.write(f"POSTTRAIN_SANDBOX_SETUP_ERROR: {type(exc).__name__}: {exc}\n")
        sys.exit(97)
