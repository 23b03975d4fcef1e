"""A final answer read as a value: a number, an expression, a set, an interval, a tuple, a
matrix, an equation, or a word; and the checks on its form.

`clean` (`answer_clean.py`) turns the text of one answer into the LaTeX of its value: delimiters, spacing
commands, thousands separators and units go (`60 km/h`, `\\$60`, `28\\%`, `90^\\circ`,
`15\\text{ cm}^2`, `12 legs`); constants stay (`60\\pi` is not 60, `60\\infty` is not
60), and so does a sign however it is spaced (`- 61` is -61). A label before `=` goes
(`x = 60`, `|AB| = 1`, `(p,q) = (3,2)`), and in a chain of `=` the last part counts. An
approximation (`\\frac{1}{3} \\approx 0.33`) is read as what it approximates.

`value` parses that LaTeX with latex2sympy2_extended (through math-verify's parser) into a
sympy object; `same` compares two values with math-verify's comparison (numbers to 6
decimals, sets as sets, tuples in order, intervals with their ends, equations as
equations); words compare as words. Nothing here reads a clock or a signal: a caller that
needs a time limit runs these functions in a worker process.

`final_value_problem` says why an answer is not a final value where the expected one is
(`85 - 25`, `\\sqrt{3600}`, `-(-60)` for 60; the question's own expression), and
`form_problem` why it is not in the form a task asks for (`answer_form`: simplified,
expanded, factored, decimal, fraction).
"""

from __future__ import annotations

import logging
import math
import re
from functools import lru_cache

from posttrain.rewards.answer_clean import HEDGE_WORDS, NUMBER, PM, RELATION, split_top
from posttrain.rewards.rounding import rounding_places, same_signs
from posttrain.types import ANSWER_FORMS

# ------------------------------------------------------------------ structure of an answer


_LABEL = re.compile(
    r"^(?:[a-zA-Z](?:_\{?[\w,]+\}?)?'*(?:\([a-zA-Z, ]*\))?|\|[A-Za-z]+\||[A-Z]{2,3}|"
    r"\([a-zA-Z](?:\s*,\s*[a-zA-Z])+\)|\\frac\{[A-Za-z]+\}\{[A-Za-z]+\}|"
    r"[A-Za-z](?:_\{?\w+\}?)?\s*:\s*[A-Za-z](?:_\{?\w+\}?)?|\\(?:angle|overline)\s*\{?[A-Za-z]+\}?)$"
)


def is_label(text: str) -> bool:
    """`x`, `x_1`, `f(x)`, `|AB|`, `AB`, `(p, q)`, `A:B`, `\\frac{NO}{BO}`: a name, not a value."""
    return bool(_LABEL.match(text.strip()))


def _top_equals(text: str) -> list[str]:
    depth, parts, start = 0, [], 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}" and depth:
            depth -= 1
        elif ch == "=" and depth == 0 and text[i - 1 : i] not in ("<", ">", "!") and text[i + 1 : i + 2] != "=":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def final_part(text: str) -> str:
    """What an answer states: past a label (`x = 60`), the last part of a chain of `=`, what an
    approximation approximates. An equation between expressions stays one."""
    text = text.strip()
    if "\\approx" in text:
        head = text.split("\\approx")[0].strip()
        head_parts = _top_equals(head)
        text = head if head_parts[-1] and not is_label(head_parts[-1]) else text.split("\\approx")[-1].strip()
    member = re.match(r"^(.{1,12}?)\s*\\in(?![a-zA-Z])\s*(.+)$", text)
    if member and is_label(member.group(1)):
        return member.group(2).strip()
    parts = [p for p in _top_equals(text)]
    if len(parts) == 1 or any(not p for p in parts):
        return text

    def numeric(part: str) -> bool:
        return not re.search(r"[a-zA-Z]", re.sub(r"\\[a-zA-Z]+", "", part))

    if len(parts) >= 3 or is_label(parts[0]) or (numeric(parts[0]) and numeric(parts[-1])):
        return parts[-1]
    return text


