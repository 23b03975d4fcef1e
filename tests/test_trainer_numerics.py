"""The trainer's numerics and device handling on CPU, without Ray: the fused chunked
log-softmax (token logprobs, entropy, gradient) against hand-derived values and plain
autograd; inputs collated onto the rank's device; every collective's tensor on it."""

import math

import pytest
import torch

import posttrain.algo.losses as losses
from posttrain.algo.losses import token_logprobs_entropy
from posttrain.config import TrainerConfig
from posttrain.train.batching import collate, collate_micro_batch, collate_shared, micro_batches, prompt_rows
from posttrain.train.distributed import group_backend, rank_device
from posttrain.train.trainer import TrainerWorker
from posttrain.types import TrainSequence


def test_entropy_and_logprob_of_a_two_token_vocabulary_by_hand():
    # logits [0, ln 3]: p = [1/4, 3/4]; H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.562335...
    # T = 2: logits [0, ln(3)/2] -> p = [1/(1+sqrt3), sqrt3/(1+sqrt3)] = [0.366025, 0.633975]
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])
    logp, entropy = token_logprobs_entropy(logits, torch.tensor([[1, 0]]))
    assert logp[0].tolist() == pytest.approx([math.log(0.75), math.log(0.25)])
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy[0].tolist() == pytest.approx([h, h]) and h == pytest.approx(0.562335, abs=1e-6)
    p0 = 1 / (1 + math.sqrt(3))
    logp2, entropy2 = token_logprobs_entropy(logits, torch.tensor([[0, 0]]), temperature=2.0)
    assert logp2[0].tolist() == pytest.approx([math.log(p0)] * 2)
    assert entropy2[0].tolist() == pytest.approx([-(p0 * math.log(p0) + (1 - p0) * math.log(1 - p0))] * 2)
    uniform = token_logprobs_entropy(torch.zeros(1, 3, 8), torch.zeros(1, 3, dtype=torch.long))[1]
    assert uniform[0].tolist() == pytest.approx([math.log(8)] * 3)  # the largest entropy: ln V


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("uses", ["logp", "entropy", "both"])
def test_fused_chunks_match_plain_autograd(monkeypatch, dtype, temperature, uses):
    """Values and gradients of the fused function against plain autograd, for a loss that
    uses the logprobs, the entropy (the entropy bonus) or both."""
    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 2 * 37)  # two positions per chunk, 8 chunks of 15 rows
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 37, generator=gen) * 3).to(dtype).requires_grad_()
    targets = torch.randint(0, 37, (3, 5), generator=gen)
    up_logp, up_entropy = torch.randn(3, 5, generator=gen), torch.randn(3, 5, generator=gen)

    def loss(logp, entropy):  # only the terms used: an unused output gets no gradient at all
        terms = {"logp": (logp * up_logp).sum(), "entropy": (entropy * up_entropy).sum()}
        return sum(value for name, value in terms.items() if uses in (name, "both"))

    logp, entropy = token_logprobs_entropy(logits, targets, temperature)
    loss(logp, entropy).backward()
    fused_grad = logits.grad.clone()
    logits.grad = None
    ref = torch.log_softmax(logits.float() / temperature, dim=-1)
    ref_logp, ref_entropy = ref.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(ref.exp() * ref).sum(-1)
    loss(ref_logp, ref_entropy).backward()
    assert logp.dtype == torch.float32 and entropy.dtype == torch.float32
    assert torch.allclose(logp, ref_logp, atol=1e-5)
    assert torch.allclose(entropy, ref_entropy, atol=1e-5)
    assert fused_grad.dtype == dtype and fused_grad.abs().sum() > 0
    assert torch.allclose(fused_grad.float(), logits.grad.float(), atol=1e-6 if dtype == torch.float32 else 1e-2)


SEQS = [
    TrainSequence((1, 2, 3, 4, 5), 3, (0.5, -0.5), (1.0, 1.0), (-1.0, -2.0), (0.0, 1.0)),
    TrainSequence((1, 6, 7, 8, 9, 10, 11), 2, (1.0,) * 5, (1.0, 0.0, 1.0, 1.0, 1.0)),
]


