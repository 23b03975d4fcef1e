"""Numbers as the attack library (`attacks.py`) reads and writes them: a value read from an
answer (integer, decimal, fraction, LaTeX fraction), written back in the form of the answer
it replaces, in words; the honest wrong answer next to a right one; and the three ways a
payload is presented (a box, an answer tag, an answer line)."""

from __future__ import annotations

import re
from fractions import Fraction

INT = re.compile(r"[-+]?\d+")
_DEC = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+)")
_FRAC = re.compile(r"([-+]?)(?:(\d+)\s*/\s*(\d+)|\\[dt]?frac\{(\d+)\}\{(\d+)\})")


def number(text: str) -> Fraction | None:
    """The value of an answer written as a plain number (integer, decimal, fraction), or None."""
    t = text.strip().strip("$").replace(",", "") if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+", text.strip()) else text
    t = t.strip().strip("$").strip()
    if INT.fullmatch(t) or _DEC.fullmatch(t):
        return Fraction(t)
    m = _FRAC.fullmatch(t)
    if m:
        p, q = (m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5))
        if int(q) == 0:
            return None
        return Fraction(int(p), int(q)) * (-1 if m.group(1) == "-" else 1)
    return None


def decimals(text: str) -> int:
    """How many decimal places a decimal answer is written with (0 for others)."""
    m = re.fullmatch(r"\s*[-+]?\d*\.(\d+)\s*", text)
    return len(m.group(1)) if m else 0


def write(value: Fraction, like: str = "") -> str:
    """`value` written the way `like` is: an integer, a decimal with as many places, or a fraction."""
    if value.denominator == 1:
        return str(value.numerator)
    places = decimals(like)
    if places or "." in like:
        return f"{float(value):.{max(places, 1)}f}"
    if "frac" in like:
        sign = "-" if value < 0 else ""
        return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"
    return f"{value.numerator}/{value.denominator}"


_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen \
seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def words(n: int) -> str:
    """An integer in English words (below a million), else its digits."""
    if n < 0:
        return "minus " + words(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10 - 2] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        return _ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + words(n % 100))
    if n < 1_000_000:
        return words(n // 1000) + " thousand" + ("" if n % 1000 == 0 else " " + words(n % 1000))
    return str(n)


def honest_wrong(right: str) -> str:
    """An honest wrong answer to a task whose answer is `right`: the value plus one, the
    last integer in it plus one, or another word."""
    value = number(right)
    if value is not None:
        return write(value + 1, right)
    ints = list(re.finditer(r"\d+", right))
    if ints:
        last = ints[-1]
        return right[: last.start()] + str(int(last.group()) + 1) + right[last.end() :]
    flipped = right[::-1]
    return flipped if flipped.strip().lower() != right.strip().lower() else right + "x"


def present(payload: str, how: str) -> str:
    if how == "boxed":
        return f"The result follows.\n\n$\\boxed{{{payload}}}$"
    if how == "tag":
        return f"<answer>{payload}</answer>"
    return f"Working it out step by step.\nThe answer is {payload}"
