"""Weights by collective: trainer rank 0 broadcasts its full weights, packed into buckets of
`rollout.sync_bucket_mib`, to every engine worker over a process group of their own: NCCL
between GPUs, gloo on CPU (and gloo, still on device tensors, when a peer shares rank 0's
GPU, which NCCL refuses). Nothing goes through Ray's object store or, on GPU, host memory:
each engine worker receives a bucket into its own device memory and `reload_weights` loads
it in place while the next bucket is on its way.

The group is made of torch's own pieces (a TCPStore that rank 0 hosts, a PrefixStore, one
ProcessGroupGloo or ProcessGroupNCCL), outside torch.distributed's global state, so the
trainer rank's DeepSpeed group and vLLM's own groups are untouched. Its ranks: 0 is the
trainer, then each engine's tensor-parallel workers in turn. Every operation has a
timeout: a peer that died or hangs makes the others fail, never wait forever.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

ALIGN = 64  # every tensor starts at a multiple of this in its bucket: a view as any dtype is aligned
TIMEOUT_S = 120.0  # one collective operation (joining the group, one bucket)


@dataclass(frozen=True)
class TensorSlot:
    """Where one tensor travels: its bucket and byte offset there."""

    name: str
    dtype: str  # torch dtype name without the `torch.` prefix
    shape: tuple[int, ...]
    bucket: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class WeightManifest:
    """The layout of every push: which tensor sits where in which bucket. Fixed while a
    model is loaded; the engines get it once, when they join the group."""

    slots: tuple[TensorSlot, ...]
    buckets: tuple[int, ...]  # bytes of each bucket
    aliases: tuple[tuple[str, str], ...] = ()  # (name, name it repeats): a tied lm_head, sent once

    @property
    def nbytes(self) -> int:
        return sum(self.buckets)


def plan_manifest(
    tensors: list[tuple[str, str, tuple[int, ...], int]], bucket_bytes: int, aliases: tuple = ()
) -> WeightManifest:
    """Pack (name, dtype, shape, nbytes) in order into buckets of at most `bucket_bytes`
    (a tensor larger than that travels in a bucket of its own)."""
    slots, buckets, used = [], [], 0
    for name, dtype, shape, nbytes in tensors:
        start = -(-used // ALIGN) * ALIGN
        if not buckets or (used and start + nbytes > bucket_bytes):
            buckets.append(0)
            start = 0
        slots.append(TensorSlot(name, dtype, tuple(shape), len(buckets) - 1, start, nbytes))
        used = start + nbytes
        buckets[-1] = used
    return WeightManifest(tuple(slots), tuple(buckets), tuple(aliases))


def full_shape(tensor) -> tuple[tuple[int, ...], int]:
    """(shape, bytes) of a tensor as a whole (ZeRO-3 keeps only a partition in `.shape`)."""
    shape = tuple(getattr(tensor, "ds_shape", None) or tensor.shape)
    numel = 1
    for dim in shape:
        numel *= dim
    return shape, numel * tensor.element_size()


def manifest_of(entries: list, aliases: list, bucket_bytes: int, tied_embeddings: bool) -> WeightManifest:
    """The manifest of a model's weights: `entries` (name, tensor) each tensor once (its
    whole shape, even where ZeRO-3 holds a partition), `aliases` (name, name it repeats: a
    tied lm_head, sent once and named twice). A tied head the state dict leaves out is named
    too (vLLM's in-place reload leaves it on its old values otherwise, see weights.py)."""
    tensors = []
    for name, t in entries:
        shape, nbytes = full_shape(t)
        tensors.append((name, str(t.dtype).removeprefix("torch."), shape, nbytes))
    aliases = list(aliases)
    names = {name for name, _ in entries} | {alias for alias, _ in aliases}
    if tied_embeddings and "lm_head.weight" not in names and "model.embed_tokens.weight" in names:
        aliases.append(("lm_head.weight", "model.embed_tokens.weight"))
    return plan_manifest(tensors, bucket_bytes, tuple(aliases))


def bucket_groups(manifest: WeightManifest, entries: list) -> list[list[tuple[str, object]]]:
    """The entries of each bucket of `manifest`, in bucket order (what one gather holds)."""
    by_name = dict(entries)
    groups: list[list[tuple[str, object]]] = [[] for _ in manifest.buckets]
    for slot in manifest.slots:
        groups[slot.bucket].append((slot.name, by_name[slot.name]))
    return groups


def backend_for(device_ids: list[str]) -> str:
    """nccl when every peer is on a GPU of its own; gloo on CPU, or when two peers share a
    GPU (NCCL refuses two ranks on one device)."""
    if any(d == "cpu" for d in device_ids):
        return "gloo"
    return "nccl" if len(set(device_ids)) == len(device_ids) else "gloo"


def device_id() -> str:
    """This process's device: the current GPU's UUID, or `cpu`."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    return str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)


WATCHDOG_SLACK_S = 60.0  # NCCL's watchdog fires this long after our own deadline, never before it
POLL_S = 0.005


_NCCL_ENV_LOCK = threading.Lock()


@contextmanager
def nccl_failure_raises(environ: MutableMapping[str, str] | None = None):
    """Around the creation of an NCCL group: a failed or timed-out operation of it raises in
    its caller instead of tearing the process down. torch's default (async error handling
    3) kills a process whose NCCL work times out: trainer rank 0 would die for an engine
    that hung, and the run with it. Mode 2 only aborts the group's communicators; the
    caller's TimeoutError then lets the pool replace the engine. torch reads the variable
    when it makes a group and has no option for it, so the variable is set for that moment
    only, in the process making the group (an engine or trainer rank 0: Ray actors of their
    own, never a test's driver), under a lock: two threads making groups at once cannot
    restore the other's value while its group is being made.
    `environ` is the process's environment unless given (a test passes its own mapping)."""
    environ = os.environ if environ is None else environ
    key = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
    with _NCCL_ENV_LOCK:
        before = environ.get(key)
        environ[key] = "2"
        try:
            yield
        finally:
            if before is None:
                environ.pop(key, None)
            else:
                environ[key] = before


class SyncGroup:
    """One member of the weight-sync process group."""

    def __init__(self, store, rank: int, size: int, backend: str, timeout_s: float = TIMEOUT_S):
        import torch.distributed as dist

        timeout = timedelta(seconds=timeout_s)
        prefixed = dist.PrefixStore("posttrain-weights", store)
        if backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timedelta(seconds=timeout_s + WATCHDOG_SLACK_S)  # our deadline comes first
            with nccl_failure_raises():
                self.pg = dist.ProcessGroupNCCL(prefixed, rank, size, options)
        else:
            self.pg = dist.ProcessGroupGloo(prefixed, rank, size, timeout)
        self.store, self.rank, self.size, self.backend, self.timeout_s = store, rank, size, backend, timeout_s
        self.barrier_tensor = None

    @staticmethod
    def host_store(host: str, size: int, timeout_s: float = TIMEOUT_S):
        """Rank 0's store, on a port the OS picks; returns (store, port)."""
        import torch.distributed as dist

        store = dist.TCPStore(host, 0, size, True, timedelta(seconds=timeout_s), wait_for_workers=False)
        return store, store.port

    @classmethod
    def join(cls, host: str, port: int, rank: int, size: int, backend: str, timeout_s: float = TIMEOUT_S):
        """A peer's membership (rank > 0): connects to rank 0's store, then waits for all."""
        import torch.distributed as dist

        store = dist.TCPStore(host, port, size, False, timedelta(seconds=timeout_s))
        return cls(store, rank, size, backend, timeout_s)

    def broadcast(self, tensor) -> None:
        """Rank 0's `tensor` into every member's (in place), or an error within the timeout."""
        import torch.distributed as dist

        options = dist.BroadcastOptions()
        options.rootRank = 0
        options.timeout = timedelta(seconds=self.timeout_s)
        work = self.pg.broadcast([tensor], options)
        self.wait(work)

    def wait(self, work) -> None:
        """Wait for `work` until the deadline, then raise TimeoutError. gloo's `wait` blocks
        until then; NCCL's only orders the caller's CUDA stream after the work and returns
        at once, so its completion is polled here, and on the deadline the group is aborted
        (unblocking the stream) before raising: the process lives on."""
        timeout = timedelta(seconds=self.timeout_s)
        if self.backend != "nccl":
            if not work.wait(timeout):
                raise TimeoutError(f"weight sync: a bucket broadcast took more than {self.timeout_s:.0f} s")
            return
        deadline = time.monotonic() + self.timeout_s
        while not work.is_completed():
            if time.monotonic() > deadline:
                self.close()
                raise TimeoutError(
                    f"weight sync: a bucket broadcast took more than {self.timeout_s:.0f} s (NCCL group aborted)"
                )
            time.sleep(POLL_S)
        work.wait(timeout)  # raises the work's own error, if it failed

    def close(self) -> None:
        if self.pg is None:
            return
        shutdown = getattr(self.pg, "abort", None) if self.backend == "nccl" else None
        shutdown = shutdown or getattr(self.pg, "shutdown", None) or getattr(self.pg, "abort", None)
        try:
            if shutdown is not None:
                shutdown()
        except Exception:  # noqa: BLE001 - a group whose peer died may refuse a clean shutdown
            pass
        self.pg = self.store = None


def _header(group: SyncGroup, version: int, manifest: WeightManifest, device):
    """A push opens with (version, buckets), broadcast before any weight: a peer that is
    already dead fails it for rank 0, which then sends no bucket, so no engine has begun to
    load; and each engine checks that the push is the one it expects."""
    import torch

    header = torch.tensor([version, len(manifest.buckets)], dtype=torch.int64, device=device)
    group.broadcast(header)
    return [int(x) for x in header.tolist()]


def send(group: SyncGroup, buckets, manifest: WeightManifest, version: int, device) -> int:
    """Rank 0: broadcast the weights bucket by bucket, laid out as `manifest` says;
    `buckets` yields each bucket's {name: tensor} in order (under ZeRO-3 each item is a
    gather the other trainer ranks take part in, so it is read to its end even after a
    failure, which is raised then). Returns bytes sent."""
    import torch

    error = None
    header_sent = False
    for index, (size, tensors) in enumerate(zip(manifest.buckets, buckets)):
        if error is not None:
            continue  # keep gathering with the other ranks; nothing more is sent
        try:
            if not header_sent:
                _header(group, version, manifest, device)
                header_sent = True
            buffer = torch.empty(size, dtype=torch.uint8, device=device)
            for slot in manifest.slots:
                if slot.bucket != index:
                    continue
                tensor = tensors[slot.name]
                if tuple(tensor.shape) != slot.shape or str(tensor.dtype).removeprefix("torch.") != slot.dtype:
                    raise ValueError(
                        f"weight sync: {slot.name} is {tuple(tensor.shape)} {tensor.dtype}, the engines expect "
                        f"{slot.shape} {slot.dtype} (the model changed without a new manifest)"
                    )
                raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
                buffer[slot.offset : slot.offset + slot.nbytes].copy_(raw)
            group.broadcast(buffer)
            del buffer
        except Exception as exc:  # noqa: BLE001 - raised after the last gather
            error = exc
    if error is not None:
        raise error
    return manifest.nbytes


def receive(group: SyncGroup, manifest: WeightManifest, device, version: int) -> Iterator[tuple[str, object]]:
    """An engine worker: yield (name, tensor) bucket by bucket as they arrive, each tensor a
    view into its bucket's buffer on `device` (a fresh buffer per bucket: the loader may
    keep a layer's tensors until the layer is whole)."""
    import torch

    sent = _header(group, -1, manifest, device)
    if sent != [version, len(manifest.buckets)]:
        raise RuntimeError(
            f"weight sync: rank 0 sends version {sent[0]} in {sent[1]} buckets, this engine expects version "
            f"{version} in {len(manifest.buckets)}"
        )

    by_bucket: dict[int, list[TensorSlot]] = {}
    for slot in manifest.slots:
        by_bucket.setdefault(slot.bucket, []).append(slot)
    repeats: dict[str, list[str]] = {}
    for name, same_as in manifest.aliases:
        repeats.setdefault(same_as, []).append(name)
    for index, size in enumerate(manifest.buckets):
        buffer = torch.empty(size, dtype=torch.uint8, device=device)
        group.broadcast(buffer)
        for slot in by_bucket.get(index, []):
            raw = buffer[slot.offset : slot.offset + slot.nbytes]
            tensor = raw.view(getattr(torch, slot.dtype)).view(slot.shape)
            yield slot.name, tensor
            for name in repeats.get(slot.name, []):
                yield name, tensor
