"""Answers compared as mathematics, and the `math` verifier.

`math_equivalent` asks math-verify whether two answers are the same value (`0.5` and
`\\frac{1}{2}`, `13.0` and `13`); each side is read as one LaTeX expression, so a list or
set is compared as a whole and never matches one of its members. `hedge` finds responses
that state several different final answers or list alternatives (`5 or 6`): those score 0
with reason "hedged: ...", never partial credit (used by every answer verifier).
The `math` verifier extracts the final answer and compares it with the task's `answer`.
"""

from __future__ import annotations

import re
import threading

from posttrain.rewards.extract import extract_answer, final_answers
from posttrain.types import RewardResult, Sample

_MATHY = re.compile(r"^[-+*/^().,=\s\d\\{}a-zA-Z]*\d[-+*/^().,=\s\d\\{}a-zA-Z]*$")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_ALTERNATIVE = re.compile(r"\bor\b", re.IGNORECASE)
_LIST_SEPARATOR = re.compile(r"[,;]|\s(?:and|or)\s", re.IGNORECASE)


def _verify(gold: str, answer: str) -> bool:
    from math_verify import parse, verify

    # math-verify times out with SIGALRM, which only the main thread may use
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold_parsed = parse(gold, parsing_timeout=timeout)
    answer_parsed = parse(answer, parsing_timeout=timeout)
    return bool(gold_parsed and answer_parsed and verify(gold_parsed, answer_parsed, timeout_seconds=timeout))


def _latex(text: str) -> str:
    return text if "$" in text or "\\boxed" in text else f"${text}$"


def math_equivalent(gold: str, answer: str) -> bool:
    """math-verify's verdict on two answers; False when either is not mathematical."""
    if not (_MATHY.match(gold.strip()) and _MATHY.match(answer.strip())):
        return False
    if _verify(_latex(gold), _latex(answer)):
        return True
    # one number in prose ("12 legs"): math-verify's plain-text reading takes the last
    # number it finds, so it is asked only when there is exactly one on each side
    return len(_NUMBER.findall(answer)) == 1 and len(_NUMBER.findall(gold)) == 1 and _verify(gold, answer)


def normalize(answer: str) -> str:
    """Case, spacing, `$`, `**`, a trailing period and a `\\boxed{}` wrapper do not make answers differ."""
    text = answer.strip()
    while text.startswith("\\boxed{") and text.endswith("}"):
        text = text[len("\\boxed{") : -1].strip()
    return " ".join(text.strip("$* ").rstrip(".").strip("$* ").lower().split())


def _distinct(answers: list[str]) -> list[str]:
    kept: list[str] = []
    for answer in answers:
        if normalize(answer) and not any(normalize(answer) == normalize(k) or math_equivalent(k, answer) for k in kept):
            kept.append(answer)
    return kept


def _top_level_values(text: str) -> list[str]:
    """The values of a list written without brackets (`5, 6`, `5 and 6`); one item else.
    Separators inside brackets and thousands separators (`1,000`) do not count."""
    depth, out = 0, []
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}" and depth:
            depth -= 1
        thousands = ch == "," and i > 0 and text[i - 1].isdigit() and re.match(r",\d{3}(?!\d)", text[i:])
        out.append("\x00" if ch in ",;" and (depth or thousands) else ch)
    return [p.strip() for p in _LIST_SEPARATOR.split("".join(out)) if p.strip()]


def hedge(text: str, mode: str = "auto", gold: str | None = None) -> str | None:
    """Why a response hedges (several different final answers, or an answer listing
    alternatives), or None."""
    distinct = _distinct(final_answers(text, mode))
    if len(distinct) > 1:
        return "hedged: several different final answers: " + ", ".join(repr(d[:40]) for d in distinct[:4])
    answer, _ = extract_answer(text, mode)
    if answer is None:
        return None
    if _ALTERNATIVE.search(answer) and not (gold and _ALTERNATIVE.search(gold)):
        return f"hedged: the answer lists alternatives: {answer[:80]!r}"
    scalar_gold = gold is not None and not re.search(r"[,;]|\s(?:and|or)\s", gold, re.IGNORECASE)
    values = {normalize(v) for v in _top_level_values(answer)}
    if scalar_gold and len(values) > 1:
        return f"hedged: one answer expected, several given: {answer[:80]!r}"
    return None


class MathVerifier:
    """Tasks with a mathematical `answer`: the final answer extracted from the response
    and compared with it, as text or by math-verify."""

    name = "math"

    def __init__(self, answer_format: str = "auto"):
        self.answer_format = answer_format

    def score_one(self, sample: Sample) -> RewardResult:
        gold = sample.task.answer if sample.task.answer is not None else sample.task.entry.get("answer")
        if gold is None:
            return RewardResult(0.0, "task has no answer to compare with", self.name, ok=False)
        gold = str(gold)
        text = sample.completion.text
        answer, how = extract_answer(text, self.answer_format)
        details = {"extracted": answer, "extracted_by": how, "expected": gold}
        if answer is None:
            return RewardResult(0.0, f"no answer found ({how})", self.name, details)
        hedged = hedge(text, self.answer_format, gold)
        if hedged:
            return RewardResult(0.0, hedged, self.name, details)
        if normalize(answer) == normalize(gold):
            return RewardResult(1.0, f"correct: {answer!r} ({how})", self.name, details)
        if math_equivalent(gold, answer):
            details["matched_by"] = "math-verify"
            return RewardResult(
                1.0, f"correct: {answer!r} vs expected {gold!r} ({how}, math-verify)", self.name, details
            )
        return RewardResult(0.0, f"wrong: {answer!r} vs expected {gold!r} ({how})", self.name, details)

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        out = []
        for s in samples:
            try:
                out.append(self.score_one(s))
            except Exception as exc:  # math-verify on odd input: one sample flagged, the batch goes on
                out.append(RewardResult(0.0, f"scoring raised {type(exc).__name__}: {exc}", self.name, ok=False))
        return out
