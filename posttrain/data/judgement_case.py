"""A judge training case: a task, a clean response, one with a known defect, and the rubric a
careful grader would write for it, each criterion's verdict on each response known
(`data/judgements.py` and `data/judgement_more.py` build them; `part_of` splits their subjects
into the `train` and `heldout` parts)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from posttrain.data.judge_tools import Run
from posttrain.data.reasoning import in_eval_part


@dataclass(frozen=True)
class Check:
    """A rubric criterion, with its verdict on the clean and on the defective response."""

    text: str
    kind: str  # essential, important, optional, pitfall (the GRM's kinds)
    weight: int
    on_good: bool  # the verdict's "yes": the check passes (for a pitfall: the mistake is made)
    on_bad: bool
    why_good: str  # one short line: the reason a careful grader gives
    why_bad: str


@dataclass(frozen=True)
class Case:
    kind: str
    key: str  # the entity it is built on: decides its part
    task: str
    good: str
    bad: str
    checks: tuple[Check, ...]
    runs: tuple[tuple[Run, ...], tuple[Run, ...]] | None = None  # good's, bad's code runs on the task's examples

    def side_runs(self, side: str) -> list[Run] | None:
        """A side's code runs (`data/judge_tools.py`), as the GRM's sandbox reports them."""
        return None if self.runs is None else list(self.runs[side != "good"])

    def rubric(self) -> dict:
        return {"criteria": [{"text": c.text, "kind": c.kind, "weight": c.weight} for c in self.checks]}

    def likert(self, side: str) -> tuple[int, str]:
        """The single 1-10 prompt's known reply for a side: its rubric's score (the GRM's
        weighting of the known verdicts) on 1-10, and the reason of its first failed check."""
        got = total = 0
        reason = ""
        for c in self.checks:
            verdict, why = (c.on_good, c.why_good) if side == "good" else (c.on_bad, c.why_bad)
            passed = not verdict if c.kind == "pitfall" else verdict
            got, total = got + c.weight * passed, total + c.weight
            reason = reason or ("" if passed else why)
        return 1 + round(9 * got / total), reason or self.checks[0].why_good


def say(rng: random.Random, *phrasings: str) -> str:
    """One of a criterion's phrasings: the judge meets each check worded several ways, as the
    rubrics it writes itself will word them."""
    return rng.choice(phrasings)


def part_of(key: str) -> str:
    return "heldout" if in_eval_part(f"judgement:{key}", 4) else "train"