def test_collate_puts_every_input_on_the_device_and_aligns_the_window():
    batch = collate(SEQS, torch.device("meta"))  # any device but the CPU shows a tensor left behind
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    assert set(tensors) >= {"input_ids", "attention_mask", "targets", "advantages", "loss_mask", "logp_engine"}
    assert {v.device.type for v in tensors.values()} == {"meta"}
    shared = collate_shared(SEQS, torch.device("meta"), cap=64)  # the shared-prompt layout too
    assert {v.device.type for v in shared.values() if isinstance(v, torch.Tensor)} == {"meta"}
    cpu = collate(SEQS, torch.device("cpu"))
    assert cpu["window"] == (1, 6)  # positions 1..5 predict every response token of both
    for s, (row, start) in zip(SEQS, cpu["where"]):
        span = slice(start, start + s.response_len)
        assert cpu["targets"][row, span].tolist() == list(s.token_ids[s.prompt_len :])
        assert cpu["advantages"][row, span].tolist() == list(s.advantages)
        assert cpu["loss_mask"][row].sum() == sum(s.loss_mask)
    assert cpu["stale"][0].tolist() == [0, 0, 1, 0, 0]  # seq 0: its response at window 1..2, the 2nd stale
    assert cpu["has_engine"][1].sum() == 0


def test_rank_device_follows_the_rank_resources():
    assert rank_device(0) == torch.device("cpu") and group_backend(rank_device(0)) == "gloo"
    assert rank_device(0.5) == torch.device("cuda", 0) and group_backend(rank_device(1)) == "nccl"


class _Reduced(Exception):
    """Raised by the recording all_reduce: a meta tensor has no value to read back."""


def test_every_collective_tensor_lives_on_the_rank_device(monkeypatch):
    """The NCCL bug (CPU tensors in collectives) on a CPU machine: a rank whose device is
    `meta` must hand every collective a meta tensor."""
    seen = []

    def all_reduce(tensor, op=None):
        seen.append(tensor.device)
        raise _Reduced

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    worker = TrainerWorker.__new__(TrainerWorker)
    worker.device, worker.world_size, worker.config = torch.device("meta"), 2, TrainerConfig(micro_batch_tokens=16)
    for call in (
        lambda: worker._any_rank(True),
        lambda: worker._aligned_micro_batches(SEQS),
        lambda: worker._all_ok(None),
    ):
        with pytest.raises(_Reduced):
            call()
    assert seen == [torch.device("meta")] * 3


class _SpyLM(torch.nn.Module):
    """A language model (embedding, head) that records the devices of its inputs."""

    def __init__(self, vocab: int = 16):
        super().__init__()
        self.embed, self.head, self.seen = torch.nn.Embedding(vocab, 4), torch.nn.Linear(4, vocab), []

    def forward(self, input_ids, attention_mask, use_cache, logits_to_keep):
        self.seen += [input_ids.device, attention_mask.device, logits_to_keep.device]
        hidden = self.embed(input_ids)[:, logits_to_keep]
        return type("Out", (), {"logits": self.head(hidden * attention_mask[:, logits_to_keep, None])})


def test_forward_gives_the_model_its_inputs_on_the_rank_device():
    worker = TrainerWorker.__new__(TrainerWorker)
    worker.device, worker.keeps_logits, worker.config = torch.device("meta"), True, TrainerConfig()
    model = _SpyLM().to("meta")
    logp, entropy = worker._forward_logp(model, worker._collate(SEQS), 1.0)
    assert set(model.seen) == {torch.device("meta")}
    assert logp.device.type == entropy.device.type == "meta" and logp.shape == (2, 5)
    with pytest.raises(RuntimeError, match="meta"):  # the bug: CPU inputs for a model on another device
        worker._forward_logp(model, collate(SEQS, torch.device("cpu")), 1.0)


