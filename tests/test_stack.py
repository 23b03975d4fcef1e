"""The real stack on CPU: a vLLM engine actor and DeepSpeed ZeRO ranks (world size 2)
as Ray actors, on a tiny model built in the test session."""

import numpy as np
import pytest
import ray

from posttrain.config import RolloutConfig, TrainerConfig
from posttrain.config.resources import weight_sync_mode
from posttrain.rollout.engine import RolloutEngine
from posttrain.train.group import TrainerGroup
from posttrain.train.spec import loss_spec
from posttrain.types import GenerationRequest, SamplingSettings, TrainSequence

PROMPTS = [(1, 40, 41, 42, 43), (1, 50, 51), (1, 60, 61, 62, 63, 64, 65)]


@pytest.fixture(scope="module")
def engine(ray_session, tiny_dir):
    actor = RolloutEngine.remote_actor(str(tiny_dir), RolloutConfig(max_model_len=128), "float32", seed=0)
    ray.get(actor.info.remote())
    yield actor
    ray.kill(actor)


@pytest.fixture(scope="module")
def trainers(ray_session, tiny_dir):
    group = TrainerGroup(TrainerConfig(workers=2, zero_stage=2, micro_batch_tokens=64), seed=0)
    group.load(str(tiny_dir), "float32", lr=1e-3, warmup_steps=0)
    yield group
    group.shutdown()


def sample(engine, n=4, max_tokens=12) -> list[TrainSequence]:
    outs = ray.get(engine.generate.remote([GenerationRequest(p, n, max_tokens) for p in PROMPTS], SamplingSettings()))
    seqs = []
    for prompt, completions in zip(PROMPTS, outs):
        for c in completions:
            k = len(c.token_ids)
            seqs.append(
                TrainSequence(prompt + c.token_ids, len(prompt), tuple(np.linspace(-1, 1, k)), (1.0,) * k, c.logprobs)
            )
    return seqs


def mean_abs_diff(seqs, logp):
    return float(np.mean([abs(a - b) for s, lp in zip(seqs, logp) for a, b in zip(lp, s.logp_engine)]))


def test_engine_returns_tokens_text_and_logprobs(engine):
    # the V1 runner, pinned on every device: the class the GPU runner of vLLM 0.32 also is
    runner = ray.get(engine.info.remote())["model_runner"]
    assert runner == "vllm.v1.worker.cpu_model_runner.CPUModelRunner", runner
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    assert issubclass(CPUModelRunner, GPUModelRunner)
    seqs = sample(engine)
    assert len(seqs) == 12
    for s in seqs:
        assert 1 <= s.response_len <= 12 and len(s.logp_engine) == s.response_len
        assert all(lp <= 0 for lp in s.logp_engine)


def test_trainer_and_engine_agree_before_training(engine, trainers):
    seqs = sample(engine)
    assert mean_abs_diff(seqs, trainers.logprobs(seqs)) < 1e-4


@pytest.mark.parametrize("weight_sync", ["object_store", "collective"])
def test_step_changes_parameters_and_push_keeps_engine_in_agreement(engine, trainers, weight_sync):
    """Both weight paths (rollout.weight_sync): one packet through Ray's object store, or a
    bucketed broadcast from rank 0 over a gloo group into the engine's worker."""
    trainers.weight_sync = weight_sync_mode(RolloutConfig(weight_sync=weight_sync))
    seqs = sample(engine)
    before = ray.get(trainers.workers[0].parameter_checksum.remote())
    out = trainers.train_step(seqs, loss_spec("pg"))
    after = ray.get(trainers.workers[0].parameter_checksum.remote())
    assert before != after
    assert mean_abs_diff(seqs, out.logp) < 1e-4  # pre-step logprobs, same weights as the engine
    stale = trainers.logprobs(seqs)
    assert mean_abs_diff(seqs, stale) > 1e-3  # the step moved the policy away from the engine
    sync = trainers.sync_weights([engine])
    assert sync["sync/seconds"] > 0 and sync["sync/collective"] == float(weight_sync == "collective")
    assert ray.get(engine.info.remote())["version"] == trainers.version
    engine_logp = ray.get(engine.prompt_logprobs.remote([list(s.token_ids) for s in seqs]))
    diffs = [abs(a - b) for s, lt, le in zip(seqs, stale, engine_logp) for a, b in zip(lt, le[s.prompt_len - 1 :])]
    assert float(np.mean(diffs)) < 1e-4
    fresh = sample(engine)  # new samples: engine logprobs come from the pushed weights
    assert mean_abs_diff(fresh, trainers.logprobs(fresh)) < 1e-4


