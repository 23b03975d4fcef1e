"""Token budgets per effort tier, and their annealing schedule (docs/recipe.md, Token-budget
effort annealing).

A response longer than its budget gets reward -1 whatever its correctness; generation is
capped at the budget plus a margin so that over-budget responses are seen (and punished)
rather than silently cut at exactly the budget.
"""

from __future__ import annotations

import math

from posttrain.types import RewardResult


def budget_at(step: int, start: int, end: int, steps: int, kind: str = "linear", every: int = 1) -> int:
    """Budget in tokens at `step` (1-based) of a schedule from `start` to `end` over `steps`.
    linear: straight line; step: moves in `every`-step stairs. Constant after `steps`."""
    if steps <= 0 or start == end:
        return end
    done = min(max(step - 1, 0), steps) / steps
    if kind == "step":
        stairs = max(1, math.ceil(steps / every))
        done = min(math.floor((min(step - 1, steps)) / every) / stairs, 1.0)
    return int(round(start + (end - start) * done))


def task_budget(budget: int | None, multiple: float | None, reference_tokens: int | None) -> int | None:
    """Absolute budget, or `multiple` x the task's reference length when it has one."""
    if multiple is not None and reference_tokens:
        return max(1, int(math.ceil(multiple * reference_tokens)))
    return budget


def apply_budget(result: RewardResult, response_tokens: int, budget: int | None) -> RewardResult:
    """Over budget -> -1 with `over_budget` set and the reason; within budget -> unchanged.
    The penalty needs no verdict: an unscored result (ok=False) over budget is -1 and
    scored too, so that voiding its verdict never lets a response escape the penalty."""
    if budget is None or response_tokens <= budget:
        return result
    details = dict(result.details, budget=budget, response_tokens=response_tokens)
    details["score_before_budget"] = result.score if result.ok else None
    was = result.reason if result.ok else f"unscored: {result.reason}"
    return RewardResult(
        -1.0,
        f"over budget: {response_tokens} > {budget} tokens (was: {was})",
        result.source,
        details,
        ok=True,
        over_budget=True,
    )