def false_chain(text: str) -> str | None:
    """Why a chain of `=` or `\\approx` between numbers states values that differ (`61 = 60`,
    `60 \\approx 61`: the chain is false, whatever its last part), or None. A part with a
    letter (a label, a variable) and a part that does not parse are not compared."""
    parts = [p for part in _top_equals(text) for p in part.split("\\approx")]
    numbers = [p.strip() for p in parts if p.strip() and not re.search(r"[a-zA-Z]", re.sub(r"\\[a-zA-Z]+", "", p))]
    if len(numbers) < 2 or len(numbers) != len(parts):
        return None
    approx = "\\approx" in text
    for a, b in zip(numbers, numbers[1:]):
        exact_a, exact_b = exact_literal(a), exact_literal(b)
        if exact_a is not None and exact_b is not None:
            differ = exact_a != exact_b and not (approx and rounding_places(a, b, value) is not None)
        else:
            differ = value(a) is not None and value(b) is not None and not same(a, b)
        if differ:
            return f"wrong: {text[:60]!r} states {a[:20]!r} and {b[:20]!r}, which differ"
    return None


def values_of(text: str) -> list[str]:
    """The values an answer lists at top level, each past its label (`x = 1, y = 2` -> 1, 2)."""
    return [final_part(p) for p in split_top(text)]


# ------------------------------------------------------------------ values