def test_loss_falls_when_overfitting_one_batch(engine, trainers):
    seqs = sample(engine)
    losses = [trainers.train_step(seqs, loss_spec("nll")).sums.loss for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_two_ranks_with_micro_batches_match_one_rank(ray_session, tiny_dir, engine):
    """Exact token-mean over the global batch: world 2 with many uneven micro-batches gives the
    same gradient norm and the same weights as world 1 with one micro-batch."""
    seqs = sample(engine, n=3)[:7]  # odd count: the ranks get different numbers of micro-batches
    results = {}
    for workers, micro in ((1, 100_000), (2, 24)):
        group = TrainerGroup(TrainerConfig(workers=workers, zero_stage=2, micro_batch_tokens=micro), seed=0)
        group.load(str(tiny_dir), "float32", lr=1e-2, warmup_steps=0)
        out = group.train_step(seqs, loss_spec("pg"))
        packet = ray.get(group.workers[0].get_weights.remote(1))
        results[workers] = (out.grad_norm, out.sums.loss, packet.arrays)
        group.shutdown()
    (g1, l1, w1), (g2, l2, w2) = results[1], results[2]
    assert g2 == pytest.approx(g1, rel=1e-4) and l2 == pytest.approx(l1, rel=1e-4, abs=1e-7)
    # Adam's first step is lr * g / (|g| + eps): entries whose gradient is ~0 amplify float
    # summation-order noise, so the weights agree closely on average, and within 5% of lr at worst.
    diffs = np.concatenate([np.abs(w1[k] - w2[k]).ravel() for k in w1])
    assert diffs.mean() < 1e-6 and diffs.max() < 0.05 * 1e-2, (diffs.mean(), diffs.max())


@pytest.mark.parametrize("weight_sync", [pytest.param("object_store", marks=pytest.mark.system), "collective"])
def test_zero3_gathers_full_weights_for_the_engine(ray_session, tiny_dir, engine, weight_sync):
    rollout = RolloutConfig(weight_sync=weight_sync, sync_bucket_mib=0.25)  # collective: several buckets
    group = TrainerGroup(TrainerConfig(workers=2, zero_stage=3), seed=0, rollout=rollout)
    try:
        group.load(str(tiny_dir), "float32", lr=1e-3, warmup_steps=0)
        seqs = sample(engine)
        group.train_step(seqs, loss_spec("pg"))
        assert group.sync_weights([engine])["sync/collective"] == float(weight_sync == "collective")
        fresh = sample(engine)
        assert mean_abs_diff(fresh, group.logprobs(fresh)) < 1e-4
    finally:
        group.shutdown()


@pytest.mark.system
def test_each_reload_starts_fresh_rank_processes(ray_session, tiny_dir):
    """A DeepSpeed engine replaced in place keeps its memory (SmolLM2: +0.75 GB per load):
    `restart_on_load: always` (and auto, for models over 256 MB) starts fresh ranks; auto
    keeps a small model's ranks (a restart costs seconds per expert job)."""
    import os

    from ray.exceptions import RayActorError

    from posttrain.train.group import RESTART_BYTES, weights_bytes

    assert weights_bytes(str(tiny_dir)) < RESTART_BYTES
    group = TrainerGroup(TrainerConfig(workers=1, zero_stage=0, restart_on_load="always"), seed=0)
    kept = TrainerGroup(TrainerConfig(workers=1, zero_stage=0), seed=0)  # auto
    try:
        group.load(str(tiny_dir), "float32", lr=1e-3, warmup_steps=0)
        kept.load(str(tiny_dir), "float32", lr=1e-3, warmup_steps=0)
        old = group.workers[0]
        pid = ray.get(old.__ray_call__.remote(lambda self: os.getpid()))
        kept_pid = ray.get(kept.workers[0].__ray_call__.remote(lambda self: os.getpid()))
        group.load(str(tiny_dir), "float32", lr=1e-3, warmup_steps=0)
        kept.load(str(tiny_dir), "float32", lr=1e-3, warmup_steps=0)
        assert ray.get(group.workers[0].__ray_call__.remote(lambda self: os.getpid())) != pid
        with pytest.raises(RayActorError):
            ray.get(old.parameter_checksum.remote())
        assert ray.get(kept.workers[0].__ray_call__.remote(lambda self: os.getpid())) == kept_pid
    finally:
        group.shutdown()
        kept.shutdown()
