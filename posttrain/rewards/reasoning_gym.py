"""Verifier for reasoning-gym tasks: the family's own scoring function is asked on every
task and decides it (its answer formats: words, lists, boards, expressions to construct,
mappings); the answer verifiers' `math_verifier.judge` may refuse, and credits only where
the expected answer is a mathematical value (`value_gold`: nothing to construct, order or
map) and the answer states that value, its items in the expected order, in a form the
family's string comparison misreads (`x = 13`, `-4.0`, `\\dfrac{1}{2}`). What it refuses:

- on every task, a hedge: several final answers that differ, another value offered after
  the answer, an answer too long to be one (a board's lines are one answer, not values on
  several lines);
- where the expected answer is a value (a number, a fraction, an expression), every refusal of
  `judge` also stands: an answer that is the computation rather than its result (`85 - 25`
  for 60), not in the form the task asks for (`answer_form`), a relation;
- partial credit: a family's partial credit for an answer that contains the expected one
  (`2140` for 214), or that is its items in another order (a sorted list unsorted), is not
  given; nor, unless `reward.family_partial_credit` asks for it, any other partial credit (a
  truncated or misspelled word, some items in place): a near miss scores 0.

So an answer equal in value to a construction's target is not the construction: countdown
answered with its target number, puzzle24 with `24`, prime_factorization with the number, a
list in another order, a mapping with two digits swapped score what the family gives them."""

from __future__ import annotations

import asyncio
import re

from posttrain.rewards.deadline import ANSWER_TIMEOUT_S, check_in_workers, entry_reference
from posttrain.rewards.extract import extract_answer, marker_statement
from posttrain.rewards.math_verifier import Verdict, judge, math_equivalent, padding
from posttrain.types import RewardResult, Sample

__all__ = ["ReasoningGymVerifier", "math_equivalent", "padding"]
PRELOAD = ("math_verify", "reasoning_gym")  # what the answer-check workers of this verifier import first
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?:\s*/\s*\d+)?")
_ARITHMETIC = re.compile(r"[\d\s.()+\-*/×÷]+")  # numbers and operations only: a construction
_OPERATION = re.compile(r"[\d)]\s*[+\-*/×÷]\s*[\d(]")
_NUMERAL_SYSTEM = re.compile(r"(?<![\w.])0[xXbBoO][0-9a-fA-F]+")
_LATEX_NAMES = re.compile(r"\\(?:begin|end)\{[^}]*\}|\\[a-zA-Z]+")
_WORD = re.compile(r"[a-zA-Z]{3,}")
_LABEL = re.compile(r"[A-Za-z]\w*\s*=")
# a numeral of another base (`1a1`, `3c0f` where the question names a base): digits, not algebra
_BASE_QUESTION = re.compile(r"\bbase[- ]?\d+|\bhexadecimal\b|\bbinary\b|\boctal\b", re.IGNORECASE)
_ALPHANUMERAL = re.compile(r"(?<![\w\\])(?=[0-9a-zA-Z]*\d)(?=[0-9a-zA-Z]*[a-zA-Z])[0-9a-zA-Z]+")
# an approximation states no exact value: where the family refuses it, the form is not misread
_APPROXIMATE = re.compile(r"\\approx|≈|\\sim(?![a-zA-Z])|~|\b(?:approx(?:imately)?|about|around|roughly|circa)\b", re.I)


def family_credits(family: str, answer: str, entry: dict) -> bool:
    """Whether a family's own scorer gives `answer` (a bare value) full credit on `entry`;
    False where the family cannot be loaded or its scorer raises."""
    import reasoning_gym

    try:
        return float(reasoning_gym.get_score_answer_fn(family)(answer, entry)) >= 1.0
    except Exception:  # a family that cannot read the value declares nothing equal
        return False


def value_gold(gold: str, question: str | None = None) -> bool:
    """Whether an expected answer is a mathematical value (a number, a fraction, a percent,
    an expression in variables, an interval, a set, a choice letter), which `judge` compares
    as such; not a construction of numbers (`94*4 - 61 - 6`, `2 × 3 × 5`), a numeral of
    another base (`0x5b`, or `1a1` where the question names a base), words, a mapping of labels
    (`C=3,E=0`) or a board on several lines: those only the family can check."""
    g = gold.strip()
    if "\n" in g or _NUMERAL_SYSTEM.search(g) or len(_LABEL.findall(g)) > 1:
        return False
    if question and _BASE_QUESTION.search(question) and _ALPHANUMERAL.search(g):
        return False
    if _ARITHMETIC.fullmatch(g) and _OPERATION.search(g) and not _NUMBER.fullmatch(g):
        return False
    return not _WORD.search(_LATEX_NAMES.sub(" ", g))


def one_line(response: str, answer: str) -> str:
    """The response with its final answer's lines joined (`a / b`): a board or a list on
    several lines is one answer, and the hedge check must not read its lines as several."""
    if "\n" not in answer:
        return response
    at = response.rfind(answer)
    if at < 0:
        return response
    joined = " / ".join(line.strip() for line in answer.splitlines() if line.strip())
    return response[:at] + joined + response[at + len(answer) :]