class _NoTimeoutNotice(logging.Filter):
    """math-verify warns on every call that its own timeout is off: it is off on purpose (the
    caller runs the verifier in a worker process with its time limit), so the notice goes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_NoTimeoutNotice())


@lru_cache(maxsize=4096)
def value(latex: str):
    """The sympy value of cleaned LaTeX, or None where it does not parse."""
    from math_verify import LatexExtractionConfig, parse

    if not latex.strip():
        return None
    parsed = parse(f"${latex}$", [LatexExtractionConfig(boxed_match_priority=0)], parsing_timeout=None)
    return parsed[0] if parsed else None


def words(text: str) -> str | None:
    """The answer as words (`\\text{Evelyn}`, `odd`, `(C)`), or None where it is not words."""
    t = re.sub(r"\\[a-zA-Z]+\s*\{([^{}]*)\}", r"\1", text)
    t = t.strip().strip("()").strip()
    if re.fullmatch(r"[A-Za-z][A-Za-z' -]*", t) and (len(t) == 1 or " " in t or len(t) > 2 or t.isupper()):
        return " ".join(t.lower().split())
    return None


def choice(text: str) -> str | None:
    """The letter of a multiple-choice answer (`C`, `(C)`, `C. x = 42`), or None."""
    return _choice(text)


def _choice(text: str) -> str | None:
    m = re.match(r"^\(?([A-Ea-e])\)?(?:[.:)]\s|$)", text.strip())
    return m.group(1).upper() if m else None


def same(gold: str, answer: str, rounding: bool = True) -> bool:
    """Whether two cleaned answers are the same value (math-verify's comparison), or the same
    words. `rounding`: a decimal may state an exact value with no finite decimal rounded
    (`rewards/rounding.py`); False where the task asks for an exact form."""
    if gold.replace(" ", "") == answer.replace(" ", ""):
        return True
    g_words, a_words = words(gold), words(answer)
    if g_words is not None and len(g_words) == 1:
        choice = _choice(answer) or a_words
        return choice is not None and choice.lower() == g_words
    if g_words is not None or a_words is not None:
        if g_words is not None and a_words is not None and g_words == a_words:
            return True
        if g_words is not None and len(g_words) > 1 and not re.search(r"\d", gold):
            return False
    g_exact, a_exact = exact_literal(gold), exact_literal(answer)
    if g_exact is not None and a_exact is not None and g_exact == a_exact:
        return True
    places = rounding_places(gold, answer, value) if rounding else None
    if g_exact is not None and a_exact is not None and places is None:
        return False  # two numbers written out: every digit counts, no tolerance
    from math_verify import verify

    g, a = value(gold), value(answer)
    if g is None or a is None:
        return False
    try:
        if places is not None:  # each decimal is the exact value rounded to the places it shows
            return bool(verify([g], [a], float_rounding=places, timeout_seconds=None)) and same_signs(g, a)
        return bool(verify([g], [a], timeout_seconds=None)) and numbers_agree(g, a)
    except Exception:
        return False


_LITERAL = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?\d+/\d+")


def exact_literal(text: str):
    """The exact value (a Fraction) of an integer, decimal, scientific or `p/q` literal, or None:
    `0.0955856795273` and `0.0955856909` are two values, whatever a relative tolerance says."""
    from fractions import Fraction

    t = text.replace(" ", "")
    if not _LITERAL.fullmatch(t):
        return None
    try:
        return Fraction(t)
    except (ValueError, ZeroDivisionError):
        return None


RELATIVE_TOLERANCE = 1e-6  # significant digits, not decimals: a tiny or a huge value keeps its digits


def numbers_agree(gold, answer) -> bool:
    """Whether two values, where both are real numbers, have the same sign and agree to a
    relative tolerance (math-verify rounds to 6 decimals, so `1e-7` and `-1e-7` would be one
    value); values that are not both real numbers are left to math-verify."""
    import sympy

    if not (isinstance(gold, sympy.Expr) and isinstance(answer, sympy.Expr)):
        return True
    if not (gold.is_number and answer.is_number and gold.is_real and answer.is_real):
        return True
    g, a = float(gold), float(answer)
    if (g > 0) != (a > 0) or (g < 0) != (a < 0):
        return False
    return abs(g - a) <= RELATIVE_TOLERANCE * max(abs(g), abs(a))


# ------------------------------------------------------------------ form

_NUMBER_LITERAL = re.compile(rf"[-+]?\s*(?:{NUMBER})(?:e[-+]?\d+)?")
_FRACTION = re.compile(
    r"([-+]?)\s*(?:(\d+)\s*/\s*(\d+)|\\[dtc]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|\\[dtc]?frac(\d)(\d))"
)
_MIXED = re.compile(r"[-+]?\s*\d+\s*\\[dtc]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")


def is_number(text: str) -> bool:
    """A number written as its value: an integer or decimal (`1.5e-3` too), a fraction in lowest
    terms (`3/4`, `\\frac{3}{4}`) or a mixed number, optionally signed. `6/8`, `12/4` and
    `\\frac{3}{3}` still have a division to do."""
    text = " ".join(text.split())
    if _NUMBER_LITERAL.fullmatch(text) or re.fullmatch(r"[0-9A-F]+_\{?\d+\}?", text):
        return True
    m = _FRACTION.fullmatch(text)
    if m:
        nums = [g for g in m.groups()[1:] if g is not None]
        p, q = int(nums[0]), int(nums[1])
        return q > 1 and math.gcd(p, q) == 1
    m = _MIXED.fullmatch(text)
    return bool(m) and int(m.group(1)) < int(m.group(2)) and math.gcd(int(m.group(1)), int(m.group(2))) == 1


def is_decimal(text: str) -> bool:
    return bool(_NUMBER_LITERAL.fullmatch(" ".join(text.split())))


_BINARY = re.compile(r"(?<=[\w)}\]!.|])\s*(?:[-+/^÷*×·:]|\\(?:div|pm|mp|cdot|times)(?![a-zA-Z]))(?!\s*$)")
_IMPLICIT = re.compile(r"(?<=[\d)}\]])\s*(?=[(\[]|\\(?:sqrt|frac|dfrac|tfrac|left|lfloor|lceil)(?![a-zA-Z]))")
_FUNCTION = re.compile(
    r"\\(?:[dtc]?frac|sqrt|sin|cos|tan|cot|sec|csc|arcsin|arccos|arctan|sinh|cosh|tanh|log|ln|lg|exp|binom|"
    r"choose|sum|prod|int|lim|max|min|gcd|lcm|mod|bmod|pmod|lfloor|lceil|operatorname)(?![a-zA-Z])|"
    r"\b(?:sqrt|sin|cos|tan|log|ln|exp|abs|mod|gcd|lcm|max|min|sum|pow|floor|ceil|round)\s*\(|!(?!=)|\*\*|\|"
)
_UNARY_WRAP = re.compile(r"(?:^|[(\[{,=\s])[-+]\s*[(\[{]|[-+]\s*[-+]")


def operations(text: str) -> int:
    """How many operations an answer still writes out: binary operators (`85 - 25`, `3 \\cdot 4`),
    products by juxtaposition of a number and a group, fractions, roots, functions, floors,
    factorials, powers, a sign applied to a group (`-(-60)`)."""
    text = " ".join(text.split())
    return (
        len(_BINARY.findall(text))
        + len(_IMPLICIT.findall(text))
        + len(_FUNCTION.findall(text))
        + len(_UNARY_WRAP.findall(text))
    )


def constant_functions(text: str) -> set[str]:
    """Functions an answer applies to a constant argument (`\\sin(\\pi/3)`, `\\log 8`), by name."""
    found = set()
    for m in re.finditer(
        r"\\(sin|cos|tan|cot|sec|csc|arcsin|arccos|arctan|log|ln|lg|exp|lfloor|lceil|binom)(?![a-zA-Z])\s*(\{[^{}]*\}|\([^()]*\)|[^\s]+)?",
        text,
    ):
        arg = re.sub(
            r"\\(?:pi|infty|frac|dfrac|sqrt|cdot|left|right|rfloor|rceil)|[\d\s{}()+\-*/^.,]", "", m.group(2) or ""
        )
        if not re.search(r"[a-zA-Z]", arg):
            found.add(m.group(1))
    return found


def _numeric(latex: str) -> bool:
    v = value(latex)
    try:
        return v is not None and getattr(v, "is_number", False) and not getattr(v, "free_symbols", {1})
    except Exception:
        return False


def _squash(text: str) -> str:
    return re.sub(r"\s+|\\left|\\right|\{|\}|\\[,;!]", "", text).lower()


_ASSIGNMENT = re.compile(r"\s*([A-Za-z])\s*=\s*([^,;=]+?)\s*")


def named_tuples(text: str, names: tuple[str, ...] | None = None) -> tuple[str, tuple[str, ...]]:
    """(the tuples, the names) of solutions written as groups of assignments, `p=5,q=2;p=7,q=2`
    (or one group, `x=1, y=2`): `(5,2),(7,2)`; `(text, ())` for any other text. Every group
    names the same two or more variables in the same order. Each value goes to its name's
    place in `names` where given (the expected answer's: `y=2, x=1` is `x=1, y=2`); else the
    names must be written in the alphabet's order (a tuple's `(x, y)`): `y=1, x=2` is not `(1, 2)`."""
    inner = text.strip().removeprefix("$").removesuffix("$")
    groups = [[_ASSIGNMENT.fullmatch(part) for part in group.split(",")] for group in inner.split(";")]
    if not all(all(group) for group in groups):
        return text, ()
    written = [tuple(m.group(1) for m in group) for group in groups]
    first = written[0]
    if len(first) < 2 or len(set(first)) != len(first) or any(n != first for n in written):
        return text, ()
    order = names or tuple(sorted(first))
    if sorted(first) != sorted(order) or (names is None and first != order):
        return text, ()
    by_name = [{m.group(1): m.group(2) for m in group} for group in groups]  # a value is its name's
    return ",".join("(" + ",".join(values[n] for n in order) + ")" for values in by_name), order


def echo_problem(answer: str, gold: str, question: str | None) -> str | None:
    """Why `answer` is the question's own expression (which the expected answer is not), or None."""
    if not question or operations(answer) == 0:
        return None
    a, g = _squash(answer), _squash(gold)
    if len(a) >= 3 and a != g and a in _squash(question.replace("**", "^")):
        return f"not a final value: {answer[:60]!r} is the question's own expression"
    return None


def final_value_problem(gold: str, answer: str, question: str | None = None) -> str | None:
    """Why `answer` (cleaned, past its label) is not a final value where `gold` is one, or None.
    Where the expected answer is a number, the answer is a number written as its value;
    otherwise it applies no function to a constant that the expected answer does not, writes
    out no more operations, and is not the question's own expression."""
    if is_number(gold) or (_numeric(gold) and operations(gold) == 0 and not re.search(r"\\pi|\\infty|\be\b|i\b", gold)):
        if is_number(answer):
            return None
        return f"not a final value: {answer[:60]!r} still has to be computed (the expected answer is {gold[:60]!r})"
    extra = constant_functions(answer) - constant_functions(gold)
    if extra:
        return f"not a final value: {answer[:60]!r} applies {', '.join(sorted(extra))}, which {gold[:60]!r} does not"
    if "=" in gold or RELATION.search(gold):
        return echo_problem(answer, gold, question)
    ops_answer = min(structural_operations(answer), operations(answer))
    ops_gold = max(structural_operations(gold), operations(gold)) + powers_written_out(gold)
    if ops_answer > ops_gold:
        return (
            f"not a final value: {answer[:60]!r} writes out {ops_answer} operation(s), "
            f"the expected {gold[:60]!r} {ops_gold}"
        )
    return echo_problem(answer, gold, question)


def structural_operations(text: str) -> int:
    """`operations` counted on the parsed, unevaluated form where it parses (`2x` and `2*x`
    are one product), else on the text."""
    import sympy

    expr = _unevaluated(text)
    if isinstance(expr, sympy.Basic) and not isinstance(expr, sympy.Number):
        try:
            return int(sympy.count_ops(expr)) + len(_FUNCTION.findall(" ".join(text.split()))) - _function_ops(expr)
        except Exception:
            pass
    return operations(text)


def powers_written_out(text: str) -> int:
    """The operations a small power of an expression adds when written as the repeated product
    it is (`(r+5)(r+5)` for `(r+5)^2`: one product and a second `+`): the same factored value,
    not a computation left undone. 0 where `text` has no such power or does not parse."""
    import sympy

    expr = _unevaluated(text)
    if not isinstance(expr, sympy.Basic):
        return 0
    extra = 0
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and node.exp.is_Integer and 2 <= node.exp <= 4 and node.base.free_symbols:
            n = int(node.exp)
            extra += (n - 2) + (n - 1) * int(sympy.count_ops(node.base))
    return extra


def _function_ops(expr) -> int:
    import sympy

    return sum(
        1
        for n in sympy.preorder_traversal(expr)
        if isinstance(n, sympy.Function) or isinstance(n, sympy.Pow) and n.exp == sympy.S.Half
    )


def _unevaluated(latex: str):
    from latex2sympy2_extended import latex2sympy

    try:
        return latex2sympy(latex.replace("**", "^"))
    except Exception:
        return None


def _is_expanded(expr) -> bool:
    import sympy

    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Mul) and any(isinstance(a, sympy.Add) for a in node.args):
            return False
        if isinstance(node, sympy.Pow) and isinstance(node.base, sympy.Add) and node.exp.is_Integer and node.exp > 1:
            return False
    return True


