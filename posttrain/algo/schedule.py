"""The learning-rate schedule: the factor the peak lr is multiplied by at each optimizer step.

Linear warm-up over `warmup` steps ((step + 1) / (warmup + 1), reaching 1 at `warmup`),
then constant, or a cosine from 1 down to `min_ratio` at step `total` (and `min_ratio`
after it).
"""

from __future__ import annotations

import math
from typing import Literal

Decay = Literal["constant", "cosine"]


def lr_factor(step: int, warmup: int, total: int = 0, decay: Decay = "constant", min_ratio: float = 1.0) -> float:
    if warmup and step < warmup:
        return (step + 1) / (warmup + 1)
    if decay == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / (total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
