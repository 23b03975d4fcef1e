"""Verifier for reasoning-gym tasks: extract the answer, score it with the family's own
scoring function, and say why."""

from __future__ import annotations

from posttrain.rewards.extract import extract_answer
from posttrain.types import RewardResult, Sample


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
