"""The same stack on a CUDA device: an NCCL rank and a GPU vLLM engine sharing one GPU,
weights pushed by both modes (collective: vLLM's transfer engine, its CUDA IPC backend): the
steps change the weights, the engine is stale by more than the tolerance before the push, at
the trainer's version and within the tolerance after it (a push that does nothing fails).
Skipped without a GPU (conftest); `bash bench/gpu_check.sh` runs the wider GPU check."""

import numpy as np
import pytest
import ray

from posttrain.config import RolloutConfig, TrainerConfig
from posttrain.rollout.engine import RolloutEngine
from posttrain.train.group import TrainerGroup
from posttrain.train.spec import loss_spec
from posttrain.types import GenerationRequest, SamplingSettings, TrainSequence

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("weight_sync", ["collective", "object_store"])
@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-4), ("bfloat16", 5e-2)])
def test_weight_push_and_logprob_agreement_on_gpu(ray_session, tiny_dir, dtype, tolerance, weight_sync):
    engine = RolloutEngine.remote_actor(
        str(tiny_dir),
        RolloutConfig(max_model_len=128, num_gpus=0.4, num_cpus=0, gpu_memory_utilization=0.3, transfer_backend="ipc"),
        dtype,
        seed=0,
    )
    group = TrainerGroup(
        TrainerConfig(workers=1, zero_stage=2, num_gpus=0.4, num_cpus=0),
        seed=0,
        # collective: vLLM's ipc backend (the engine and the rank share the GPU, which NCCL refuses)
        rollout=RolloutConfig(weight_sync=weight_sync, num_gpus=0.4, transfer_backend="ipc"),
    )
    try:
        group.load(str(tiny_dir), dtype, lr=1e-2, warmup_steps=0)
        (outs,) = ray.get(engine.generate.remote([GenerationRequest((1, 40, 41), 8, 12)], SamplingSettings()))
        seqs = [
            TrainSequence(
                (1, 40, 41) + c.token_ids, 3, (1.0,) * len(c.token_ids), (1.0,) * len(c.token_ids), c.logprobs
            )
            for c in outs
        ]
        before = ray.get(group.workers[0].parameter_checksum.remote())
        for _ in range(3):  # lr 1e-2: a move well above the bf16 tolerance
            group.train_step(seqs, loss_spec("pg"))
        assert ray.get(group.workers[0].parameter_checksum.remote()) != before  # the steps changed the weights
        # before the push the engine still holds the old weights: its logprobs are stale
        stale = group.logprobs(seqs)
        gap = [abs(a - b) for s, lp in zip(seqs, stale) for a, b in zip(lp, s.logp_engine)]
        assert float(np.mean(gap)) > 2 * tolerance, "a step moved the policy less than the tolerance: no teeth"
        assert ray.get(engine.info.remote())["version"] != group.version
        assert group.sync_weights([engine])["sync/collective"] == float(weight_sync == "collective")
        assert ray.get(engine.info.remote())["version"] == group.version  # the push reached the engine
        (fresh,) = ray.get(engine.generate.remote([GenerationRequest((1, 40, 41), 8, 12)], SamplingSettings()))
        fresh_seqs = [
            TrainSequence(
                (1, 40, 41) + c.token_ids, 3, (0.0,) * len(c.token_ids), (1.0,) * len(c.token_ids), c.logprobs
            )
            for c in fresh
        ]
        trainer = group.logprobs(fresh_seqs)
        diffs = [abs(a - b) for s, lp in zip(fresh_seqs, trainer) for a, b in zip(lp, s.logp_engine)]
        assert float(np.mean(diffs)) < tolerance
    finally:
        group.shutdown()
        ray.kill(engine)
