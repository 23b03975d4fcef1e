"""Per-token loss terms. The trainer sums `per_token * mask` over all tokens of the
global batch and divides by the global token count (token-level mean, docs/recipe.md).

pg:  -min(ratio * A, clip(ratio, 1-eps_lo, 1+eps_hi) * A) [+ beta * k3 KL to the reference]
nll: -logp (SFT)
topk KL: sum over the teacher's top-k tokens v of q_v (log q_v - log p_v), the forward KL
    from the teacher's next-token distribution q to the student's p at each position of the
    student's sample (MOPD's `distill_topk`; exact when k covers the vocabulary)

Token logprobs and entropies come from one fused, chunked log-softmax: fp32 only one chunk
of positions at a time, never the whole [positions, vocab] logits (docs/recipe.md, RL).
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 2**22  # fp32 temporaries of one chunk: 16 MiB each


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[target] per position, computed in fp32."""
    return token_logprobs_entropy(logits, targets, temperature)[0]


def token_logprobs_entropy(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position: log softmax(logits / T)[target] and the entropy -sum_v p_v log p_v of
    softmax(logits / T), both fp32 and differentiable (the entropy's gradient is computed
    only when a loss uses it: the entropy bonus). `logits` [..., V] in any dtype; the
    backward pass recomputes the softmax chunk by chunk from them."""
    shape = targets.shape
    flat_logits = logits.reshape(-1, logits.shape[-1])
    logp, entropy = _FusedLogprob.apply(flat_logits, targets.reshape(-1), float(temperature))
    return logp.view(shape), entropy.view(shape)


def _chunks(rows: int, vocab: int):
    step = max(1, CHUNK_ELEMENTS // max(vocab, 1))
    return (slice(i, min(i + step, rows)) for i in range(0, rows, step))


class _FusedLogprob(torch.autograd.Function):
    """d logp_target / d logits_v = (1[v = target] - p_v) / T and d H / d logits_v =
    -p_v (log p_v + H) / T. Saves the logits as they came (no fp32 copy), one logsumexp and
    one entropy per position; peak extra memory is one chunk."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, temperature: float):
        rows, vocab = logits.shape
        logp = torch.empty(rows, dtype=torch.float32, device=logits.device)
        entropy = torch.empty_like(logp)
        lse = torch.empty_like(logp)
        for part in _chunks(rows, vocab):
            x = logits[part].float() / temperature  # a new fp32 tensor even when logits are fp32
            lse[part] = torch.logsumexp(x, dim=-1)
            x -= lse[part].unsqueeze(-1)  # log p
            logp[part] = x.gather(-1, targets[part].unsqueeze(-1)).squeeze(-1)
            entropy[part] = -(x.exp() * x).sum(-1)
        ctx.save_for_backward(logits, targets, lse, entropy)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None: no entropy pass
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        logits, targets, lse, entropy = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for part in _chunks(*logits.shape):
            x = logits[part].float() / ctx.temperature - lse[part].unsqueeze(-1)  # log p
            p = x.exp()
            if grad_entropy is not None:  # -p (log p + H) per unit of the entropy's gradient
                x += entropy[part].unsqueeze(-1)
                x *= p
                x *= -grad_entropy[part].unsqueeze(-1)
            else:
                x.zero_()
            if grad_logp is not None:  # (1[v = target] - p) per unit of the logprob's gradient
                x -= p.mul_(grad_logp[part].unsqueeze(-1))
                x.scatter_add_(-1, targets[part].unsqueeze(-1), grad_logp[part].unsqueeze(-1))
            grad[part] = x / ctx.temperature
        return grad, None, None


def topk_forward_kl(
    logits: torch.Tensor, teacher_ids: torch.Tensor, teacher_logp: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Per position: sum_j q_j (log q_j - log softmax(logits / T)[ids_j]) over the teacher's
    k tokens (`teacher_ids`, `teacher_logp` [..., k]; q = exp(teacher_logp), padding entries
    carry q = 0). Differentiable in the logits, fp32, chunked like the token logprobs."""
    shape = teacher_ids.shape[:-1]
    k = teacher_ids.shape[-1]
    kl = _FusedTopkKL.apply(
        logits.reshape(-1, logits.shape[-1]),
        teacher_ids.reshape(-1, k),
        teacher_logp.reshape(-1, k).float(),
        float(temperature),
    )
    return kl.view(shape)


class _FusedTopkKL(torch.autograd.Function):
    """d KL / d logits_v = (Q p_v - q_v) / T, with Q the teacher mass on its k tokens and
    q_v 0 off them. Saves the logits as they came and one logsumexp per position."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, ids: torch.Tensor, teacher_logp: torch.Tensor, temperature: float):
        rows, vocab = logits.shape
        kl = torch.empty(rows, dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(kl)
        q = teacher_logp.exp()
        for part in _chunks(rows, vocab):
            x = logits[part].float() / temperature
            lse[part] = torch.logsumexp(x, dim=-1)
            student = x.gather(-1, ids[part]) - lse[part].unsqueeze(-1)
            kl[part] = (q[part] * (teacher_logp[part] - student)).sum(-1)
        ctx.save_for_backward(logits, ids, q, lse)
        ctx.temperature = temperature
        return kl

    @staticmethod
    def backward(ctx, grad_kl: torch.Tensor):
        logits, ids, q, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for part in _chunks(*logits.shape):
            g = (logits[part].float() / ctx.temperature - lse[part].unsqueeze(-1)).exp_()  # p
            g *= q[part].sum(-1, keepdim=True)
            g.scatter_add_(-1, ids[part], -q[part])
            grad[part] = g * (grad_kl[part] / ctx.temperature).unsqueeze(-1)
        return grad, None, None, None


def policy_gradient_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps_lo: float,
    clip_eps_hi: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO-clip per-token loss and a 0/1 tensor marking tokens where the clip was active."""
    ratio = torch.exp(logp - logp_old)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps_lo, 1.0 + clip_eps_hi) * advantages
    loss = -torch.minimum(unclipped, clipped)
    return loss, (clipped < unclipped).float()


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Unbiased, non-negative estimator of KL(theta || ref) per token (Schulman's k3)."""
    log_ratio = logp_ref - logp
    return torch.exp(log_ratio) - log_ratio - 1.0


def nll_loss(logp: torch.Tensor) -> torch.Tensor:
    return -logp
