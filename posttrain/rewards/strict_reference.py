"""The audit's strict reference: an independent judge of "is this response's final answer
exactly the gold value". It finds one final-answer slot (the last box, the answer tag, or a
final-answer sentence) with nothing of substance after it or fixed to it, parses the whole
slot under a small grammar (numbers, simple expressions, exact text), replays the parsed
value in SymPy against the gold, and refuses whatever it cannot fully parse: it never
credits by guessing. It shares no code with the verifiers it checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

# units an honest answer may carry, where the gold or the prompt names them
UNITS = frozenset(
    "cm m km mm kg g mg s seconds minutes hours days weeks years meters metres centimeters inches feet miles "
    "dollars cents degrees units liters litres ml people apples cookies marbles students".split()
)
_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_SENTENCE = re.compile(r"(?im)(?:\bthe\s+(?:final\s+)?answer\s+is|\bfinal\s+answer\s*:|^\W*answer\s*:)[ \t]*(.+)$")
_TAIL_OK = re.compile(r"(?:[\s.$*]|\\\)|\\\]|</answer>)*")
# what may not stand right before a slot: a sign, an operator, a factor, a word that changes it
_BEFORE = re.compile(
    r"(?:[-+*/^<>!0-9\u2212{(|]|\\pm|\\mp|\\times|\\cdot|\\sqrt)$|\b(?:not|negative|minus|than|least|most|"
    r"but|over|under|of|below|above|about|approximately|around|nearly|almost|except)\s*$",
    re.IGNORECASE,
)
# the only words the final answer's own sentence may hold before it
_STATING = frozenset("so thus therefore hence then finally the final answer result is".split())
_INT = re.compile(r"[-+]?(?:0|[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d*)")
_DEC = re.compile(r"[-+]?(?:\d+\.\d+|\.\d+)")
_SCI = re.compile(r"([-+]?\d+(?:\.\d+)?)(?:[eE]([-+]?\d+)|\s*\\times\s*10\^\{?([-+]?\d+)\}?)")
_FRAC = re.compile(r"([-+]?)(?:(\d+)/(\d+)|\\[dt]?frac\{(\d+)\}\{(\d+)\})")


@dataclass(frozen=True)
class Verdict:
    credited: bool
    reason: str


@dataclass(frozen=True)
class Literal:
    """A number as written: its exact value and its kind (int, dec, frac)."""

    value: Fraction
    kind: str
    text: str  # the normalized literal SymPy replays


def judge(response: str, gold: str, prompt: str = "") -> Verdict:
    """Whether `response`'s one final answer is exactly `gold` (see the module docstring)."""
    slot = final_slot(response)
    if isinstance(slot, Verdict):
        return slot
    content = _strip_unit(_unwrap(slot), gold, prompt)
    return _same(content, _unwrap(gold))


def final_slot(response: str) -> str | Verdict:
    """The content of the response's one final-answer slot, or the refusal."""
    text = response.replace("\u2212", "-")
    spans = _boxes(text) + [(m.start(), m.end(), m.group(1)) for m in _TAG.finditer(text)]
    spans += [(m.start(), m.end(), m.group(1)) for m in _SENTENCE.finditer(text)]
    outer = [s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]
    if not outer:
        return Verdict(False, "no final-answer slot")
    outer.sort()
    contents = {_norm(_unwrap(c)) for _, _, c in outer}
    if len(contents) > 1:
        return Verdict(False, f"several final answers: {sorted(contents)[:3]}")
    start, end, content = outer[-1]
    if not _TAIL_OK.fullmatch(text[end:]):
        return Verdict(False, f"text after the final answer: {text[end:].strip()[:60]!r}")
    before = text[:start].rstrip().rstrip("$").rstrip()
    if before.endswith(("\\(", "\\[")):
        before = before[:-2].rstrip()
    if _BEFORE.search(before):
        return Verdict(False, f"the slot is modified by what precedes it: {before[-20:]!r}")
    words = re.findall(r"[A-Za-z'’]+", re.sub(r"\\[a-zA-Z]+", " ", re.split(r"[.!?:;\n]", before)[-1]))
    other = [w for w in words if w.lower() not in _STATING]
    if other:  # "I doubt", "It couldn't be", "John's": the sentence says more than that this is the answer
        return Verdict(False, f"words before the final answer in its sentence: {other[:3]}")
    return content


def _boxes(text: str) -> list[tuple[int, int, str]]:
    out = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append((m.start(), i, text[m.end() : i - 1]))
    return out


def _unwrap(text: str) -> str:
    """The slot's content without the marks around it: $, \\( \\), a box, bold, a final period."""
    t = text.strip().replace("\u2212", "-")
    for _ in range(10):
        before = t
        t = re.sub(r"^\$+(.*?)\$+$", r"\1", t, flags=re.DOTALL).strip()
        t = re.sub(r"^\\[(\[](.*?)\\[)\]]$", r"\1", t, flags=re.DOTALL).strip()
        t = re.sub(r"^\*\*(.*)\*\*$", r"\1", t, flags=re.DOTALL).strip()
        m = re.fullmatch(r"\\(?:boxed|fbox)\s*\{(.*)\}", t, re.DOTALL)
        t = m.group(1).strip() if m else t
        t = re.sub(r"^\\(?:text|mathrm)\{([^{}]*)\}$", r"\1", t).strip()
        t = t[:-1].strip() if t.endswith(".") else t
        if t == before:
            return t
    return t


