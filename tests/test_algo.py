"""Advantages and losses against values derived by hand in the comments."""

import math

import pytest
import torch

from posttrain.algo.advantages import grpo_advantages
from posttrain.algo.losses import k3_kl, nll_loss, policy_gradient_loss, token_logprobs


def test_grpo_advantages_by_hand():
    # rewards 1, 0, 0, 1: mean 0.5, population std 0.5 -> (r - 0.5) / 0.5 = +-1
    (adv,) = grpo_advantages([[1.0, 0.0, 0.0, 1.0]], eps=0.0)
    assert adv == pytest.approx([1.0, -1.0, -1.0, 1.0])
    # rewards 3, 0, 0: mean 1, std sqrt(((2)^2 + 1 + 1) / 3) = sqrt(2)
    (adv,) = grpo_advantages([[3.0, 0.0, 0.0]], eps=0.0)
    assert adv == pytest.approx([2 / math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2)])


def test_dr_grpo_skips_std_and_constant_groups_give_zero():
    (adv,) = grpo_advantages([[3.0, 0.0, 0.0]], std_normalize=False)
    assert adv == pytest.approx([2.0, -1.0, -1.0])
    (adv,) = grpo_advantages([[1.0, 1.0, 1.0]])
    assert adv == [0.0, 0.0, 0.0]
    assert grpo_advantages([[]]) == [[]]


def test_ppo_clip_loss_by_hand():
    # token 1: ratio e^0 = 1, A = 2 -> loss -2, not clipped
    # token 2: ratio e^{ln 1.5} = 1.5 > 1 + 0.28, A = 1 -> min(1.5, 1.28) = 1.28 -> loss -1.28, clipped
    # token 3: ratio 0.5 < 1 - 0.2, A = -1 -> min(-0.5, -0.8) = -0.8 -> loss 0.8, clipped
    # token 4: ratio 0.5, A = +1 -> min(0.5, 0.8) = 0.5 -> loss -0.5, not clipped (pessimistic side)
    logp_old = torch.zeros(4)
    logp = torch.tensor([0.0, math.log(1.5), math.log(0.5), math.log(0.5)])
    adv = torch.tensor([2.0, 1.0, -1.0, 1.0])
    loss, clipped = policy_gradient_loss(logp, logp_old, adv, 0.2, 0.28)
    assert loss.tolist() == pytest.approx([-2.0, -1.28, 0.8, -0.5])
    assert clipped.tolist() == [0.0, 1.0, 1.0, 0.0]


def test_pg_gradient_at_ratio_one_is_advantage():
    # d/dlogp of -(exp(logp - logp_old) * A) at logp = logp_old is -A
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss, _ = policy_gradient_loss(logp, logp.detach(), torch.tensor([0.5, -3.0]), 0.2, 0.2)
    loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([-0.5, 3.0])


def test_k3_kl_by_hand():
    # logp = log 0.5, logp_ref = log 0.25: r = 0.5 -> 0.5 - ln 0.5 - 1 = 0.193147...
    kl = k3_kl(torch.tensor([math.log(0.5), -1.0]), torch.tensor([math.log(0.25), -1.0]))
    assert kl.tolist() == pytest.approx([0.5 - math.log(0.5) - 1, 0.0])


def test_token_logprobs_and_nll_by_hand():
    # logits [0, ln 3]: softmax [1/4, 3/4]; with T = 2: logits [0, ln3 / 2] -> [1/(1+sqrt3), sqrt3/(1+sqrt3)]
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    assert token_logprobs(logits, torch.tensor([[1]])).item() == pytest.approx(math.log(0.75))
    t2 = token_logprobs(logits, torch.tensor([[0]]), temperature=2.0).item()
    assert t2 == pytest.approx(math.log(1 / (1 + math.sqrt(3))))
    assert nll_loss(torch.tensor([math.log(0.75)])).item() == pytest.approx(-math.log(0.75))


def test_lr_schedule_by_hand():
    """Warm-up (step + 1) / (warmup + 1), then constant, or a cosine from 1 to min_ratio at
    `total` and min_ratio after it."""
    from posttrain.algo.schedule import lr_factor

    assert [lr_factor(s, warmup=3) for s in (0, 1, 2, 3, 100)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    cosine = [lr_factor(s, warmup=2, total=6, decay="cosine", min_ratio=0.1) for s in range(8)]
    # after the warm-up, progress (s - 2) / 4: 0, 1/4, 1/2, 3/4, 1, then held at the end
    expected = [1 / 3, 2 / 3, 1.0, 0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2, 0.55]
    expected += [0.1 + 0.9 * (1 + math.cos(3 * math.pi / 4)) / 2, 0.1, 0.1]
    assert cosine == pytest.approx(expected)
    assert lr_factor(5, warmup=0, total=0, decay="cosine", min_ratio=0.1) == 1.0  # no horizon: constant


def test_entropy_bonus_weight_fixed_or_adaptive_by_hand():
    """Fixed: entropy_coef on every step. Adaptive (Skywork-OR1, as TRL's): from entropy_coef,
    +step after a step at or below the target, -step after one above, within [0, max]; it
    acts only after a step at or below the target (not on the first); a step that trained
    nothing (NaN entropy) changes nothing; the state survives a checkpoint."""
    from pydantic import ValidationError

    from posttrain.algo.entropy import EntropyControl
    from posttrain.config import GRPOConfig
    from posttrain.train.spec import loss_spec

    fixed = EntropyControl.of(GRPOConfig(entropy_coef=0.01))
    fixed.update(0.01)
    assert fixed.weight() == 0.01 and loss_spec("pg", GRPOConfig(entropy_coef=0.01)).entropy_coef == 0.01
    algo = GRPOConfig(entropy_coef=0.01, entropy_target=0.3, entropy_coef_step=0.01, entropy_coef_max=0.02)
    assert loss_spec("pg", algo).entropy_coef == 0.0 and loss_spec("pg", algo).entropy_target == 0.3
    adaptive = EntropyControl.of(algo)
    weights = [adaptive.weight()]
    for h in (0.1, 0.2, float("nan"), 0.5, 0.5, 0.5, 0.3):
        adaptive.update(h)
        weights.append(adaptive.weight())
    assert weights == pytest.approx([0.0, 0.02, 0.02, 0.02, 0.0, 0.0, 0.0, 0.01])
    resumed = EntropyControl.of(algo)
    resumed.restore(adaptive.state())
    assert (resumed.coef, resumed.last, resumed.weight()) == (adaptive.coef, 0.3, 0.01)
    fresh = EntropyControl.of(algo)
    fresh.restore(EntropyControl.of(algo).state())  # saved before any step: no entropy measured yet
    assert fresh.weight() == 0.0
    fresh.restore(None)  # a checkpoint from before the bonus: the start
    assert fresh.coef == 0.01
    assert loss_spec("pg").entropy_coef == 0.0 and loss_spec("nll").entropy_target is None  # off by default
    with pytest.raises(ValidationError, match="entropy_coef .* must be <= entropy_coef_max"):
        GRPOConfig(entropy_coef=0.5, entropy_target=0.3, entropy_coef_max=0.2)
