"""Verifier for reasoning-gym tasks: extract the answer, and score it with `math_verifier.judge`
(the answer read as a value against the expected one) and with the family's own scoring
function; say why. Every refusal of `judge` stands whoever would have credited the answer:
a hedge, an answer that is the computation rather than its result (`85 - 25` for 60), one
not in the form the task asks for (`answer_form`), a relation, and padding: a family's
partial credit for an answer that contains the expected one (`2140` for 214) is not given,
and no partial credit is lifted to 1 before that check. Where `judge` finds the values
equal the answer scores 1; otherwise the family's scorer decides (its own answer formats:
words, lists, boards), with its partial credit."""

from __future__ import annotations

import asyncio

from posttrain.rewards.deadline import ANSWER_TIMEOUT_S, check_in_workers, entry_reference
from posttrain.rewards.extract import extract_answer
from posttrain.rewards.math_verifier import judge, math_equivalent, padding
from posttrain.types import RewardResult, Sample

__all__ = ["ReasoningGymVerifier", "math_equivalent", "padding"]
PRELOAD = ("math_verify", "reasoning_gym")  # what the answer-check workers of this verifier import first


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

    def score_one(
        self,
        family: str,
        entry: dict,
        response: str,
        finish_reason: str = "stop",
        answer_form: str | None = None,
        question: str | None = None,
    ) -> RewardResult:
        answer, how = extract_answer(response, self.answer_format)
        details = {"extracted": answer, "extracted_by": how, "expected": entry.get("answer")}
        if answer is None:
            return RewardResult(0.0, f"no answer found ({how})", self.name, details)
        gold = None if entry.get("answer") is None else str(entry["answer"])
        question = question if question is not None else entry.get("question")
        verdict = None
        if gold is not None:
            verdict = judge(gold, response, self.answer_format, answer_form or entry.get("answer_form"), question)
            details.update(verdict.details)
            if verdict.score == 1.0:
                return RewardResult(1.0, verdict.reason, self.name, details)
            if not verdict.reason.startswith("wrong: ") or "among other text" in verdict.reason:
                return RewardResult(0.0, verdict.reason, self.name, details)
        score = float(self._scorer(family)(answer, entry))
        if 0 < score < 1 and gold is not None:
            padded = padding(gold, answer)
            if padded:
                return RewardResult(0.0, padded, self.name, details)
        verdict_word = "correct" if score >= 1.0 else ("partly correct" if score > 0 else "wrong")
        reason = f"{verdict_word}: {answer!r} vs expected {entry.get('answer')!r} ({how}, the family's scorer)"
        if finish_reason == "length":
            reason += "; response hit max_tokens"
        return RewardResult(score, reason, self.name, details)

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        """Each sample's `score_one` in a worker process, within `timeout_s`: past it, or if
        the check crashes or raises, the sample scores 0 with the reason."""
        calls = [
            (
                s.task.family,
                s.task.entry,
                s.completion.text,
                s.completion.finish_reason,
                s.task.answer_form,
                "\n".join(m.content for m in s.task.messages if m.role == "user") or None,
            )
            for s in samples
        ]
        return await asyncio.to_thread(
            check_in_workers, self, "score_one", calls, self.timeout_s, PRELOAD, entry_reference
        )
