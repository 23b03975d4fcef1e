"""Answers compared as values, and the `math` verifier.

`judge` is the verdict every answer verifier (math, reasoning_gym, user) gives a response
against an expected answer, in this order, each step a refusal with its reason:

1. extract exactly one final answer (`extract.extract_answer`): the last `<answer>` tag or
   `\\boxed{}`, or the statement after the last answer marker, or the last line. Several
   parts in separate boxes are one answer where the expected answer has several parts.
2. hedge: every other final answer the response states (tags, boxes, marker statements)
   must be the same value; the answer itself may not give two values (`\\pm`, `60 or 61`,
   "60 unless it is sixty one", two values on two lines, `5, 6` where one is expected).
3. read the answer into a value (`answer_clean.clean`: units go, constants, the sign and the
   relation stay). A relation (`x \\geq 60`) is not a value where the expected answer is one;
   words around several numbers are not one value.
4. form: where the expected answer is a number, the answer is a number written as its
   value (`85 - 25`, `\\sqrt{3600}`, `-(-60)`, `\\lfloor 60.5 \\rfloor` are not); otherwise no
   more operations than the expected answer, no function applied to a constant that it does
   not apply, and never the question's own expression; and the task's `answer_form`
   (expanded, factored, simplified, decimal, fraction) on the parsed form.
5. padding: an answer that holds the expected one among other digits or text (`2140` or
   `214.0000001` for 214) is not it, whatever a tolerance says.
6. the values compared (`answers.same`: math-verify's comparison of the parsed values).

`hedge`, `unevaluated` and `math_equivalent` are the steps on their own, for callers.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from fractions import Fraction

from posttrain.rewards import answer_grammar as grammar
from posttrain.rewards import answers
from posttrain.rewards.answer_clean import clean, split_top
from posttrain.rewards.answers import final_part, same, values_of
from posttrain.rewards.choice import is_choice, score_choice
from posttrain.rewards.deadline import ANSWER_TIMEOUT_S, check_in_workers, slim
from posttrain.rewards.extract import Slot, all_boxed, box_operand, cut_turn, extract_answer, final_answers, final_slot
from posttrain.types import RewardResult, Sample


@dataclass
class Verdict:
    score: float
    reason: str
    details: dict = field(default_factory=dict)


def read(answer: str, percent: bool = False) -> str:
    """The value an extracted answer states, as LaTeX: cleaned (delimiters, labels gone;
    `percent`: as `answer_clean.clean`). Its words are the grammar's (`answer_grammar`):
    units are not guessed here."""
    return clean(answer, percent, units=False)


def _exact(text: str) -> Fraction | None:
    t = text.replace(" ", "")
    try:
        if re.fullmatch(r"[-+]?\d+/\d+", t):
            return Fraction(t)
        if re.fullmatch(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?", t, re.IGNORECASE):
            return Fraction(t)
    except (ValueError, ZeroDivisionError):
        return None
    return None


def padding(gold: str, answer: str) -> str | None:
    """Why `answer` is the expected answer padded with other digits or text, or None:
    it contains the expected answer's text, and is not exactly its value (`13.0` is 13;
    `2140`, `214.0000001` and `214 and 215` are not 214; a list with one of its items again,
    `a, b, a`, is not the list `a, b`)."""
    g, a = _squash(gold), _squash(answer)
    if not g or g == a or g not in a:
        return None
    ge, ae = _exact(gold), _exact(answer)
    if ge is not None and ae is not None and ge == ae:
        return None
    more_items = len(split_top(answer)) > len(split_top(gold))
    if ge is None and answers.same(gold, answer) and not re.search(r"\d", a.replace(g, "", 1)) and not more_items:
        return None
    return f"wrong: {answer[:60]!r} contains the expected {gold[:60]!r} among other text (no partial credit)"


def _squash(text: str) -> str:
    return " ".join(text.strip().strip("$*").rstrip(".").lower().split()).replace(" ", "")


def normalize(answer: str) -> str:
    """Case, spacing, `$`, `**`, a trailing period and a `\\boxed{}` wrapper do not make answers differ."""
    text = answer.strip()
    while text.startswith("\\boxed{") and text.endswith("}"):
        text = text[len("\\boxed{") : -1].strip()
    return " ".join(text.strip("$* ").rstrip(".").strip("$* ").lower().split())


def _parts(text: str) -> list[str]:
    """The values an answer lists: at top level, or inside one set's braces."""
    inner = re.fullmatch(r"\\?\{(.*)\\?\}", text.strip(), re.DOTALL)
    if inner and _balanced_set(inner.group(1)):
        return values_of(inner.group(1))
    return values_of(text)


