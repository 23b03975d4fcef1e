"""A decimal that rounds an exact value: `0.33` for 1/3, `(0.6, 2.6667]` for `(3/5, 8/3]`.
An exact value with no finite decimal (a third, a root, pi) can only be written as a
decimal rounded; such a decimal, of enough places and significant digits, is that value
rounded where it matches it to the places it shows. A value that has a finite decimal is
written exactly, digit for digit (`answers.exact_literal`)."""

from __future__ import annotations

import re
from collections.abc import Callable

_DECIMAL = re.compile(r"(?<![\w.])[-+]?\d*\.(\d+)(?![\w.])")
MIN_ROUNDED_DIGITS = 2  # `0.33` for 1/3; `0.3` and `0.0` state too little of it


def rounding_places(gold: str, answer: str, value_of: Callable[[str], object]) -> int | None:
    """The decimal places to which `answer` rounds an exact `gold` whose value has no finite
    decimal (`0.33` and `(0.6, 2.6667]` for 1/3 and `(3/5, 8/3]`), or None. The gold writes no
    decimal and some number of it has no finite decimal (a third, a root, pi); the answer
    writes no fraction, its longest decimal has 2 places or more, and each decimal of 2 places
    or more has 2 significant digits or more. Every number is compared at the longest
    decimal's places: a shorter one (`0.6` for 3/5) must be exact there. `value_of`: the
    sympy value of LaTeX (`answers.value`)."""
    if "." in gold or re.search(r"\\[dt]?frac|/", answer):
        return None
    places = [len(m.group(1)) for m in _DECIMAL.finditer(answer)]
    if not places or max(places) < MIN_ROUNDED_DIGITS:
        return None
    for m in _DECIMAL.finditer(answer):
        digits = m.group(0).lstrip("+-").replace(".", "").lstrip("0")
        if len(m.group(1)) >= MIN_ROUNDED_DIGITS and len(digits) < MIN_ROUNDED_DIGITS:
            return None
    return max(places) if has_infinite_decimal(value_of(gold)) else None


def has_infinite_decimal(g) -> bool:
    """Whether a sympy value (or a matrix of them) holds a number with no finite decimal."""
    import sympy

    parts = list(g) if isinstance(g, sympy.MatrixBase) else [g]
    nodes = [n for part in parts if isinstance(part, sympy.Basic) for n in sympy.preorder_traversal(part)]
    for atom in nodes:
        if isinstance(atom, sympy.Rational) and not atom.is_Integer:
            q = int(atom.q)
            while q % 2 == 0:
                q //= 2
            while q % 5 == 0:
                q //= 5
            if q != 1:
                return True
        if isinstance(atom, sympy.Expr) and atom.is_number and atom.is_irrational:
            return True
    return False


def same_signs(gold, answer) -> bool:
    """Whether two values, where both are real numbers, have the same sign (else True)."""
    import sympy

    if not (isinstance(gold, sympy.Expr) and isinstance(answer, sympy.Expr)):
        return True
    if not (gold.is_number and answer.is_number and gold.is_real and answer.is_real):
        return True
    return (gold > 0) == (answer > 0) and (gold < 0) == (answer < 0)
