"""The trainer's policy-gradient step on real DeepSpeed ranks (Ray actors, world size 2,
tiny model): PPO minibatches and epochs make the clip act, with the loss derived by hand;
the policy's entropy is summed exactly over micro-batches and ranks."""

import dataclasses
import math

import numpy as np
import pytest
import ray
import torch

from posttrain.config import GRPOConfig, TrainerConfig
from posttrain.train.group import TrainerGroup, split_minibatches
from posttrain.train.spec import loss_spec
from posttrain.types import TeacherTopK, TrainSequence

pytestmark = pytest.mark.slow

# One response token (42) after a 3-token prompt, advantage +1.
S = TrainSequence((1, 40, 41, 42), 3, (1.0,), (1.0,), (-5.0,))


def group(tiny_dir, workers=2, lr=0.05, micro=64):
    g = TrainerGroup(TrainerConfig(workers=workers, zero_stage=2, micro_batch_tokens=micro), seed=0)
    g.load(str(tiny_dir), "float32", lr=lr, warmup_steps=0)
    return g


def test_split_minibatches_is_contiguous_and_never_empty():
    seqs = [S] * 7
    assert split_minibatches(seqs, 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_minibatches(seqs, 1) == [list(range(7))]
    assert split_minibatches(seqs[:2], 4) == [[0], [1]]  # fewer sequences than minibatches
    assert split_minibatches([], 2) == [[]]


@pytest.mark.parametrize(
    "batch, minibatches, epochs",
    [pytest.param([S, S], 2, 1, marks=pytest.mark.system), pytest.param([S], 1, 2, marks=pytest.mark.system)],
    ids=["minibatches2", "epochs2"],
)
def test_second_optimizer_step_is_clipped_and_the_loss_is_the_hand_derived_one(
    ray_session, tiny_dir, batch, minibatches, epochs
):
    """Every optimizer step trains the one token with A = +1 (two minibatches of the same
    sequence, or one minibatch twice). Step 1: logp_old is the policy before it, so the
    ratio is 1 and the loss -min(1 * A, clip(1) * A) = -1. It raises the token's
    probability (lr 0.05: Adam moves every weight by about lr), so at step 2 the ratio
    exceeds 1 + eps_hi = 1.28: min(r * A, 1.28 * A) = 1.28 and the loss is -1.28, with
    the token clipped (and no gradient from it). Reported: the token mean over the batch
    averaged over epochs, (-1 - 1.28) / 2 = -1.14, and clip_frac = 1 clipped token of 2
    token-steps = 0.5. With one minibatch and one epoch the clip never acts: loss -1."""
    spec = loss_spec("pg", GRPOConfig(clip_eps_lo=0.2, clip_eps_hi=0.28, minibatches=minibatches, epochs=epochs))
    g = group(tiny_dir)
    try:
        before = g.logprobs([S])[0]
        out = g.train_step(batch, spec)
        assert out.sums.clip_tokens / out.sums.tokens == pytest.approx(0.5)
        assert out.sums.loss == pytest.approx((-1.0 - 1.28) / 2, abs=1e-6)
        assert out.sums.tokens == len(batch)  # every token counted once, whatever the epochs
        assert out.logp == [before] * len(batch)  # logp_old: the policy before the first step
        assert g.version == 1  # one RL step, one policy version, however many optimizer steps
    finally:
        g.shutdown()
    g = group(tiny_dir)
    try:
        out = g.train_step(batch, loss_spec("pg"))
        assert out.sums.clip_tokens == 0 and out.sums.loss == pytest.approx(-1.0)
    finally:
        g.shutdown()


def random_batch() -> list[TrainSequence]:
    gen = torch.Generator().manual_seed(1)
    seqs = []
    for n, p in ((9, 3), (14, 5), (6, 2), (11, 4), (17, 6)):
        ids = tuple(torch.randint(3, 300, (n,), generator=gen).tolist())
        mask = tuple(float(j % 3 != 1) for j in range(n - p))  # some tokens out of the loss (tool messages)
        advantages = tuple(torch.randn(n - p, generator=gen).tolist())
        seqs.append(TrainSequence(ids, p, advantages, mask))
    return seqs


def test_entropy_is_summed_exactly_over_micro_batches_and_ranks(ray_session, tiny_dir):
    from transformers import AutoModelForCausalLM

    seqs = random_batch()
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    total, tokens = 0.0, 0.0
    with torch.no_grad():
        for s in seqs:
            logp = torch.log_softmax(model(torch.tensor([s.token_ids])).logits[0, s.prompt_len - 1 : -1], -1)
            entropy = -(logp.exp() * logp).sum(-1)
            total += float((entropy * torch.tensor(s.loss_mask)).sum())
            tokens += sum(s.loss_mask)
    g = group(tiny_dir, lr=1e-3, micro=24)  # several micro-batches per rank, uneven over the ranks
    try:
        out = g.train_step(seqs, loss_spec("pg"))
        assert out.sums.tokens == tokens
        assert out.sums.entropy / out.sums.tokens == pytest.approx(total / tokens, rel=1e-5)
        assert 0 < total / tokens < math.log(model.config.vocab_size)
    finally:
        g.shutdown()


def test_gradient_checkpointing_changes_memory_not_the_step(ray_session, tiny_dir):
    """The same loss and gradient norm with activations recomputed (under ZeRO-3, whose
    parameters are gathered again for the recomputation) as without (ZeRO-2)."""
    seqs = random_batch()
    results = {}
    for zero, checkpointing in ((2, False), (3, True)):
        config = TrainerConfig(workers=2, zero_stage=zero, micro_batch_tokens=24, gradient_checkpointing=checkpointing)
        g = TrainerGroup(config, seed=0)
        try:
            g.load(str(tiny_dir), "float32", lr=1e-3, warmup_steps=0)
            active = ray.get(g.workers[0].__ray_call__.remote(lambda w: w.engine.module.is_gradient_checkpointing))
            assert active == checkpointing
            out = g.train_step(seqs, loss_spec("pg"))
            results[checkpointing] = (out.sums.loss, out.grad_norm)
        finally:
            g.shutdown()
    assert results[True] == pytest.approx(results[False], rel=1e-5)


def test_shared_prompts_give_the_same_step_on_ranks(ray_session, tiny_dir):
    """`trainer.share_prompts` (groups kept whole on a rank, each prompt computed once per
    row): the same logprobs, entropy, loss and gradient norm as one row per sample."""
    gen = torch.Generator().manual_seed(2)
    seqs = []
    for group in range(5):
        prompt = tuple(torch.randint(3, 300, (3 + group,), generator=gen).tolist())
        for _ in range(4):
            n = int(torch.randint(1, 9, (1,), generator=gen))
            seqs.append(
                TrainSequence(
                    prompt + tuple(torch.randint(3, 300, (n,), generator=gen).tolist()),
                    len(prompt),
                    tuple(torch.randn(n, generator=gen).tolist()),
                    (1.0,) * n,
                    tuple((-torch.rand(n, generator=gen)).tolist()),
                )
            )
    for i in range(0, len(seqs), 3):  # a teacher's top-5 on some sequences (MOPD's distill_topk), none on others
        n = seqs[i].response_len
        logp = torch.log_softmax(torch.randn(n, 5, generator=gen), -1).sort(-1, descending=True).values
        teacher = TeacherTopK(ids=torch.randint(3, 300, (n, 5), generator=gen).numpy(), logp=logp.numpy())
        seqs[i] = dataclasses.replace(seqs[i], teacher=teacher)
    results = {}
    for share in (False, True):
        config = TrainerConfig(workers=2, zero_stage=2, micro_batch_tokens=40, share_prompts=share)
        g = TrainerGroup(config, seed=0)
        try:
            g.load(str(tiny_dir), "float32", lr=1e-3, warmup_steps=0)
            results[share] = g.train_step(seqs, loss_spec("pg", GRPOConfig(minibatches=2), distill_coef=0.5))
        finally:
            g.shutdown()
    a, b = results[False], results[True]
    assert a.sums.distill_kl > 0
    assert [x for row in b.logp for x in row] == pytest.approx([x for row in a.logp for x in row], abs=1e-5)
    for key in ("loss", "entropy", "clip_tokens", "tokens", "distill_kl"):
        assert getattr(b.sums, key) == pytest.approx(getattr(a.sums, key), rel=1e-5, abs=1e-7), key
    assert b.grad_norm == pytest.approx(a.grad_norm, rel=1e-4)
    assert b.sums.sequence_tokens < a.sums.sequence_tokens  # the prompts' repeats are gone


def test_the_topk_term_teaches_a_token_the_student_never_samples(ray_session, tiny_dir):
    """The student samples 42 43; at both positions the teacher puts 0.9 on token 77 (and
    0.1 on three others). The sampled tokens' advantage is 0, so the policy gradient moves
    nothing: only the top-k KL can raise 77, a token that is in no sample. With it, 77 goes
    from ~1/512 to most of the mass; without it (distill_coef 0), the weights do not move."""
    q = np.log(np.array([[0.9, 0.1 / 3, 0.1 / 3, 0.1 / 3]] * 2, dtype=np.float32))
    teacher = TeacherTopK(ids=np.array([[77, 5, 6, 7]] * 2), logp=q)
    sampled = TrainSequence((1, 40, 41, 42, 43), 3, (0.0, 0.0), (1.0, 1.0), (-6.0, -6.0), teacher=teacher)
    probe = [TrainSequence((1, 40, 41, 77), 3, (0.0,), (1.0,))]
    moved = {}
    for coef in (0.0, 1.0):
        g = group(tiny_dir, workers=1, lr=2e-3)
        try:
            before = g.logprobs(probe)[0][0]
            steps = [g.train_step([sampled] * 4, loss_spec("pg", distill_coef=coef)) for _ in range(20)]
            kl = [s.sums.distill_kl / max(s.sums.tokens, 1.0) for s in steps]
            moved[coef] = (before, g.logprobs(probe)[0][0], kl, [s.left_out for s in steps])
        finally:
            g.shutdown()
    before, after, kl, left_out = moved[1.0]
    assert before < math.log(0.01) and after > math.log(0.5), (before, after)
    assert kl[-1] < 0.25 * kl[0], kl
    assert left_out == [0] * 20  # the teacher term has a gradient
    before, after, kl, left_out = moved[0.0]
    assert after == pytest.approx(before, abs=1e-6) and kl == [0.0] * 20
    assert left_out == [3] * 20  # a zero loss: left out of the passes but one (trainer.skip_zero_gradient)


def test_a_cosine_schedule_reaches_the_optimizer(ray_session, tiny_dir):
    """`lr_decay: cosine` down to 0 at step 1: the second step leaves the weights where the
    first put them; a constant lr moves them again."""
    probe = [TrainSequence((1, 40, 41, 77), 3, (0.0,), (1.0,))]
    moved = {}
    for decay in ("constant", "cosine"):
        g = TrainerGroup(TrainerConfig(workers=1, zero_stage=2, micro_batch_tokens=64), seed=0)
        try:
            g.load(str(tiny_dir), "float32", lr=1e-2, warmup_steps=0, decay=decay, total_steps=1, min_lr_ratio=0.0)
            g.train_step([S] * 2, loss_spec("nll"))
            after_one = g.logprobs(probe)[0][0]
            g.train_step([S] * 2, loss_spec("nll"))
            moved[decay] = abs(g.logprobs(probe)[0][0] - after_one)
        finally:
            g.shutdown()
    assert moved["cosine"] < 1e-6 < 1e-3 < moved["constant"], moved


def test_sequences_with_zero_gradient_are_left_out_and_the_steps_stay_the_same(ray_session, tiny_dir):
    """`trainer.skip_zero_gradient`: groups whose advantages are all 0 (the common case in
    GRPO: every sample right, or every one wrong) are left out of the passes, their tokens
    still in the token mean. Two steps (Adam's moments carried), one minibatch of nothing
    but such groups: the same loss, gradient norm and weights as training on all of them (one
    sequence is computed however many are left out: it measures the engine/trainer mismatch).
    A zero-advantage sequence with a teacher term, or any under a KL term, is kept."""
    gen = torch.Generator().manual_seed(3)
    seqs = []
    for group in range(6):
        prompt = tuple(torch.randint(3, 300, (3 + group,), generator=gen).tolist())
        zero = group in (0, 1, 4)  # the first minibatch (groups 0-2 of 6, minibatches=2) is mostly zero
        for _ in range(3):
            n = int(torch.randint(2, 8, (1,), generator=gen))
            adv = (0.0,) * n if zero else (float(torch.randn(1, generator=gen)),) * n
            ids = prompt + tuple(torch.randint(3, 300, (n,), generator=gen).tolist())
            seqs.append(
                TrainSequence(ids, len(prompt), adv, (1.0,) * n, tuple((-torch.rand(n, generator=gen)).tolist()))
            )
    n = seqs[12].response_len  # group 4: zero advantage, but a teacher's top-3 on one sample
    logp = torch.log_softmax(torch.randn(n, 3, generator=gen), -1).sort(-1, descending=True).values
    seqs[12] = dataclasses.replace(
        seqs[12], teacher=TeacherTopK(torch.randint(3, 300, (n, 3), generator=gen).numpy(), logp.numpy())
    )
    all_zero = [dataclasses.replace(s, advantages=(0.0,) * s.response_len, teacher=None) for s in seqs[:9]]

    # One pair of ranks for every run: each run loads the model and a fresh optimizer again (a
    # small model's reload keeps the rank processes, as in a pipeline); the full and skipping
    # runs' equal weights below show that nothing of an earlier run carries over.
    ranks = TrainerGroup(TrainerConfig(workers=2, zero_stage=2, micro_batch_tokens=40), seed=0)

    def run(skip: bool, batches, spec):
        ranks.config = ranks.config.model_copy(update={"skip_zero_gradient": skip})
        ranks.load(str(tiny_dir), "float32", lr=1e-2, warmup_steps=0)
        outs = [ranks.train_step(b, spec) for b in batches]
        weights = ray.get(
            ranks.workers[0].__ray_call__.remote(lambda w: [p.detach().clone() for p in w.engine.module.parameters()])
        )
        return outs, weights

    try:
        check_zero_gradient_runs(run, seqs, all_zero)
    finally:
        ranks.shutdown()


def check_zero_gradient_runs(run, seqs, all_zero):
    spec = loss_spec("pg", GRPOConfig(minibatches=2), distill_coef=0.5)
    batches = [seqs, all_zero, seqs]
    (full, w_full), (skip, w_skip) = run(False, batches, spec), run(True, batches, spec)
    assert [o.left_out for o in full] == [0, 0, 0]
    # groups 0, 1 and 4 less the teacher's sample; all of the second but one (logp/mismatch is measured every step)
    assert [o.left_out for o in skip] == [8, 8, 8]
    for a, b in zip(full, skip):
        assert b.sums.loss == pytest.approx(a.sums.loss, rel=1e-5, abs=1e-7)
        assert b.grad_norm == pytest.approx(a.grad_norm, rel=1e-4, abs=1e-7)
        assert b.applied == a.applied == 2
        kept = [i for i, row in enumerate(b.logp) if row]
        assert len(kept) == len(b.logp) - b.left_out
        assert [b.logp[i] for i in kept] == [pytest.approx(a.logp[i], abs=1e-5) for i in kept]
    assert skip[0].sums.tokens < full[0].sums.tokens  # less was computed
    assert full[1].grad_norm == skip[1].grad_norm == 0.0  # a zero gradient, and Adam's moments still move the weights:
    one, two = run(True, batches[:1], spec)[1], run(True, batches[:2], spec)[1]
    assert max(float((x - y).abs().max()) for x, y in zip(one, two)) > 1e-4
    assert max(float((x - y).abs().max()) for x, y in zip(w_full, w_skip)) < 1e-5

    kl_outs, _ = run(True, [seqs[:9]], loss_spec("pg", GRPOConfig(kl_beta=0.1)))
    assert kl_outs[0].left_out == 0  # the KL term has a gradient on every sequence
    bonus_outs, _ = run(True, [all_zero], loss_spec("pg", GRPOConfig(entropy_coef=0.01)))
    assert bonus_outs[0].left_out == 0 and bonus_outs[0].grad_norm > 0  # so has the entropy bonus


def test_the_entropy_bonus_raises_the_entropy_of_zero_advantage_sequences(ray_session, tiny_dir):
    """SFT steps first make the policy sure of the sequences' tokens (low entropy). Then
    every advantage is 0, so the policy gradient is 0: with the bonus (-0.5 x entropy per
    token) the steps raise the entropy again; without it only Adam's momentum moves the
    weights (each step's sums measure the entropy before its update)."""
    gen = torch.Generator().manual_seed(5)
    seqs = [TrainSequence(tuple(torch.randint(3, 300, (8,), generator=gen).tolist()), 3, (0.0,) * 5, (1.0,) * 5)]
    seqs *= 4
    entropies = {}
    g = group(tiny_dir, lr=1e-2)
    try:
        for coef in (0.0, 0.5):  # each from the model loaded again, with a fresh optimizer
            if coef:
                g.load(str(tiny_dir), "float32", lr=1e-2, warmup_steps=0)
            for _ in range(6):
                g.train_step(seqs, loss_spec("nll"))
            spec = loss_spec("pg", GRPOConfig(entropy_coef=coef) if coef else GRPOConfig())
            entropies[coef] = [
                (o.sums.entropy / o.sums.tokens, o.grad_norm) for o in [g.train_step(seqs, spec) for _ in range(6)]
            ]
    finally:
        g.shutdown()
    plain, bonus = [h for h, _ in entropies[0.0]], [h for h, _ in entropies[0.5]]
    assert all(n == 0 for _, n in entropies[0.0]) and all(n > 0 for _, n in entropies[0.5])
    assert bonus[0] == pytest.approx(plain[0], abs=1e-5)  # the same policy before the first bonus step
    assert bonus[-1] > bonus[0] + 0.5 and bonus[-1] > plain[-1] + 0.5, (plain, bonus)
