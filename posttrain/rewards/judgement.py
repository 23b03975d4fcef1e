"""Reward of the judge's own calls (`type: judgements` tasks): the reply is read exactly as the
GRM reads its judge's replies (`grm_parse`), and scores 1 when it is the known answer, else 0
with why. A verdict call's answer is its known verdict; a rubric call's is a rubric that
reads and holds the case's criteria kinds (one essential at least, the pitfalls marked); a
1-10 call's is its known score, within one point; a pairwise call's is the known better
answer, A or B.

A reply that cannot be read scores 0 (the policy's doing, never a void); a task without a
known answer is unscored. Each reply is read in the answer-check workers within `timeout_s`
(`rewards/deadline.py`): no reply stalls the scoring process."""

from __future__ import annotations

import asyncio
import json

from posttrain.rewards.deadline import ANSWER_TIMEOUT_S, check_in_workers, slim
from posttrain.rewards.grm_parse import ParseError, extract_json, parse_rubric, parse_verdict
from posttrain.types import RewardResult, Sample


class JudgementVerifier:
    name = "judgement"

    def __init__(self, reason_chars: int = 80, timeout_s: float = ANSWER_TIMEOUT_S):
        self.reason_chars = reason_chars
        self.timeout_s = timeout_s  # per reply, in a worker process

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        calls = [(slim(s),) for s in samples]
        return await asyncio.to_thread(
            check_in_workers, self, "score_one", calls, self.timeout_s, ("math_verify",), None
        )

    def score_one(self, sample: Sample) -> RewardResult:
        entry = sample.task.entry
        text = sample.completion.text
        if entry.get("call") == "verdict" and entry.get("label") in ("yes", "no"):
            try:
                verdict = parse_verdict(text, None, None, False, self.reason_chars)
            except ParseError as exc:
                return RewardResult(0.0, f"scored 0: the verdict does not read: {exc}"[:300], self.name)
            said = "yes" if verdict.yes else "no"
            if said != entry["label"]:
                return RewardResult(0.0, f"said {said}, the answer is {entry['label']}", self.name, {"said": said})
            return RewardResult(1.0, f"said {said}, as known", self.name, {"said": said})
        if entry.get("call") == "pairwise" and entry.get("label") in ("A", "B"):
            return self._pairwise(text, entry["label"])
        if entry.get("call") == "likert" and isinstance(entry.get("score"), int):
            return self._likert(text, entry["score"])
        if entry.get("call") == "rubric" and sample.task.answer:
            return self._rubric(text, json.loads(sample.task.answer)["criteria"])
        return RewardResult(0.0, "unscored: a judgement task without a known answer", self.name, ok=False)

    def _rubric(self, text: str, gold: list[dict]) -> RewardResult:
        try:
            criteria = parse_rubric(text, 3, 10)
        except ParseError as exc:
            return RewardResult(0.0, f"scored 0: the rubric does not read: {exc}"[:300], self.name)
        kinds = [c.kind for c in criteria]
        if "essential" not in kinds:
            return RewardResult(0.0, "scored 0: no essential criterion", self.name)
        pitfalls = sum(c["kind"] == "pitfall" for c in gold)
        if pitfalls and "pitfall" not in kinds:
            return RewardResult(0.0, "scored 0: the case's mistake is not a pitfall of the rubric", self.name)
        return RewardResult(1.0, f"{len(criteria)} criteria that read", self.name)

    def _pairwise(self, text: str, known: str) -> RewardResult:
        """A pairwise reply scores 1 when it names the known better answer."""
        try:
            said = extract_json(text)["better"]
        except (ParseError, KeyError, TypeError) as exc:
            return RewardResult(0.0, f"scored 0: the choice does not read: {exc}"[:300], self.name)
        if said not in ("A", "B"):
            return RewardResult(0.0, f"scored 0: the choice is {str(said)[:20]!r}, not A or B", self.name)
        if said != known:
            return RewardResult(0.0, f"chose {said}, the better answer is {known}", self.name, {"said": said})
        return RewardResult(1.0, f"chose {said}, as known", self.name, {"said": said})

    def _likert(self, text: str, known: int) -> RewardResult:
        """A 1-10 reply scores 1 within one point of the known score."""
        try:
            said = int(extract_json(text)["score"])
        except (ParseError, KeyError, TypeError, ValueError) as exc:
            return RewardResult(0.0, f"scored 0: the score does not read: {exc}"[:300], self.name)
        if abs(said - known) > 1:
            return RewardResult(0.0, f"said {said}, the answer is {known}", self.name, {"said": said})
        return RewardResult(1.0, f"said {said}, known {known}", self.name, {"said": said})
