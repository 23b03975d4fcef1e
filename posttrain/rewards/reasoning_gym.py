"""Verifier for reasoning-gym tasks: extract the answer, score it with the family's own
scoring function, and, for mathematical answers, with math-verify too (so that `0.5`
matches `\\frac{1}{2}` and `13.0` matches `13`); say why."""

from __future__ import annotations

import re
import threading

from posttrain.rewards.extract import extract_answer
from posttrain.types import RewardResult, Sample

_MATHY = re.compile(r"^[-+*/^().,=\s\d\\{}a-zA-Z]*\d[-+*/^().,=\s\d\\{}a-zA-Z]*$")


def math_equivalent(gold: str, answer: str) -> bool:
    """math-verify's verdict on two answers; False when either is not mathematical."""
    if not (_MATHY.match(gold.strip()) and _MATHY.match(answer.strip())):
        return False
    from math_verify import parse, verify

    # math-verify times out with SIGALRM, which only the main thread may use
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold_parsed = parse(gold, parsing_timeout=timeout)
    answer_parsed = parse(answer, parsing_timeout=timeout)
    return bool(gold_parsed and answer_parsed and verify(gold_parsed, answer_parsed, timeout_seconds=timeout))


class ReasoningGymVerifier:
    name = "reasoning_gym"

    def __init__(self, answer_format: str = "auto"):
        self.answer_format = answer_format
        self._scorers: dict[str, object] = {}

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
        score = float(self._scorer(family)(answer, entry))
        if score < 1.0 and entry.get("answer") is not None and math_equivalent(str(entry["answer"]), answer):
            details["matched_by"] = "math-verify"
            how += ", math-verify: equivalent"
            score = 1.0
        verdict = "correct" if score >= 1.0 else ("partly correct" if score > 0 else "wrong")
        reason = f"{verdict}: {answer!r} vs expected {entry.get('answer')!r} ({how})"
        if finish_reason == "length":
            reason += "; response hit max_tokens"
        return RewardResult(score, reason, self.name, details)

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        out = []
        for s in samples:
            try:
                out.append(self.score_one(s.task.family, s.task.entry, s.completion.text, s.completion.finish_reason))
            except Exception as exc:  # one bad row is flagged, the batch goes on
                out.append(RewardResult(0.0, f"scoring raised {type(exc).__name__}: {exc}", self.name, ok=False))
        return out
