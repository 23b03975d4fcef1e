"""A rank's place in the process group: its device, what that device needs before the
rendezvous, the group's backend, and the guard around the one-time build of DeepSpeed's
CPU comm op. What differs by device type is looked up in the tables below."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path


@contextmanager
def op_build_guard(name: str, folder: Path | None = None):
    """Around the first use of a JIT-built torch extension (DeepSpeed compiles its CPU
    shared-memory comm op in `init_distributed`, about 30 s, once per machine). torch's own
    build lock is a bare file: a process killed while compiling leaves it behind, and every
    later rank waits on it forever, silently. Here each builder first takes a kernel lock
    (flock, released when its holder dies, however it dies), so a torch lock found while
    holding it was left by a dead build: it is removed, with a warning, and the op rebuilt.
    `folder` is the op's build folder, torch's own (under TORCH_EXTENSIONS_DIR) unless given."""
    import fcntl
    import warnings

    from torch.utils.cpp_extension import _get_build_directory

    try:
        folder = Path(_get_build_directory(name, verbose=False)) if folder is None else folder
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable build folder: nothing to guard
        yield
        return
    with open(folder / ".posttrain-build.flock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another live rank building: wait for it
        stale = folder / "lock"
        if stale.exists():
            warnings.warn(f"removing {stale}: a build of {name} was killed before it finished; building it again")
            stale.unlink(missing_ok=True)
        yield


def rank_device(num_gpus: float):
    """The one place a rank's device is decided, from its Ray resources: with a GPU, its
    CUDA device (Ray sets CUDA_VISIBLE_DEVICES to the rank's own GPU, so cuda:0), else the
    CPU. DeepSpeed moves the model there but never the inputs: `collate` does."""
    import torch

    return torch.device("cuda", 0) if num_gpus > 0 else torch.device("cpu")


# The process group's backend per device type: NCCL (CUDA tensors only) on a GPU, gloo
# (CPU tensors) elsewhere. So every collective's tensors belong on the rank's device.
BACKENDS = {"cuda": "nccl"}
DEFAULT_BACKEND = "gloo"


def group_backend(device) -> str:
    """The process group's backend for a rank on `device`."""
    return BACKENDS.get(device.type, DEFAULT_BACKEND)


def _select_cuda(device) -> None:
    import torch

    torch.cuda.set_device(device)


def _build_cpu_comm(device) -> None:
    """init_distributed builds DeepSpeed's CPU comm op (once per machine); the build alone
    happens here, under the guard: the rendezvous after it needs every rank."""
    from deepspeed.comm.torch import build_shm_op

    with op_build_guard("deepspeed_shm_comm"):
        build_shm_op()


# What a rank does for its device before joining the process group, per device type.
DEVICE_SETUP = {"cuda": _select_cuda, "cpu": _build_cpu_comm}


def prepare_device(device) -> None:
    """Make `device` ready for `deepspeed.init_distributed` (nothing for other types)."""
    setup = DEVICE_SETUP.get(device.type)
    if setup is not None:
        setup(device)
