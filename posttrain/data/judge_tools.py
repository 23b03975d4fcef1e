"""What the GRM's judge is shown besides the answers: the results of tools that a small judge
cannot run in its head, computed by the grader from the task and the answers alone.

- **calculator**: every arithmetic expression in the task, evaluated exactly: numbers joined
  by + - * / (also x, ×, ÷, and the words plus, minus, times, multiplied by, divided by), with
  parentheses. A hyphen counts as minus only with spaces around it ("27 - 76"), so ranges
  and dates ("10-20", "2024-05-01") are not sums.
- **shape**: each answer's lines (not counting blank ones) and words.

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
import re
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


def tool_notes(task: str, answers: dict[str, str]) -> str:
    """The block that follows the answers in a judge prompt: the calculator's lines for the
    task, then the shape of each answer by its label ("A", "B", or "the answer")."""
    lines = [f"calculator: {c}" for c in calculations(task)]
    lines += [f"{label}: {shape(text)}" for label, text in answers.items()]
    return "Tool results (computed by the grader, not written by the writers):\n" + "\n".join(lines)