def _pipeline(**changes) -> dict:
    rl = {
        "name": "rl",
        "type": "rl",
        "steps": 1,
        "lr": 1e-4,
        "prompts_per_step": 2,
        "group_size": 2,
        "tasks": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}]},
    }
    raw = {"model": {"name": "tiny"}, "stages": [rl]}
    for key, value in changes.items():
        if key in ("algo", "partial"):
            rl[key] = value
        else:
            raw[key] = value
    return raw


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"model": {"name": "tiny", "dtype": "bfloat16"}, "trainer": {"zero_stage": 0}},
            "p.yaml: trainer.zero_stage: model.dtype bfloat16 needs zero_stage >= 1",
        ),
        (
            {"partial": {"correction": {"type": "exclude", "fresh": True}}},
            "p.yaml: stages[0].partial.correction: fresh: exclude would drop every fresh token",
        ),
        ({"algo": {"minibatches": 5}}, "p.yaml: stages[0]: algo.minibatches (5) must be at most prompts_per_step"),
        ({"algo": {"epochs": 0}}, "p.yaml: stages[0].algo.epochs: must be >= 1"),
    ],
)
def test_trainer_config_errors_name_the_key(changes, message):
    from posttrain.config.files import ConfigError, validate_pipeline

    with pytest.raises(ConfigError) as info:
        validate_pipeline(_pipeline(**changes), source="p.yaml")
    assert str(info.value).startswith(message), str(info.value)


def test_trainer_options_validate():
    from posttrain.config.files import validate_pipeline

    config = validate_pipeline(
        _pipeline(
            model={"name": "tiny", "dtype": "bfloat16"},
            trainer={"zero_stage": 2, "gradient_checkpointing": True},
            algo={"minibatches": 4, "epochs": 2},
            partial={"correction": {"type": "mask", "lo": 0.8, "hi": 1.25, "fresh": True}},
        )
    )
    stage = config.stages[0]
    assert config.trainer.gradient_checkpointing and (stage.algo.minibatches, stage.algo.epochs) == (4, 2)
    assert stage.partial.correction.fresh


def _group_batch() -> list[TrainSequence]:
    """Two groups (3 and 2 samples) of different prompts, responses of different lengths."""
    gen = torch.Generator().manual_seed(3)
    seqs = []
    for prompt_len, lengths in ((6, (4, 2, 5)), (3, (3, 6))):
        prompt = tuple(torch.randint(3, 500, (prompt_len,), generator=gen).tolist())
        for n in lengths:
            response = tuple(torch.randint(3, 500, (n,), generator=gen).tolist())
            mask = tuple(float(j != 1) for j in range(n))
            advantages = tuple(torch.randn(n, generator=gen).tolist())  # not the global RNG: whatever ran before
            seqs.append(TrainSequence(prompt + response, prompt_len, advantages, mask))
    return seqs


