"""The trainer's own path on a CUDA device (skipped without one, conftest): a rank with a
GPU puts its model, reference model and inputs there and trains PPO minibatches in bf16
with the KL term and the fresh-token correction. Never run yet: no GPU here."""

import pytest
import ray

from posttrain.config import GRPOConfig, TISCorrection, TrainerConfig
from posttrain.train.group import TrainerGroup
from posttrain.train.spec import loss_spec
from posttrain.types import TrainSequence

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

SEQS = [
    TrainSequence((1, 40, 41, 42, 43), 3, (1.0, -1.0), (1.0, 1.0), (-3.0, -4.0), (0.0, 1.0)),
    TrainSequence((1, 50, 51, 52), 2, (0.5, 0.5), (1.0, 1.0), (-2.0, -2.5)),
]


def test_a_gpu_rank_trains_with_everything_on_its_device(ray_session, tiny_dir):
    group = TrainerGroup(TrainerConfig(workers=1, zero_stage=2, num_gpus=0.5, num_cpus=0), seed=0)
    try:
        group.load(str(tiny_dir), "bfloat16", lr=1e-3, warmup_steps=0, kl_beta=0.1)

        def devices(worker):
            return {
                "rank": str(worker.device),
                "model": str(next(worker.engine.module.parameters()).device),
                "ref": str(next(worker.ref_model.parameters()).device),
                "inputs": sorted({str(t.device) for t in worker._collate(SEQS).values() if hasattr(t, "device")}),
            }

        facts = ray.get(group.workers[0].__ray_call__.remote(devices))
        assert facts == {"rank": "cuda:0", "model": "cuda:0", "ref": "cuda:0", "inputs": ["cuda:0"]}
        spec = loss_spec("pg", GRPOConfig(kl_beta=0.1, minibatches=2), TISCorrection(fresh=True))
        out = group.train_step(SEQS, spec)
        assert not out.skipped and out.sums.tokens == 4 and out.sums.kl >= 0
        assert group.version == 1
    finally:
        group.shutdown()
