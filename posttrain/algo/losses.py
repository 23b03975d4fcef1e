"""Per-token loss terms. The trainer sums `per_token * mask` over all tokens of the
global batch and divides by the global token count (token-level mean, docs/recipe.md).

pg:  -min(ratio * A, clip(ratio, 1-eps_lo, 1+eps_hi) * A) [+ beta * k3 KL to the reference]
nll: -logp (SFT)
"""

from __future__ import annotations

import torch


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[target] per position, computed in fp32."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.gather(torch.log_softmax(logits, dim=-1), -1, targets.unsqueeze(-1)).squeeze(-1)


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
