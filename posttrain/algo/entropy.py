"""The entropy bonus's weight, step by step (`algo.entropy_coef`, `algo.entropy_target`).

Fixed: the weight is `entropy_coef` on every step. Adaptive (a target given; Skywork-OR1's
rule, as TRL's `use_adaptive_entropy`): the weight starts at `entropy_coef`; after each step
it moves by `entropy_coef_step`, up if the step's policy entropy (nats per trained token)
was at or below the target, down if above, within [0, `entropy_coef_max`]; and the bonus
acts only on a step after one at or below the target (none on the first). A policy whose
entropy collapses is pushed to explore again; one that explores enough trains on the plain
objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class EntropyControl:
    coef: float
    target: float | None = None
    step: float = 0.005
    ceiling: float = 1.0
    last: float = math.inf  # the last step's entropy (adaptive); inf: none measured yet

    @classmethod
    def of(cls, algo) -> EntropyControl:
        return cls(algo.entropy_coef, algo.entropy_target, algo.entropy_coef_step, algo.entropy_coef_max)

    def weight(self) -> float:
        """The weight the next step trains with."""
        if self.target is None:
            return self.coef
        return self.coef if self.last <= self.target else 0.0

    def update(self, entropy: float) -> None:
        """After a step of this entropy (a step that trained nothing, NaN, changes nothing)."""
        if self.target is None or not math.isfinite(entropy):
            return
        moved = self.coef + (self.step if entropy <= self.target else -self.step)
        self.coef, self.last = min(self.ceiling, max(0.0, moved)), entropy

    def state(self) -> dict:
        return {"coef": self.coef, "last": self.last if math.isfinite(self.last) else None}

    def restore(self, state: dict | None) -> None:
        """From `state()` (a checkpoint from before the bonus existed has none: the start)."""
        if state:
            self.coef, self.last = state["coef"], math.inf if state["last"] is None else state["last"]
