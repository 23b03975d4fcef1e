"""Verifier for reasoning-gym tasks: extract the answer, score it with the family's own
scoring function, and, for mathematical answers, with math-verify too (so that `0.5`
matches `\\frac{1}{2}` and `13.0` matches `13`); say why. A response that hedges (several
different final answers, or alternatives) scores 0, and so does an answer that is the
computation rather than its result (`85 - 25` for 60: `math_verifier.unevaluated`), whoever
would have credited it, the family's scorer or math-verify. A family's partial credit for
an answer that contains the expected one (`2140` for 214) is not given (`padding`)."""

from __future__ import annotations

import asyncio

from posttrain.rewards.deadline import ANSWER_TIMEOUT_S, check_in_workers, entry_reference
from posttrain.rewards.extract import extract_answer
from posttrain.rewards.math_verifier import hedge, math_equivalent, normalize, unevaluated
from posttrain.types import RewardResult, Sample

__all__ = ["ReasoningGymVerifier", "math_equivalent"]
PRELOAD = ("math_verify", "reasoning_gym")  # what the answer-check workers of this verifier import first


def padding(gold: str, answer: str) -> str | None:
    """Why a partial credit is not given, or None. reasoning-gym's default scorer credits an
    answer that contains the expected one by their length ratio (`2140` for 214: 0.75), so
    appending digits, or writing a string of every number, would earn reward. An answer
    gets no partial credit for containing the expected one among other text (a family's
    partial credit for a close value, which contains nothing, stays)."""
    if normalize(gold) and normalize(gold) in normalize(answer):
        return f"wrong: {answer[:60]!r} contains the expected {gold[:60]!r} among other text (no partial credit)"
    return None


class ReasoningGymVerifier:
    name = "reasoning_gym"

    def __init__(self, answer_format: str = "auto", timeout_s: float = ANSWER_TIMEOUT_S):
        self.answer_format = answer_format
        self.timeout_s = timeout_s  # per sample, in a worker process (`rewards/deadline.py`)
        self._scorers: dict[str, object] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_scorers": {}}  # the family scorers load again where unpickled

    def _scorer(self, family: str):
        if family not in self._scorers:
            import reasoning_gym

            self._scorers[family] = reasoning_gym.get_score_answer_fn(family)
        return self._scorers[family]

    def score_one(self, family: str, entry: dict, response: str, finish_reason: str = "stop") -> RewardResult:
        answer, how = extract_answer(response, self.answer_format)
        details = {"extracted": answer, "extracted_by": how, "expected": entry.get("answer")}
        if answer is None:
            return RewardResult(0.0, f"no answer found ({how})", self.name, details)
        gold = None if entry.get("answer") is None else str(entry["answer"])
        hedged = hedge(response, self.answer_format, gold)
        if hedged:  # never partial credit for listing the right answer among others
            return RewardResult(0.0, hedged, self.name, details)
        computed = None if gold is None or normalize(answer) == normalize(gold) else unevaluated(gold, answer)
        if computed:
            return RewardResult(0.0, computed, self.name, details)
        score = float(self._scorer(family)(answer, entry))
        if score < 1.0 and entry.get("answer") is not None and math_equivalent(str(entry["answer"]), answer):
            details["matched_by"] = "math-verify"
            how += ", math-verify: equivalent"
            score = 1.0
        if 0 < score < 1 and gold is not None:
            padded = padding(gold, answer)
            if padded:
                return RewardResult(0.0, padded, self.name, details)
        verdict = "correct" if score >= 1.0 else ("partly correct" if score > 0 else "wrong")
        reason = f"{verdict}: {answer!r} vs expected {entry.get('answer')!r} ({how})"
        if finish_reason == "length":
            reason += "; response hit max_tokens"
        return RewardResult(score, reason, self.name, details)

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        """Each sample's `score_one` in a worker process, within `timeout_s`: past it, or if
        the check crashes or raises, the sample scores 0 with the reason."""
        calls = [(s.task.family, s.task.entry, s.completion.text, s.completion.finish_reason) for s in samples]
        return await asyncio.to_thread(
            check_in_workers, self, "score_one", calls, self.timeout_s, PRELOAD, entry_reference
        )
