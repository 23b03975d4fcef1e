"""The trainer->driver seam, without Ray: the loss settings come from the config alone,
the typed step result merges over ranks in batch order, micro-batches are packed by
their padded size, and a step with nothing to train on logs as skipped."""

import dataclasses
import math
import time

import pytest

from posttrain.config import GRPOConfig, PartialRolloutConfig, RLStage
from posttrain.train.batching import micro_batches
from posttrain.train.group import merge_results
from posttrain.train.spec import loss_spec
from posttrain.types import LossSpec, TrainSequence, TrainStepResult, TrainSums


def test_loss_spec_has_no_defaults_of_its_own():
    """config/algo.py is the one place the loss defaults are written."""
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(LossSpec))


@pytest.mark.parametrize(
    "correction, expected",
    [
        ({}, dict(correction="tis", tis_cap=2.0, mask_lo=None, mask_hi=None, correct_fresh=False)),
        ({"type": "tis", "cap": 3.5, "fresh": True}, dict(correction="tis", tis_cap=3.5, correct_fresh=True)),
        ({"type": "mask", "lo": 0.3, "hi": 4.0}, dict(correction="mask", tis_cap=None, mask_lo=0.3, mask_hi=4.0)),
        ({"type": "exclude"}, dict(correction="exclude", tis_cap=None, mask_lo=None, correct_fresh=False)),
    ],
)
def test_a_stage_loss_spec_is_its_config(correction, expected):
    from posttrain.stages.rl import stage_loss_spec

    partial = {"correction": correction} if correction else {}
    algo = {"clip_eps_lo": 0.1, "clip_eps_hi": 0.3, "kl_beta": 0.05, "minibatches": 2, "epochs": 3}
    tasks = {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 4}
    stage = RLStage(name="rl", type="rl", lr=1e-4, steps=1, tasks=tasks, algo=algo, temperature=0.9, partial=partial)
    spec = stage_loss_spec(stage)
    assert (spec.kind, spec.clip_eps_lo, spec.clip_eps_hi, spec.kl_beta) == ("pg", 0.1, 0.3, 0.05)
    assert (spec.minibatches, spec.epochs, spec.temperature) == (2, 3, 0.9)
    assert {k: getattr(spec, k) for k in expected} == expected


def test_loss_spec_defaults_follow_the_config_defaults():
    algo, tis = GRPOConfig(), PartialRolloutConfig().correction
    spec = loss_spec("pg", correction=tis)
    assert (spec.clip_eps_lo, spec.clip_eps_hi, spec.kl_beta) == (algo.clip_eps_lo, algo.clip_eps_hi, algo.kl_beta)
    assert (spec.minibatches, spec.epochs, spec.tis_cap) == (algo.minibatches, algo.epochs, tis.cap)
    plain = loss_spec("nll")  # no correction given: every token weighs 1
    assert (plain.kind, plain.correction, plain.correct_fresh, plain.temperature) == ("nll", "none", False, 1.0)


def test_sums_add_field_by_field():
    a = TrainSums(loss=1.5, tokens=3.0, entropy=0.25)
    b = TrainSums(loss=-0.5, tokens=2.0, kl=0.125, positions=7.0)
    total = a + b
    assert (total.loss, total.tokens, total.entropy, total.kl, total.positions) == (1.0, 5.0, 0.25, 0.125, 7.0)
    assert total.clip_tokens == 0.0


def test_merged_results_come_back_in_batch_order():
    """Rank 0 trained batch sequences 2 and 0, rank 1 sequence 1: per-sequence lists go
    back to their batch index, sums add, the slowest rank's seconds count."""
    rank0 = TrainStepResult(
        logp=[[-2.0], [-0.5, -0.25]],
        weights=[[1.0], [0.5, 1.0]],
        sums=TrainSums(tokens=3.0, loss=0.5),
        grad_norm=0.75,
        applied=1,
        seconds=2.0,
    )
    rank1 = TrainStepResult(logp=[[-1.0]], weights=[[2.0]], sums=TrainSums(tokens=1.0, loss=0.25), seconds=3.0)
    merged = merge_results([rank0, rank1], [[2, 0], [1]], 3)
    assert merged.logp == [[-0.5, -0.25], [-1.0], [-2.0]]
    assert merged.weights == [[0.5, 1.0], [2.0], [1.0]]
    assert (merged.sums.tokens, merged.sums.loss, merged.seconds) == (4.0, 0.75, 3.0)
    assert (merged.grad_norm, merged.applied, merged.skipped, merged.empty) == (0.75, 1, False, False)


def _seq(prompt: tuple, response_len: int) -> TrainSequence:
    return TrainSequence(prompt + (9,) * response_len, len(prompt), (0.0,) * response_len, (1.0,) * response_len)


def test_micro_batches_pack_rows_shortest_first_up_to_the_cap():
    # lengths 5, 3, 8, 3; cap 16: 3+3+5 padded to 5 x 3 = 15 fits, the 8 would make 8 x 4 = 32
    seqs = [_seq((1, 2), 3), _seq((1,), 2), _seq((3, 4, 5), 5), _seq((6,), 2)]
    assert micro_batches(seqs, 16, share_prompts=False) == [[1, 3, 0], [2]]
    assert micro_batches(seqs, 64, share_prompts=False) == [[1, 3, 0, 2]]
    assert micro_batches(seqs, 8, share_prompts=False) == [[1, 3], [0], [2]]  # one row alone may pass the cap


def test_shared_micro_batches_keep_a_group_in_one_row():
    # group A (prompt 1 2 3, responses of 2 and 4): one row of 3 + 2 + (4 + 1) = 10 positions;
    # group B (prompt 7, response 3): a row of 4. Sorted by size: B's row, then A's.
    seqs = [_seq((1, 2, 3), 2), _seq((7,), 3), _seq((1, 2, 3), 4)]
    assert micro_batches(seqs, 20, share_prompts=True) == [[1, 0, 2]]  # 10 x 2 = 20 fits
    assert micro_batches(seqs, 19, share_prompts=True) == [[1], [0, 2]]


def test_a_step_with_nothing_to_train_on_logs_as_skipped():
    from posttrain.stages.rl import step_metrics
    from posttrain.types import Completion, Message, RewardResult, Sample, Task

    sample = Sample(Task("t", "f", (Message("user", "q"),)), 0, (1,), Completion((2,), (0.0,), "x", "stop"))
    row = step_metrics(
        [sample], [RewardResult(0.0, "r", "v", ok=False)], [], TrainStepResult(empty=True), time.perf_counter(), 0.0
    )
    assert row["train/skipped_empty"] == 1.0 and row["train/skipped_nonfinite"] == 0.0
    assert row["tokens/trained"] == 0.0 and math.isnan(row["grad/norm"])
    assert row["offpolicy/fresh_weight_mean"] == 1.0
