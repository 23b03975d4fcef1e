"""Verifier `math`: the final answer of a response against the task's `answer`, equal as
text or as mathematics (math-verify), so `12.0` matches `12` and `0.5` matches `\\frac{1}{2}`."""

from __future__ import annotations

from posttrain.rewards.extract import extract_answer
from posttrain.rewards.reasoning_gym import math_equivalent
from posttrain.types import RewardResult, Sample


class MathVerifier:
    name = "math"

    def __init__(self, answer_format: str = "auto"):
        self.answer_format = answer_format

    def score_one(self, response: str, expected: str) -> RewardResult:
        answer, how = extract_answer(response, self.answer_format)
        details = {"extracted": answer, "extracted_by": how, "expected": expected}
        if answer is None:
            return RewardResult(0.0, f"no answer found ({how})", self.name, details)
        same = answer.strip() == expected.strip() or math_equivalent(expected, answer)
        verdict = "correct" if same else "wrong"
        return RewardResult(float(same), f"{verdict}: {answer!r} vs expected {expected!r} ({how})", self.name, details)

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        out = []
        for s in samples:
            if s.task.answer is None:
                out.append(RewardResult(0.0, "task has no answer to compare with", self.name, ok=False))
                continue
            out.append(self.score_one(s.completion.text, s.task.answer))
        return out
