"""The entropy bonus's weight, step by step (`algo.entropy_coef`, `algo.entropy_target`).

Fixed: the weight is `entropy_coef` on every step. Adaptive (a target given): it starts at
0; after each step whose policy entropy (nats per trained token) is below the target it
rises by `entropy_coef_step`, up to `entropy_coef`; after each step above, it falls by as
much, down to 0. A policy whose entropy collapses keeps exploring; one that explores
enough trains on the plain objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class EntropyControl:
    ceiling: float
    target: float | None = None
    step: float = 0.005
    coef: float = 0.0

    @classmethod
    def of(cls, algo) -> EntropyControl:
        """From a GRPOConfig: the fixed weight, or the adaptive one starting at 0."""
        start = algo.entropy_coef if algo.entropy_target is None else 0.0
        return cls(algo.entropy_coef, algo.entropy_target, algo.entropy_coef_step, start)

    def update(self, entropy: float) -> float:
        """The weight for the next step, after a step of this entropy (a step that trained
        nothing, NaN entropy, leaves it as it is)."""
        if self.target is not None and math.isfinite(entropy):
            moved = self.coef + (self.step if entropy < self.target else -self.step)
            self.coef = min(self.ceiling, max(0.0, moved))
        return self.coef
