"""The control plane of a collective weight sync: trainer rank 0 drives the engines' side of
vLLM's weight-transfer engine through `EngineClient` (vLLM's `VLLMWeightSyncClient`
protocol over RolloutEngine actors), while the data moves over the backend's own group.

The client adds what vLLM leaves to its caller: a deadline on every call (an engine that
misses it is named in an `EngineCallTimeout`, which the driver turns into a replacement),
each engine's workers at their own ranks in the group (vLLM's trainer engines place every
worker at offset 1, as if there were one engine), and the policy version each engine
reports once it serves the new weights.
"""

from __future__ import annotations

import threading

import ray


class EngineCallTimeout(TimeoutError):
    """Engines (their indices in the client's list) that did not answer a call in time."""

    def __init__(self, message: str, engine_indices: list[int]):
        super().__init__(message)
        self.engine_indices = engine_indices

    def __reduce__(self):  # it crosses Ray from trainer rank 0 to the driver
        return type(self), (str(self), self.engine_indices)


class EngineClient:
    """`init_weight_transfer_engine`, `start_weight_update`, `update_weights` and
    `finish_weight_update` on every engine at once, each within `timeout_s`."""

    def __init__(self, engines: list, workers_per_engine: list[int], timeout_s: float):
        self.engines, self.timeout_s = engines, timeout_s
        self.offsets = [sum(workers_per_engine[:i]) for i in range(len(engines))]
        self.version = 0  # the version of the push under way (set by the sender before each push)
        self.versions: list[int] = []  # what each engine reported at the end of the last push
        self.missed = threading.Event()  # set when an engine missed a call's deadline

    def _all(self, refs: list, what: str) -> list:
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s, fetch_local=False)
        if pending:
            stuck = [i for i, ref in enumerate(refs) if ref in pending]
            self.missed.set()
            raise EngineCallTimeout(
                f"weight sync: {what}: {len(stuck)} of {len(refs)} engines gave no answer within "
                f"{self.timeout_s:.0f} s (rollout.sync_timeout_s)",
                stuck,
            )
        return results_deaths_first(refs)

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        refs = []
        for engine, offset in zip(self.engines, self.offsets):
            info = dict(init_info)
            if "rank_offset" in info:  # a group backend: this engine's workers after the ones before
                info["rank_offset"] += offset
            refs.append(engine.transfer_init.remote(info))
        self._all(refs, "joining the weight-transfer group")

    def start_weight_update(self) -> None:
        self._all([e.transfer_start.remote() for e in self.engines], "starting an update")

    def update_weights(self, update_info) -> None:
        self._all([e.transfer_update.remote(update_info) for e in self.engines], "receiving a bucket")

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        version = self.version if weight_version is None else int(weight_version)
        self.versions = self._all([e.transfer_finish.remote(version) for e in self.engines], "finishing an update")


def send_aborting_on_a_miss(transfer, poll_s: float = 0.5) -> None:
    """vLLM's `send_weights`, with the deadline its NCCL backend lacks: once the client finds
    an engine that missed a call's deadline, the trainer engine is shut down (for NCCL,
    `ncclCommAbort`), so a broadcast blocked on that engine returns, and the client's
    EngineCallTimeout is raised, instead of holding rank 0 forever."""
    client, finished = transfer.client, threading.Event()
    client.missed.clear()

    def guard() -> None:
        while not finished.is_set():
            if client.missed.wait(poll_s):
                transfer.shutdown()
                return

    watcher = threading.Thread(target=guard, daemon=True)
    watcher.start()
    try:
        transfer.send_weights()
    finally:
        finished.set()
        watcher.join()


def results_deaths_first(refs: list) -> list:
    """Every ref's result; if some failed, an engine's death is the error raised (the
    failures it caused in the others, a broken group, come second): the pool replaces the
    dead engine and pushes again."""
    from ray.exceptions import RayActorError

    results, failures = [], []
    for ref in refs:
        try:
            results.append(ray.get(ref))
        except Exception as exc:  # noqa: BLE001 - sorted below, all raised
            failures.append(exc)
    for exc in failures:
        if isinstance(exc, RayActorError):
            raise exc
    if failures:
        raise failures[0]
    return results


def trainer_init_info(backend: str, rank: int, address: str, world_size: int, bucket_bytes: int, timeout_s: float):
    """The trainer-side init info of vLLM's `backend`, buckets of `bucket_bytes` (`packed`)."""
    if backend == "gloo":
        from posttrain.rollout.gloo_transfer import GlooTrainerInitInfo, register

        register()
        return GlooTrainerInitInfo(address, world_size, bucket_bytes, timeout_s, rank=rank)
    if backend == "nccl":
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        port = free_port(address) if rank == 0 else 0
        return NCCLTrainerInitInfo(
            address, port, world_size, packed=True, packed_buffer_size_bytes=bucket_bytes, rank=rank
        )
    if backend == "ipc":
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

        return IPCTrainerInitInfo(packed=True, packed_buffer_size_bytes=bucket_bytes, rank=rank)
    raise ValueError(f"rollout.transfer_backend {backend!r} is none of gloo, nccl, ipc")


def free_port(address: str) -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]