def _is_factored(expr) -> bool:
    import sympy

    if isinstance(expr, sympy.Add):
        return len(sympy.factor_list(expr)[1]) <= 1 and sympy.factor_list(expr)[1][0][1] == 1
    bases = [a.base if isinstance(a, sympy.Pow) else a for a in (expr.args if isinstance(expr, sympy.Mul) else [expr])]
    for base in bases:
        if base.free_symbols and len(sympy.factor_list(base)[1]) > 1:
            return False
    return True


def form_problem(form: str | None, answer: str) -> str | None:
    """Why `answer` (cleaned, past its label) is not in the form the task asks for, or None."""
    if not form:
        return None
    if form not in ANSWER_FORMS:
        raise ValueError(f"answer_form {form!r} is not one of {', '.join(ANSWER_FORMS)}")
    if form == "decimal":
        return None if is_decimal(answer) else f"not in the form asked for: {answer[:60]!r} is not a decimal"
    if form == "fraction":
        if is_number(answer) and "." not in answer:
            return None
        return f"not in the form asked for: {answer[:60]!r} is not a fraction in lowest terms"
    expr = _unevaluated(answer)
    if expr is None:
        return None  # not an expression: the value comparison decides
    if form == "expanded" and not _is_expanded(expr):
        return f"not in the form asked for: {answer[:60]!r} is not expanded"
    if form == "factored":
        try:
            factored = _is_factored(expr)
        except Exception:
            factored = True
        if not factored:
            return f"not in the form asked for: {answer[:60]!r} is not factored"
    return None


