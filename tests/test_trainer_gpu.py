"""The trainer's own path on a CUDA device (skipped without one, conftest): a rank with a
GPU puts its model, reference model and inputs there and trains PPO minibatches in bf16
with the KL term and the fresh-token correction, and its loss, KL and gradient norm agree
with the same step on CPU within bf16 tolerance. Never run yet: no GPU here."""

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


def _step(tiny_dir, num_gpus: float):
    """One PPO step (two minibatches, KL, fresh-token correction) of a bf16 rank: its sums,
    grad norm, and where its tensors live."""
    group = TrainerGroup(TrainerConfig(workers=1, zero_stage=2, num_gpus=num_gpus, num_cpus=0), seed=0)
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
        spec = loss_spec("pg", GRPOConfig(kl_beta=0.1, minibatches=2), TISCorrection(fresh=True))
        out = group.train_step(SEQS, spec)
        return facts, out, group.version
    finally:
        group.shutdown()


def test_a_gpu_rank_trains_with_everything_on_its_device_as_a_cpu_rank_does(ray_session, tiny_dir):
    facts, gpu, version = _step(tiny_dir, 0.5)
    assert facts == {"rank": "cuda:0", "model": "cuda:0", "ref": "cuda:0", "inputs": ["cuda:0"]}
    assert not gpu.skipped and gpu.sums.tokens == 4 and version == 1
    # the second minibatch runs after one optimizer step: the policy has left its reference
    assert gpu.sums.kl > 0
    _, cpu, _ = _step(tiny_dir, 0)  # the same step on CPU, bf16 too
    for name, a, b in (
        ("loss", gpu.sums.loss, cpu.sums.loss),
        ("kl", gpu.sums.kl, cpu.sums.kl),
        ("grad norm", gpu.grad_norm, cpu.grad_norm),
    ):
        assert abs(a - b) <= 0.05 * max(abs(a), abs(b)) + 5e-3, (name, a, b)  # bf16 tolerance (loss ~0.01)