def _norm(text: str) -> str:
    return re.sub(r"\s*,\s*", ", ", " ".join(text.split()))


def _strip_unit(content: str, gold: str, prompt: str) -> str:
    """`60 cm` -> `60` where `cm` is a unit of the table that the gold or the prompt names."""
    m = re.fullmatch(r"(.*?\d)\s*(?:\\text\{\s*([a-zA-Z]+)\s*\}|(?:\\,)?\s*([a-zA-Z]+))", content)
    if m:
        unit = m.group(2) or m.group(3)
        named = re.search(rf"\b{re.escape(unit)}\b", f"{gold} {prompt}")
        if unit in UNITS and named:
            return m.group(1).strip()
    dollars = re.fullmatch(r"\\\$\s*(\d[\d,.]*)", content)
    if dollars and re.search(r"\$|dollar", prompt):
        return dollars.group(1)
    return content


def literal(text: str) -> Literal | None:
    """A number written as an integer, decimal, scientific decimal or fraction in lowest
    terms; None for anything else."""
    t = text.strip()
    if _INT.fullmatch(t):
        digits = t.replace(",", "").lstrip("+")
        return Literal(Fraction(int(digits)), "int", digits)
    if _DEC.fullmatch(t):
        return Literal(Fraction(t.lstrip("+")), "dec", t.lstrip("+"))
    m = _SCI.fullmatch(t)
    if m:
        exponent = int(m.group(2) or m.group(3))
        return Literal(Fraction(m.group(1).lstrip("+")) * Fraction(10) ** exponent, "dec", f"{m.group(1)}e{exponent}")
    m = _FRAC.fullmatch(t)
    if m:
        p, q = (int(m.group(2)), int(m.group(3))) if m.group(2) else (int(m.group(4)), int(m.group(5)))
        if q <= 1 or Fraction(p, q).denominator != q:  # a zero or unit denominator, or not in lowest terms
            return None
        sign = -1 if m.group(1) == "-" else 1
        return Literal(sign * Fraction(p, q), "frac", f"{'-' if sign < 0 else ''}{p}/{q}")
    return None


def _same(content: str, gold: str) -> Verdict:
    want = literal(gold)
    if want is not None:
        return _same_number(content, want)
    symbolic = _expression(gold)
    if symbolic is not None:
        got = _expression(content)
        if got is None:
            return Verdict(False, f"cannot parse {content[:60]!r} as an expression")
        return Verdict(got == symbolic, "the same expression" if got == symbolic else "another expression")
    same = _norm(content) == _norm(gold)
    return Verdict(same, "the gold text" if same else f"{content[:60]!r} is not the gold text")


def _same_number(content: str, want: Literal) -> Verdict:
    got = literal(content)
    if got is None:
        return Verdict(False, f"not a number literal: {content[:60]!r}")
    if got.kind != want.kind:
        return Verdict(False, f"a {got.kind} where the gold is a {want.kind}")
    import sympy

    replay = sympy.Rational(got.text) == sympy.Rational(want.text)
    if replay != (got.value == want.value):  # two independent readings disagree: refuse
        return Verdict(False, f"SymPy replay of {got.text} disagrees with its parse")
    return Verdict(replay, "the gold value" if replay else f"{got.text} is not {want.text}")


_WORDS = re.compile(r"[A-Za-z]{2,}")


def _expression(text: str):
    """A polynomial-like expression (numbers, one-letter variables, + - * / ^, brackets,
    \\frac, \\cdot) as SymPy reads it; None for anything else (a word, a letter alone, a
    relation, a list)."""
    t = text.strip()
    t = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", t)
    t = t.replace("\\cdot", "*").replace("\\times", "*").replace("\\left", "").replace("\\right", "")
    t = t.replace("{", "(").replace("}", ")").replace("^", "**")
    if not re.fullmatch(r"[0-9a-zA-Z+\-*/(). ]+", t) or _WORDS.search(t) or not re.search(r"[a-zA-Z]", t):
        return None
    if not re.search(r"[0-9+\-*/]", t):  # a letter alone is a text answer (an option, a name)
        return None
    if re.search(r"[a-zA-Z0-9)]\s+[a-zA-Z0-9(]", t):  # `c b a`, `2 x`: a sequence, not a product
        return None
    if re.search(r"\*\*\s*\(?\s*-?\d{3,}|\*\*[^*]*\*\*", t):  # 9^9^9: SymPy would compute it
        return None
    from sympy.parsing.sympy_parser import implicit_multiplication, parse_expr, standard_transformations

    try:
        return parse_expr(t, transformations=standard_transformations + (implicit_multiplication,))
    except (SyntaxError, TypeError, ValueError, ZeroDivisionError):
        return None
