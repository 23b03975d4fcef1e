"""Answers compared as mathematics, and the `math` verifier.

`math_equivalent` asks math-verify whether two answers are the same value (`0.5` and
`\\frac{1}{2}`, `13.0` and `13`); each side is read as one LaTeX expression, so a list or
set is compared as a whole and never matches one of its members. `hedge` finds responses
that state several different final answers or list alternatives (`5 or 6`): those score 0
with reason "hedged: ...", never partial credit (used by every answer verifier).
`unevaluated` finds answers that are the computation rather than its result: math-verify
evaluates `85 - 25` to 60, so a policy that copies the question's expression would be
"correct" without computing anything; where the expected answer is a number, the answer
must be a number (or one number in prose), and it never has more operations than the
expected answer (every answer verifier asks it before crediting a match).
The `math` verifier extracts the final answer and compares it with the task's `answer`.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading

from posttrain.rewards.deadline import ANSWER_TIMEOUT_S, check_in_workers, slim
from posttrain.rewards.extract import extract_answer, final_answers
from posttrain.types import RewardResult, Sample

_MATHY = re.compile(r"^[-+*/^().,=\s\d\\{}a-zA-Z]*\d[-+*/^().,=\s\d\\{}a-zA-Z]*$")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_ALTERNATIVE = re.compile(r"\bor\b", re.IGNORECASE)
_LIST_SEPARATOR = re.compile(r"[,;]|\s(?:and|or)\s", re.IGNORECASE)


_DECIMAL = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?")
_FRACTION = re.compile(r"([-+]?)(?:(\d+)/(\d+)|\\[dt]?frac\{(\d+)\}\{(\d+)\})")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# an operation still written out: a binary operator after an operand (a product only
# between two numbers: `2\\cdot\\pi` is how some write `2\\pi`), or a function or
# operator command or word
_BINARY = re.compile(r"(?<=[\w)}\]!.])\s*(?:[-+/^÷]|\\(?:div|pm|mp)(?![a-zA-Z]))")
_PRODUCT = re.compile(r"(?<=\d)\s*(?:\*|×|·|\\cdot(?![a-zA-Z])|\\times(?![a-zA-Z]))\s*(?=\d)")
_FUNCTION = re.compile(
    r"\\(?:[dt]?frac|sqrt|sin|cos|tan|cot|sec|csc|arcsin|arccos|arctan|sinh|cosh|tanh|log|ln|lg|exp|binom|"
    r"choose|sum|prod|int|lim|max|min|gcd|lcm|mod|bmod|pmod)(?![a-zA-Z])|\b(?:sqrt|sin|cos|tan|log|ln|exp|abs|mod|"
    r"gcd|lcm|max|min|sum|pow)\s*\(|!|%(?=\s*\d)|\*\*"
)


def _plain(text: str, spaces: bool = False) -> str:
    """The answer as compared here: `normalize`d, with thousands separators and LaTeX
    spacing and sizing commands removed (and spaces, unless `spaces`)."""
    for command in ("\\left", "\\right", "\\!", "\\,", "\\;"):
        text = text.replace(command, "")
    text = _THOUSANDS.sub("", normalize(text))
    return text if spaces else text.replace(" ", "")


def is_number(text: str) -> bool:
    """A number written as its value: an integer or decimal (`1.5e-3` too), or a fraction in lowest terms
    (`3/4`, `\\frac{3}{4}`), optionally signed. `6/8` and `12/4` still have a division to do."""
    text = _plain(text)
    if _DECIMAL.fullmatch(text):
        return True
    m = _FRACTION.fullmatch(text)
    if not m:
        return False
    p, q = (int(m.group(2)), int(m.group(3))) if m.group(2) else (int(m.group(4)), int(m.group(5)))
    return q > 1 and math.gcd(p, q) == 1


def operations(text: str) -> int:
    """How many operations an answer still writes out: binary operators (`85 - 25`, `3 \\cdot 4`),
    fractions, roots, functions, factorials, powers."""
    text = _plain(text, spaces=True)
    return len(_BINARY.findall(text)) + len(_PRODUCT.findall(text)) + len(_FUNCTION.findall(text))


def functions(text: str) -> set[str]:
    """The functions an answer applies, by name (`sin`, `log`, `sqrt`, ...; fractions are
    division, counted by `operations`)."""
    found = {m.group(0).strip("\\( {").rstrip() for m in _FUNCTION.finditer(_plain(text, spaces=True))}
    return {name for name in found if name.isalpha() and not name.endswith("frac")}


def unevaluated(gold: str, answer: str) -> str | None:
    """Why `answer` is not a final value where `gold` is one, or None. Only what follows an
    answer's last `=` counts (`85 - 25 = 60` states 60). Where the expected answer is a
    number, the answer is a number, or one number among words (`60 apples`); otherwise it
    applies no function the expected answer does not and writes out no more operations."""
    parts = [part for part in answer.split("=") if part.strip()] if "=" not in gold else []
    value = parts[-1] if parts else answer
    if is_number(gold):
        if is_number(value):
            return None
        if len(_NUMBER.findall(_plain(value))) <= 1 and not operations(value):
            return None
        return f"not a final value: {answer[:60]!r} still has to be computed (the expected answer is {gold!r})"
    extra = functions(value) - functions(gold)
    if extra:
        return f"not a final value: {answer[:60]!r} applies {', '.join(sorted(extra))}, which {gold[:60]!r} does not"
    if operations(value) > operations(gold):
        return (
            f"not a final value: {answer[:60]!r} writes out {operations(value)} operation(s), "
            f"the expected {gold[:60]!r} {operations(gold)}"
        )
    return None


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

    def __init__(self, answer_format: str = "auto", timeout_s: float = ANSWER_TIMEOUT_S):
        self.answer_format = answer_format
        self.timeout_s = timeout_s  # per sample, in a worker process (`rewards/deadline.py`)

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
        computed = unevaluated(gold, answer)
        if computed:
            return RewardResult(0.0, computed, self.name, details)
        if math_equivalent(gold, answer):
            details["matched_by"] = "math-verify"
            return RewardResult(
                1.0, f"correct: {answer!r} vs expected {gold!r} ({how}, math-verify)", self.name, details
            )
        return RewardResult(0.0, f"wrong: {answer!r} vs expected {gold!r} ({how})", self.name, details)

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        """Each sample's `score_one` in a worker process, within `timeout_s`: past it, or if
        the check crashes or raises, the sample scores 0 with the reason."""
        calls = [(slim(s),) for s in samples]
        return await asyncio.to_thread(check_in_workers, self, "score_one", calls, self.timeout_s)
