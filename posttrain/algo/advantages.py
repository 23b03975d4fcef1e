"""Group-relative advantages (GRPO, and Dr.GRPO without the std division).

In: rewards_P_G, one row of G rewards per prompt. Out: one advantage per sample,
same shape. docs/recipe.md: A_i = (r_i - mean(r)) / (std(r) + eps).
"""

from __future__ import annotations

import torch


def grpo_advantages(rewards_P_G: list[list[float]], std_normalize: bool = True, eps: float = 1e-6) -> list[list[float]]:
    out = []
    for rewards_G in rewards_P_G:
        if not rewards_G:
            out.append([])
            continue
        r = torch.tensor(rewards_G, dtype=torch.float64)
        centered = r - r.mean()
        if std_normalize:
            # Population std (divide by G): a group of identical rewards gives 0, not NaN.
            centered = centered / (r.std(unbiased=False) + eps)
        out.append(centered.tolist())
    return out