def hedge_in(answer: str, gold: str, several_expected: bool | None = None) -> str | None:
    """Why one answer hedges where `gold` does not: `\\pm`, alternatives (`or`, `unless`,
    `maybe`), several values where one is expected (`several_expected`: whether `gold` lists
    several; by default, whether it does at top level)."""
    if PM.search(answer) and not PM.search(gold):
        return f"hedged: {answer[:80]!r} gives two values (\\pm)"
    if several_expected is None:
        several_expected = len(values_of(gold)) > 1 or "\n" in gold.strip()
    if not several_expected and HEDGE_WORDS.search(re.sub(r"\\[a-zA-Z]+", " ", answer)):
        return f"hedged: the answer lists alternatives: {answer[:80]!r}"
    if not several_expected and not is_prose(answer) and len(values_of(answer)) > 1:
        parts = [p for line in answer.splitlines() for p in values_of(line)]
        if len({_squash(p) for p in parts}) > 1:
            return f"hedged: one answer expected, several given: {answer[:80]!r}"
    return None


def relation_problem(answer: str, gold: str) -> str | None:
    if RELATION.search(answer) and not RELATION.search(gold):
        return f"not an answer: {answer[:60]!r} states a relation, not a value"
    return None


_COMMANDS = re.compile(r"\\[a-zA-Z]+(?:\s*\{[a-zA-Z*]*\})?")


def is_prose(text: str) -> bool:
    """Whether an answer has words (three letters or more) outside LaTeX commands."""
    return bool(re.search(r"[a-zA-Z]{3,}", _COMMANDS.sub(" ", text)))
