"""Off-policy weights and budget rewards against hand-computed values."""

import math

import pytest
import torch

from posttrain.algo.offpolicy import offpolicy_weights
from posttrain.rollout.budget import apply_budget, budget_at, task_budget
from posttrain.types import RewardResult

# ratios pi_old / mu: 0.25, 1, 1.5, 4 (first three stale, the last fresh)
LOGP_OLD = torch.log(torch.tensor([0.25, 0.5, 0.3, 0.8]))
LOGP_MU = torch.log(torch.tensor([1.0, 0.5, 0.2, 0.2]))
STALE = torch.tensor([1, 1, 1, 0])


def test_truncated_is_by_hand():
    # min(ratio, C=2): 0.25, 1, 1.5 for stale tokens; the fresh token keeps 1 (its ratio 4 is ignored)
    w = offpolicy_weights("tis", LOGP_OLD, LOGP_MU, STALE, cap=2.0)
    assert w.tolist() == pytest.approx([0.25, 1.0, 1.5, 1.0])
    w = offpolicy_weights("tis", LOGP_OLD, LOGP_MU, torch.ones(4), cap=2.0)
    assert w.tolist() == pytest.approx([0.25, 1.0, 1.5, 2.0])


def test_masking_by_hand():
    # keep ratios in [0.5, 2]: 0.25 -> 0, 1 -> 1, 1.5 -> 1; fresh -> 1
    w = offpolicy_weights("mask", LOGP_OLD, LOGP_MU, STALE, lo=0.5, hi=2.0)
    assert w.tolist() == [0.0, 1.0, 1.0, 1.0]


def test_exclude_and_none():
    assert offpolicy_weights("exclude", LOGP_OLD, LOGP_MU, STALE).tolist() == [0.0, 0.0, 0.0, 1.0]
    assert offpolicy_weights("none", LOGP_OLD, LOGP_MU, STALE).tolist() == [1.0] * 4
    with pytest.raises(ValueError):
        offpolicy_weights("bogus", LOGP_OLD, LOGP_MU, STALE)


def test_budget_reward():
    right = RewardResult(1.0, "correct", "v")
    assert apply_budget(right, 10, 10) is right
    over = apply_budget(right, 11, 10)
    assert over.score == -1.0 and "over budget: 11 > 10" in over.reason and over.details["score_before_budget"] == 1.0
    wrong = apply_budget(RewardResult(0.0, "wrong", "v"), 50, 10)
    assert wrong.score == -1.0
    flagged = RewardResult(0.0, "raised", "v", ok=False)
    assert apply_budget(flagged, 10, 10) is flagged  # within budget: unscored stays unscored
    penalised = apply_budget(flagged, 50, 10)  # an unscored verdict never escapes the penalty
    assert penalised.ok and penalised.over_budget and penalised.score == -1.0
    assert penalised.details["score_before_budget"] is None and "was: unscored: raised" in penalised.reason
    assert apply_budget(right, 10**6, None) is right


def test_over_budget_is_a_flag_that_every_reader_uses():
    """rl step metrics and eval's cell score read `over_budget`, never the reason text."""
    import time

    from posttrain.stages.evaluate import cell_score
    from posttrain.stages.rl import step_metrics
    from posttrain.types import Completion, Message, Sample, Task, TrainStepResult, TrainSums

    over = apply_budget(RewardResult(1.0, "correct", "v"), 11, 10)
    assert over.over_budget and not apply_budget(RewardResult(1.0, "correct", "v"), 10, 10).over_budget
    words = RewardResult(1.0, "correct: 'over budget' vs expected 'over budget'", "reasoning_gym")  # not a flag
    assert cell_score(None, over) == 0.0 and cell_score(None, words) == 1.0
    sample = Sample(Task("t", "f", (Message("user", "q"),)), 0, (1,), Completion((1, 2), (0.0, 0.0), "x", "stop"))
    sums = TrainSums(**dict.fromkeys(("tokens", "stale_tokens", "offpolicy_weight", "loss", "clip_tokens", "kl"), 1.0))
    trained = TrainStepResult(sums=sums, grad_norm=0.0)
    metrics = step_metrics([sample] * 4, [over, words, words, words], [], trained, time.perf_counter(), 0.0)
    assert metrics["reward/over_budget_frac"] == 0.25


def test_task_budget_absolute_or_multiple():
    assert task_budget(100, None, 7) == 100
    assert task_budget(100, 1.5, 7) == 11  # ceil(10.5)
    assert task_budget(100, 1.5, None) == 100


def test_annealing_schedule_values():
    # linear 1000 -> 200 over 4 steps: 1000, 800, 600, 400, 200, then constant
    assert [budget_at(s, 1000, 200, 4) for s in range(1, 7)] == [1000, 800, 600, 400, 200, 200]
    # step schedule, stairs of 2 steps over 4 steps: 1000, 1000, 600, 600, 200
    assert [budget_at(s, 1000, 200, 4, "step", every=2) for s in range(1, 6)] == [1000, 1000, 600, 600, 200]
    assert budget_at(1, 500, 500, 10) == 500
    assert budget_at(3, 500, 100, 0) == 100
    assert math.isclose(budget_at(2, 300, 100, 3), 300 - 200 / 3, abs_tol=0.5)


def test_an_unscored_sample_over_budget_is_penalised_by_the_rl_stage():
    """The RL stage drops unscored samples; one over its budget is -1 and trained on instead,
    so voiding a verdict is never a way around the length penalty."""
    from types import SimpleNamespace

    from posttrain.stages.rl import RLRun
    from posttrain.types import Completion, Message, Sample, Task

    class Voided:
        name = "voided"

        async def score(self, samples):
            return [RewardResult(0.0, "the check could not run", self.name, ok=False) for _ in samples]

    task = Task("t", "f", (Message("user", "q"),))
    long, short = ((Sample(task, 0, (1,), Completion((7,) * n, (0.0,) * n, "x", "stop"))) for n in (50, 5))
    groups = [SimpleNamespace(budget=10, trajectories=[None, None])]
    over, within = RLRun.score(SimpleNamespace(verifier=Voided()), groups, [long, short])
    assert over.ok and over.over_budget and over.score == -1.0 and "unscored" in over.reason
    assert not within.ok and not within.over_budget