def _balanced_set(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch in "{(["
        depth -= ch in "})]"
        if depth < 0:
            return False
    return depth == 0


def _gold_final(gold: str) -> str:
    return ", ".join(values_of(gold)) if len(values_of(gold)) > 1 else final_part(gold)


def _several(gold: str) -> bool:
    return len(_parts(gold)) > 1


MAX_ANSWER_CHARS = 2000  # a final answer longer than this is not one (and would cost the parser minutes)


def _agree(a: str, b: str) -> bool:
    """Two answers of one response state the same value: exactly, where both are numbers
    (a tolerance must not merge `60` and `60.0000001` into one answer)."""
    if _squash(a) == _squash(b):
        return True
    ea, eb = _exact(final_part(a)), _exact(final_part(b))
    if ea is not None or eb is not None:
        return ea == eb
    return same(a, b) and same(b, a)


# a question that asks for an exact form: a rounded decimal of its value is not that form
EXACT_FORM = re.compile(
    r"\b(?:fractions?|lowest terms|exact(?:ly)?|simplest(?: radical)? form|radical form|in terms of \\?pi)\b", re.I
)
_PERCENTAGE = re.compile(r"%|\bpercent(?:age)?s?\b", re.IGNORECASE)


def is_percentage(gold: str, question: str | None = None) -> bool:
    """Whether the expected answer is a percentage: it carries `%`, or the question asks for one."""
    return bool(_PERCENTAGE.search(gold) or (question and _PERCENTAGE.search(question)))


def differing_answers(text: str, mode: str = "auto", percent: bool = False, answer: str | None = None) -> str | None:
    """Why a response states several final answers that differ in value (tags, boxes, answer
    lines, the lines of one answer), or None: the hedge check of every answer verifier.
    `answer`: the answer the caller reads (default: the one `extract_answer` reads)."""
    answer_raw = extract_answer(answer if answer is not None else text, mode)[0]
    if answer_raw is None or not answer_raw.strip():
        return None
    return _hedged_answers(answer_raw, final_answers(cut_turn(text), mode), percent)


def _hedged_answers(answer_raw: str, candidates: list[str], percent: bool, several: bool = False) -> str | None:
    """Why the extracted answer and the response's other final answers (`candidates`) are not
    one value, or None: each line of the answer (unless `several` values are expected) and
    each other candidate must agree with it."""
    answer = read(answer_raw, percent)
    lines = [read(line, percent) for line in answer_raw.splitlines() if line.strip()]
    if len(lines) > 1 and not several and any(not _agree(lines[-1], line) for line in lines):
        return f"hedged: the answer gives a value on each of {len(lines)} lines"
    for other in candidates:
        if other.strip() != answer_raw.strip() and not _agree(answer, read(other, percent)):
            shown = ", ".join(repr(c[:40]) for c in dict.fromkeys(candidates))
            return f"hedged: several different final answers: {shown}"
    return None


def judge(gold, text: str, mode: str = "auto", form: str | None = None, question: str | None = None) -> Verdict:
    """The verdict on a response against the expected answer `gold` (module docstring)."""
    gold_text, names = answers.named_tuples(str(gold))
    percent = is_percentage(gold_text, question)
    gold = clean(gold_text, percent)
    slot = final_slot(text, mode)
    answer_raw, how = slot.answer, slot.how
    details = {"extracted": answer_raw, "extracted_by": how, "expected": gold}
    if answer_raw is None or not answer_raw.strip():
        return Verdict(0.0, f"no answer found ({how})", details)
    body = cut_turn(text)
    settled = how == "final answer after the boxes"  # the boxes before it are the work's
    candidates = [answer_raw, *final_answers(slot.after, mode)] if settled else final_answers(body, mode)
    if _several(gold) and how == "boxed" and len(all_boxed(body)) > 1:
        boxes = list(dict.fromkeys(all_boxed(body)))
        answer_raw = ", ".join(boxes)
        candidates = [answer_raw] + [c for c in candidates if c not in boxes]
        details["extracted"] = answer_raw
    longest = max([answer_raw, *candidates], key=len)
    if len(longest) > MAX_ANSWER_CHARS:
        return Verdict(0.0, f"not an answer: {len(longest)} characters (at most {MAX_ANSWER_CHARS})", details)
    hedged = _hedged_answers(answer_raw, candidates, percent, _several(gold))
    if hedged:
        return Verdict(0.0, hedged, details)
    operand = None if settled else box_operand(body, percent)
    if operand:
        return Verdict(0.0, operand, details)
    reading = _contract(slot, answer_raw, gold_text, question, _several(gold))
    if reading.refusal:
        return Verdict(0.0, reading.refusal, details)
    if normalize(answer_raw) == normalize(gold_text):
        return Verdict(1.0, f"correct: {answer_raw[:80]!r} ({how})", details)
    stated_text = answers.named_tuples(reading.text, names or None)[0]
    if stated_text != answer_raw:
        details["read"] = answer_raw = stated_text
    answer = read(answer_raw, percent)
    cleaned = read(answer_raw, percent)
    problem = (
        answers.hedge_in(cleaned, gold, _several(gold))
        or answers.relation_problem(cleaned, gold)
        or answers.false_chain(cleaned)
    )
    if problem:
        return Verdict(0.0, problem, details)
    echo = answers.echo_problem(answer, gold, question)
    if echo:
        return Verdict(0.0, echo, details)
    if not _several(gold) and answers.is_prose(answer) and answers.words(answer) is None:
        if len(set(re.findall(r"\d+(?:\.\d+)?", answer))) > 1:
            return Verdict(0.0, f"hedged: several numbers among words: {answer[:80]!r}", details)
    gold_final = _gold_final(gold)
    stated = ", ".join(values_of(answer)) if _several(gold) else final_part(answer)
    letter = answers.choice(gold)
    if letter and answers.words(letter):
        gold_final, stated = letter, answers.choice(answer) or stated
    details["value"] = stated
    problem = (
        answers.final_value_problem(gold_final, stated, question)
        or answers.form_problem(form, stated)
        or padding(gold_final, stated)
    )
    if problem:
        return Verdict(0.0, problem, details)
    rounding = not (form == "fraction" or (question and EXACT_FORM.search(question)))
    if same(gold_final, stated, rounding) or ("=" in gold_final and "=" in answer and same(gold, answer, rounding)):
        details["matched_by"] = "math-verify"
        return Verdict(
            1.0, f"correct: {answer_raw[:80]!r} vs expected {gold[:60]!r} ({how}, math-verify: same value)", details
        )
    return Verdict(0.0, f"wrong: {answer_raw[:80]!r} vs expected {gold[:80]!r} ({how})", details)


def _contract(slot: Slot, answer_raw: str, gold: str, question: str | None, several: bool) -> grammar.Reading:
    """The slot under the final-answer contract (docs/rewards.md): the words before it and
    after it, then its whole content read by the answer grammar."""
    task = grammar.Task(gold, question, several)
    problem = grammar.before_problem(slot.before, several) or grammar.after_problem(slot.after, answer_raw, task)
    if problem:
        return grammar.Reading(answer_raw, problem)
    return grammar.read_slot(answer_raw, task)


def hedge(text: str, mode: str = "auto", gold: str | None = None) -> str | None:
    """Why a response hedges (several different final answers, or one answer giving several
    values where `gold` has one), or None."""
    verdict = judge("" if gold is None else gold, text, mode)
    return verdict.reason if verdict.reason.startswith("hedged") else None


def unevaluated(gold: str, answer: str, question: str | None = None) -> str | None:
    """Why `answer` is not a final value where `gold` is one, or None (step 4 of `judge`, on
    the answer as the grammar reads it)."""
    several = _several(clean(gold))
    answer = grammar.read_slot(answer, grammar.Task(gold, question, several)).text
    stated = final_part(read(answer)) if not several else ", ".join(values_of(read(answer)))
    return answers.final_value_problem(_gold_final(clean(gold)), stated, question)


def math_equivalent(gold: str, answer: str) -> bool:
    """Whether two answers are the same value (step 6 of `judge` alone)."""
    return same(_gold_final(clean(gold)), final_part(read(answer)))


def question_of(sample: Sample) -> str:
    return "\n".join(m.content for m in sample.task.messages if m.role == "user")


def answer_form(sample: Sample) -> str | None:
    return sample.task.answer_form or sample.task.entry.get("answer_form")


class MathVerifier:
    """Tasks with a mathematical `answer`: the final answer extracted from the response and
    compared with it as a value (`judge`)."""

    name = "math"

    def __init__(self, answer_format: str = "auto", timeout_s: float = ANSWER_TIMEOUT_S):
        self.answer_format = answer_format
        self.timeout_s = timeout_s  # per sample, in a worker process (`rewards/deadline.py`)

    def score_one(self, sample: Sample) -> RewardResult:
        gold = sample.task.answer if sample.task.answer is not None else sample.task.entry.get("answer")
        if gold is None:
            return RewardResult(0.0, "task has no answer to compare with", self.name, ok=False)
        if is_choice(sample):
            return score_choice(sample, self.name)
        verdict = judge(str(gold), sample.completion.text, self.answer_format, answer_form(sample), question_of(sample))
        return RewardResult(verdict.score, verdict.reason, self.name, verdict.details)

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        """Each sample's `score_one` in a worker process, within `timeout_s`: past it, or if
        the check crashes or raises, the sample scores 0 with the reason."""
        calls = [(slim(s),) for s in samples]
        return await asyncio.to_thread(check_in_workers, self, "score_one", calls, self.timeout_s)