def test_prompt_rows_share_a_prompt_within_the_cap():
    seqs = _group_batch()
    assert prompt_rows(seqs, cap=10_000) == [[0, 1, 2], [3, 4]]
    # a row: the prompt (6) + sample 0 (4 + 1) + sample 1 (2 + 1) = 14; sample 2 would make 20
    assert prompt_rows(seqs, cap=14) == [[0, 1], [2], [3, 4]]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_shared_prompt_rows_give_the_same_logprobs_entropy_and_gradient(tiny_dir, attention):
    """Each group's prompt computed once (a 4-D mask, positions as if alone) against one
    padded row per sample: the same token logprobs, entropies and parameter gradient."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation=attention)
    worker = TrainerWorker.__new__(TrainerWorker)
    worker.device, worker.keeps_logits = torch.device("cpu"), True
    seqs = _group_batch()
    results = []
    for batch in (collate(seqs, worker.device), collate_shared(seqs, worker.device, 14)):
        model.zero_grad()
        logp, entropy = worker._forward_logp(model, batch, 0.8)
        (logp * batch["advantages"] * batch["loss_mask"]).sum().backward()
        per_seq = [
            (logp[r, c : c + s.response_len].tolist(), entropy[r, c : c + s.response_len].tolist())
            for s, (r, c) in zip(seqs, batch["where"])
        ]
        grad = torch.cat([p.grad.flatten() for p in model.parameters()])
        results.append((per_seq, grad, batch["positions"]))
    (padded, grad_padded, pos_padded), (shared, grad_shared, pos_shared) = results
    # Two fp32 computations of one sum in different orders (other shapes, so other kernel
    # blocking; AVX2 and AVX-512 builds differ again) each lie within about sqrt(n) u of it,
    # relative to the scale of its terms (the probabilistic rounding bound, u = eps / 2). The
    # longest sums run over the vocabulary (the softmax normalizer and its gradient): between
    # the two, sqrt(V) eps of the scale, ln V for logprobs and entropies, the largest entry for
    # the gradient. (A fixed atol of 1e-6 on gradients of up to ~10 failed 3 of 20 advantage draws
    # with sdpa and 1 of 20 with eager on an AVX2 CPU.)
    vocab = model.config.vocab_size
    tolerance = math.sqrt(vocab) * torch.finfo(torch.float32).eps
    for (lp_a, h_a), (lp_b, h_b) in zip(padded, shared):
        assert lp_b == pytest.approx(lp_a, abs=tolerance * math.log(vocab))
        assert h_b == pytest.approx(h_a, abs=tolerance * math.log(vocab))
    assert torch.allclose(grad_shared, grad_padded, atol=tolerance * float(grad_padded.abs().max()), rtol=1e-4)
    assert pos_shared[1] < pos_padded[1]  # fewer real positions: the first prompt twice, not three times


def _saved_square_masks(model, batch) -> tuple[int, int]:
    """(tensors of shape [..., L, L] autograd saved in a forward, distinct storages among them)."""
    length = batch["input_ids"].shape[1]
    saved = []

    def pack(t):
        if t.dim() >= 2 and t.shape[-2:] == (length, length):
            saved.append(t.untyped_storage().data_ptr())
        return t

    worker = TrainerWorker.__new__(TrainerWorker)
    worker.device, worker.keeps_logits = torch.device("cpu"), True
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _ = worker._forward_logp(model, batch, 1.0)
    logp.sum().backward()
    return len(saved), len(set(saved))


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_shared_prompt_mask_is_one_bias_for_every_layer(tiny_dir, attention):
    """The 4-D mask reaches the model as one additive bias in the model's dtype; the layers
    share it (a boolean mask became a new bias in every layer's attention, each one kept
    for the backward pass: rows x L^2 x layers)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation=attention)
    assert model.config.num_hidden_layers >= 2
    batch = collate_shared(_group_batch(), torch.device("cpu"), 14)
    assert batch["attention_mask"].dtype == torch.float32 and batch["attention_mask"].dim() == 4
    count, storages = _saved_square_masks(model, batch)
    assert storages <= 1 + (attention == "eager") * model.config.num_hidden_layers, (count, storages)
    assert collate_shared(_group_batch(), torch.device("cpu"), 14, torch.bfloat16)["attention_mask"].dtype == (
        torch.bfloat16
    )


def test_rows_longer_than_share_prompts_max_len_take_the_plain_layout():
    """A row longer than `max_shared` positions is not shared: its micro-batch is plain rows
    (a 2-D mask, no L^2 bias), packed apart from the shared rows even where the cap fits both."""
    a = (11, 12, 13, 14)  # two samples of one prompt: a shared row of 3 + 3 + 3 = 9 positions
    b = (21, 22, 23, 24)  # one sample of 12 tokens: 16 positions alone
    seqs = [
        TrainSequence(a + (5, 6), 4, (1.0, 1.0), (1.0, 1.0)),
        TrainSequence(a + (7, 8), 4, (1.0, 1.0), (1.0, 1.0)),
        TrainSequence(b + tuple(range(30, 42)), 4, (1.0,) * 12, (1.0,) * 12),
    ]
    assert micro_batches(seqs, cap=64, share_prompts=True) == [[0, 1, 2]]  # unbounded: one micro-batch
    batches = micro_batches(seqs, cap=64, share_prompts=True, max_shared=12)
    assert batches == [[0, 1], [2]]
    cpu = torch.device("cpu")
    layouts = [collate_micro_batch([seqs[i] for i in mb], cpu, 64, True, max_shared=12) for mb in batches]
    assert [batch["attention_mask"].dim() for batch in layouts] == [4, 2]
    assert layouts[0]["attention_mask"].shape[-1] == 9
    # the whole batch at once: one sequence is over the limit, so nothing is shared
    assert collate_micro_batch(seqs, cpu, 64, True, max_shared=12)["attention_mask"].dim() == 2
    assert collate_micro_batch(seqs, cpu, 64, True, max_shared=64)["attention_mask"].dim() == 4