def _plain(text: str) -> str:
    return " ".join(text.split()).rstrip(".").lower()


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", text.lower())


def reordering(gold: str, answer: str) -> str | None:
    """Why `answer` is the expected answer's words and signs in another order, or None:
    where the family gives such an answer partial credit, the order was the task."""
    words, expected = _tokens(answer), _tokens(gold)
    if words == expected or sorted(words) != sorted(expected):
        return None
    return f"wrong: {answer[:60]!r} is the expected {gold[:60]!r} in another order (no partial credit)"


def _reordered_list(gold: str, answer: str) -> bool:
    """The expected answer is a list (items between commas, or numbers between spaces; a
    set's braces aside: its order is free) and the answer has its items in another order."""
    g = gold.strip()
    listed = "," in g or ";" in g or re.fullmatch(r"[-+\d.]+(?:\s+[-+\d.]+)+", g) is not None
    return listed and not g.startswith(("\\{", "{")) and reordering(gold, answer) is not None


def shape_refusal(response: str, mode: str, question: str | None) -> Verdict | None:
    """Why the response's shape refuses its answer whatever the value (a hedge, an answer
    too long), or None: `judge` with the response's own answer as the expected one, so that
    no value is compared, and a board's lines joined into one answer."""
    answer, _ = extract_answer(response, mode)
    if answer is None:
        return None
    own = " / ".join(line.strip() for line in answer.splitlines() if line.strip()) or answer
    shape = judge(own, one_line(response, answer), mode, None, question)
    return shape if shape.score < 1.0 else None


def value_verdict(gold: str, response: str, mode: str, form: str | None, question: str | None) -> Verdict | None:
    """`judge`'s verdict where the expected answer is a value (`value_gold`), else None."""
    return judge(gold, response, mode, form, question) if value_gold(gold, question) else None


def plainly_different(verdict: Verdict) -> bool:
    """A verdict of values that differ (the family may still read the answer), not a refusal."""
    return verdict.reason.startswith("wrong: ") and "among other text" not in verdict.reason


class ReasoningGymVerifier:
    name = "reasoning_gym"

    def __init__(self, answer_format: str = "auto", timeout_s: float = ANSWER_TIMEOUT_S, partial_credit: bool = False):
        self.answer_format = answer_format
        self.timeout_s = timeout_s  # per sample, in a worker process (`rewards/deadline.py`)
        self.partial_credit = partial_credit  # `reward.family_partial_credit`: pay a near miss what the family gives
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
        whole = marker_statement(response) if how == "answer marker" else None
        if whole and entry.get("answer") is not None and _plain(whole) == _plain(str(entry["answer"])):
            answer = whole  # the line after the marker is the gold verbatim: no verb in it splits it
        details = {"extracted": answer, "extracted_by": how, "expected": entry.get("answer")}
        if answer is None:
            return RewardResult(0.0, f"no answer found ({how})", self.name, details)
        gold = None if entry.get("answer") is None else str(entry["answer"])
        question = question if question is not None else entry.get("question")
        form = answer_form or entry.get("answer_form")
        refused = shape_refusal(response, self.answer_format, question)
        value = None if gold is None else value_verdict(gold, response, self.answer_format, form, question)
        if refused is None and value is not None and value.score < 1.0 and not plainly_different(value):
            refused = value
        if refused is not None:
            details.update(refused.details)
            return RewardResult(0.0, refused.reason, self.name, details)
        scorer = self._scorer(family)  # an unknown family is a broken row: it raises, unscored
        try:
            score = float(scorer(answer, entry))
        except Exception as exc:  # the family cannot read this answer: a wrong answer, not a void
            reason = f"wrong: the family's scorer cannot read {answer[:60]!r} ({type(exc).__name__}: {exc})"
            return RewardResult(0.0, reason[:300], self.name, details)
        details["family_score"] = score
        misread = not _reordered_list(gold, answer) and not _APPROXIMATE.search(answer)
        if value is not None and value.score == 1.0 and score < 1.0 and misread:
            reason = f"{value.reason}; the family's scorer gives its form {score:g}"
            return RewardResult(1.0, reason, self.name, {**details, **value.details})
        if score > 0 and gold is not None:  # a family may credit padding in full (word_sorting: the gold, then more)
            partial = padding(gold, answer) or (reordering(gold, answer) if score < 1 else None)
            if partial:
                return RewardResult(0.0, partial, self.name, details)
        if 0 < score < 1 and not self.partial_credit:
            reason = (
                f"wrong: {answer[:60]!r} is not the expected {str(gold)[:60]!r} (the family's partial credit "
                f"{score:g} is not paid: reward.family_partial_credit)"
            )
            return RewardResult(0.0, reason, self.name, details)
        verdict_word = "correct" if score >= 1.0 else ("partly correct" if score > 0 else "wrong")
        reason = f"{verdict_word}: {answer[:80]!r} vs expected {str(gold)[:80]!r} ({how}, the family's scorer)"
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
