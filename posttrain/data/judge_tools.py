"""What the GRM's judge is shown besides the answers: the results of tools that a small judge
cannot run in its head, computed by the grader from the task and the answers alone.

- **calculator**: every arithmetic expression in the task, evaluated exactly: numbers joined
  by + - * / (also x, ×, ÷, and the words plus, minus, times, multiplied by, divided by), with
  parentheses. A hyphen counts as minus only with spaces around it ("27 - 76"), so ranges
  and dates ("10-20", "2024-05-01") are not sums.
- **shape**: each answer's lines (not counting blank ones) and words.
- **code run**: where the task states examples of a function's calls and their values
  (`f(7, 2) should return 5`, `f(7, 2) -> 5`, `= 5`, `is 5`, `assert f(7, 2) == 5`, a `>>>`
  line and the value under it), what each answer's code returns on each call, or the exception it raises,
  and whether that is the value the task states. This module finds the examples and writes
  the lines; the runs come from the caller (`Run`): the GRM runs each answer in the
  sandbox (`rewards/judge_code.py`), and the judge's training data knows its answers'
  values by construction. A test checks that the two agree on every generated case.

Measured before this: a trained 135M judge picked the right answer of a pair at chance on
arithmetic and list counts (bench/RESULTS.md, the judge). With the tools' lines the defect is
a difference it can read: which answer states the calculator's value, which has the number
of lines the task asks for.

The notes come after the answers, outside their quoted lines, so an answer cannot write a
tool line of its own. `data/judge_prompts.py` puts them in every prompt that shows an answer
(pairwise, the verdict call, the single 1-10 prompt), so the judge's training data
(`data/judgements.py`) and the GRM's calls carry the same notes by construction.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from fractions import Fraction

MAX_EXPRESSIONS = 4  # calculations shown per task
MAX_OPERANDS = 8
MAX_DIGITS = 15
_N = r"(-?\d+(?:\.\d+)?)"
_WORDS = (
    (rf"\bmultiply\s+{_N}\s+(?:by|and)\s+{_N}", r"\1 * \2"),
    (rf"\bdivide\s+{_N}\s+by\s+{_N}", r"\1 / \2"),
    (rf"\badd\s+{_N}\s+(?:and|to)\s+{_N}", r"\1 + \2"),
    (rf"\bsubtract\s+{_N}\s+from\s+{_N}", r"\2 - \1"),
    (rf"\b(?:the\s+)?sum\s+of\s+{_N}\s+and\s+{_N}", r"\1 + \2"),
    (rf"\b(?:the\s+)?product\s+of\s+{_N}\s+and\s+{_N}", r"\1 * \2"),
    (rf"\b(?:the\s+)?difference\s+between\s+{_N}\s+and\s+{_N}", r"\1 - \2"),
    (r"\bmultiplied\s+by\b", "*"),
    (r"\bdivided\s+by\b", "/"),
    (r"\btimes\b", "*"),
    (r"\bplus\b", "+"),
    (r"\bminus\b", " - "),
    ("×", "*"),
    ("÷", "/"),
    (r"(?<=\d)\s*[xX]\s*(?=\d)", "*"),
)
_NUMBER = r"\d+(?:\.\d+)?"
_OPERAND = rf"\(*-?{_NUMBER}\)*"  # no spaces inside: Python's re then backtracks into the repeat
_OPERATOR = r"(?:\s*[+*/]\s*|\s+-\s+)"
_EXPRESSION = re.compile(rf"{_OPERAND}(?:{_OPERATOR}{_OPERAND})+")


def calculations(task: str) -> list[str]:
    """`expression = value` for each arithmetic expression in `task` (at most
    MAX_EXPRESSIONS), exact; a value that is not a whole number is shown to 6 places."""
    text = task
    for pattern, symbol in _WORDS:
        text = re.sub(pattern, symbol, text, flags=re.IGNORECASE)
    out: list[str] = []
    for match in _EXPRESSION.finditer(text):
        expression = re.sub(r"\s*([+*/])\s*|\s+-\s+", lambda m: f" {m.group(1) or '-'} ", _balanced(match.group(0)))
        value = evaluate(expression)
        if value is not None and len(out) < MAX_EXPRESSIONS:
            out.append(f"{expression} = {value}")
    return out


def _balanced(expression: str) -> str:
    """The match less unmatched parentheses at its ends (a sentence's own brackets)."""
    expression = expression.strip()
    while expression.startswith("(") and expression.count("(") > expression.count(")"):
        expression = expression[1:].strip()
    while expression.endswith(")") and expression.count(")") > expression.count("("):
        expression = expression[:-1].strip()
    return expression


def evaluate(expression: str) -> str | None:
    """The exact value of + - * / over decimal numbers, or None for anything else (too
    long, a division by zero, unbalanced)."""
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError:
        return None
    numbers = [n for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    if not 2 <= len(numbers) <= MAX_OPERANDS:
        return None
    try:
        value = _value(tree)
    except (ValueError, ZeroDivisionError):
        return None
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6f}".rstrip("0")


def _value(node) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if len(str(node.value).replace(".", "")) > MAX_DIGITS:
            raise ValueError("number too long")
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        return left / right
    raise ValueError("not arithmetic")


def shape(text: str) -> str:
    lines = sum(1 for line in text.splitlines() if line.strip())
    words = len(text.split())
    return f"{lines} line{'s' * (lines != 1)}, {words} word{'s' * (words != 1)}"


MAX_EXAMPLES = 3  # example calls run per task
MAX_SHOWN = 40  # characters of a value shown
_CALL = r"(?<![\w.])(?P<call>[A-Za-z_]\w*\([^()\n]*\))"  # a function, not a method
_VALUE = r"(?P<value>-?\d+(?:\.\d+)?(?:[eE]-?\d+)?|True|False|None|'[^'\n]*'|\"[^\"\n]*\"|\[[^\]\n]*\]|\([^()\n]*\))"
_EXAMPLES = (
    re.compile(rf">>>[ \t]*{_CALL}[ \t]*\n[ \t]*{_VALUE}"),
    re.compile(
        rf"{_CALL}\s*(?:==|=(?!=)|->|=>|→|(?:should|must|will|would)\s+(?:return|give|be|equal|output|yield)"
        rf"|returns|gives|is|equals|outputs|yields)\s*{_VALUE}"
    ),
)


@dataclass(frozen=True)
class Example:
    """A call the task states, with the value it says the call gives (both as Python source)."""

    call: str
    expected: str

    @property
    def function(self) -> str:
        return self.call.split("(", 1)[0]


@dataclass(frozen=True)
class Run:
    """What an answer's code did on one example: the value it returned (its repr), or what
    happened instead, in a tool line's words ("raises ZeroDivisionError", "runs out of time",
    "did not run")."""

    value: str | None = None
    error: str | None = None


def examples(task: str) -> list[Example]:
    """The example calls `task` states (at most MAX_EXAMPLES, in order, no repeats): each a
    call on literal arguments with a literal value, all of one function (the first named)."""
    out: list[Example] = []
    for match in sorted((m for pattern in _EXAMPLES for m in pattern.finditer(task)), key=lambda m: m.start()):
        call, value = match.group("call"), match.group("value")
        arguments = call.split("(", 1)[1][:-1]
        try:
            ast.literal_eval(f"({arguments},)" if arguments.strip() else "()")  # literals only
            ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        example = Example(re.sub(r"\s+", " ", call), value)
        if out and example.function != out[0].function:
            continue
        if example not in out and len(out) < MAX_EXAMPLES:
            out.append(example)
    return out


def passes(run: Run, expected: str) -> bool:
    """Whether a run's value is the stated one: equal values of the same kind (a bool is not a
    number here), floats to 9 significant digits."""
    if run.value is None:
        return False
    try:
        got, want = ast.literal_eval(run.value), ast.literal_eval(expected)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return False
    if isinstance(got, bool) != isinstance(want, bool):
        return False
    if isinstance(got, float) or isinstance(want, float):
        numbers = all(isinstance(x, (int, float)) for x in (got, want))
        return numbers and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    return type(got) is type(want) and got == want


def run_line(label: str, example: Example, run: Run) -> str:
    if run.value is not None:
        shown = run.value if len(run.value) <= MAX_SHOWN else run.value[: MAX_SHOWN - 3] + "..."
        did = f"returns {shown}"
    else:
        did = run.error or "fails"
    verdict = "pass" if passes(run, example.expected) else "fail"
    return f"{label} run: {example.call} {did}; the task says {example.expected}: {verdict}"


def run_lines(label: str, task: str, runs: list[Run] | None) -> list[str]:
    """An answer's run lines: one per example of `task`, from its `runs` (none: no lines)."""
    stated = examples(task)
    if not stated or runs is None:
        return []
    if len(runs) != len(stated):
        raise ValueError(f"{label}: {len(runs)} runs for {len(stated)} examples")
    return [run_line(label, example, run) for example, run in zip(stated, runs)]


def tool_notes(task: str, answers: dict[str, str], runs: dict[str, list[Run]] | None = None) -> str:
    """The block that follows the answers in a judge prompt: the calculator's lines for the
    task, then each answer's shape by its label ("Answer A", "Their answer", ...), then each
    answer's code runs on the task's examples (`runs`: per label, one `Run` per example of
    `examples(task)`, as the caller ran them)."""
    lines = [f"calculator: {c}" for c in calculations(task)]
    lines += [f"{label}: {shape(text)}" for label, text in answers.items()]
    for label in answers:
        lines += run_lines(label, task, (runs or {}).get(label))
    return "Tool results (computed by the grader, not written by the writers):\n" + "\n".join(lines)
