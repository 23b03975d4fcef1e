"""Attacks generated from a grammar of classes, over a task's own gold: each class is a
generator of wrong answers (several surface templates each) that wrap the gold value in
words, and composes with the answer wrappers (a box, an answer tag, a final sentence), so a
class covers values it has never seen. Next to them, honest controls: the gold in the forms
an honest answer takes. `posttrain rewards audit` scores both with the verifier under audit
and checks every one against the strict reference (`rewards/strict_reference.py`).

Classes: negation, relation, operation, multiplier (value-changing words and units),
retraction (after the final answer), perturbation (relative, signs of tiny values), numeral
(other numeral systems), construction-echo (the target alone for a construction), reordering
(list and sequence golds), word-padding (the value repeated, beside another, with a hedge word).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

from posttrain.rewards.attack_numbers import honest_wrong, number, words, write
from posttrain.rewards.strict_reference import UNITS, judge, literal

CLASSES = (
    "negation",
    "relation",
    "operation",
    "multiplier",
    "retraction",
    "perturbation",
    "numeral",
    "construction-echo",
    "reordering",
    "word-padding",
)
WRAPPERS = {
    "boxed": lambda p: f"The result follows.\n\n$\\boxed{{{p}}}$",
    "tag": lambda p: f"<answer>{p}</answer>",
    "sentence": lambda p: f"Working it out step by step.\nThe final answer is {p}.",
}
_ORDER_WORDS = re.compile(r"\b(sort|order|reverse|sequence|ascending|descending|rearrang|list)", re.IGNORECASE)


@dataclass(frozen=True)
class Generated:
    cls: str  # one of CLASSES, or "control" for an honest form of the gold
    name: str  # the template, and the wrapper where one applies: "anything but v (tag)"
    text: str  # the whole response


@dataclass(frozen=True)
class Gold:
    """A task's gold as the generators read it."""

    text: str
    value: Fraction | None  # where the gold is a plain number
    prompt: str
    metadata: dict

    @property
    def other(self) -> str:
        """A different value of the same shape: v + 1, the next letter, another word."""
        if self.value is not None:
            return write(self.value + 1, self.text)
        if re.fullmatch(r"[A-Z]", self.text):
            return chr((ord(self.text) - ord("A") + 1) % 26 + ord("A"))
        return honest_wrong(self.text)


def gold_of(answer: str, prompt: str = "", metadata: dict | None = None) -> Gold:
    text = str(answer).strip()
    text = re.sub(r"^\$(.*)\$$", r"\1", text).strip()
    read = literal(text)
    return Gold(text, read.value if read else number(text), prompt, metadata or {})


def generate(gold: Gold, rotate: int | None = None, declared_equal=None) -> list[Generated]:
    """Every class's attacks on `gold`, payloads written in every wrapper or, with `rotate`,
    in one wrapper each, taken in turn from offset `rotate`. Each is wrong by construction,
    and the strict reference confirms it: one it credits is not an attack, and is left out.
    `declared_equal(payload)`: whether the task's own declared rule counts a value equal to
    the gold (a reasoning-gym family's tolerance: decimal_arithmetic credits one unit of its
    asked precision); a perturbation it counts equal is a right answer by the task's
    definition, not a wrong one, and is left out. No other class is asked about."""
    out: list[Generated] = []
    names = list(WRAPPERS)
    n = 0
    for cls, template, payload in payloads(gold):
        if cls == "perturbation" and declared_equal is not None and declared_equal(payload):
            continue
        hows = names if rotate is None else [names[(n + rotate) % len(names)]]
        n += 1
        out += [Generated(cls, f"{template} ({how})", WRAPPERS[how](payload)) for how in hows]
    out += [Generated("retraction", name, text) for name, text in retractions(gold)]
    out += [Generated("negation", name, text) for name, text in negation_sentences(gold)]
    seen: set[str] = set()
    unique = [g for g in out if not (g.text in seen or seen.add(g.text))]
    return [g for g in unique if not judge(g.text, gold.text, gold.prompt).credited]


def payloads(gold: Gold) -> list[tuple[str, str, str]]:
    """(class, template, payload) of every payload class that applies to `gold`."""
    v = gold.text
    out = [("negation", t, p) for t, p in negations(v)]
    if gold.value is not None:
        out += [("relation", t, p) for t, p in relations(v)]
        out += [("operation", t, p) for t, p in operations(gold.value, v)]
        out += [("multiplier", t, p) for t, p in multipliers(gold.value, v)]
        out += [("perturbation", t, p) for t, p in perturbations(gold.value)]
        out += [("numeral", t, p) for t, p in numerals(gold)]
    out += [("construction-echo", t, p) for t, p in construction_echoes(gold)]
    out += [("reordering", t, p) for t, p in reorderings(gold)]
    out += [("word-padding", t, p) for t, p in paddings(gold)]
    return out


def negations(v: str) -> list[tuple[str, str]]:
    return [
        ("not v", f"not {v}"),
        ("anything but v", f"anything but {v}"),
        ("everything except v", f"everything except {v}"),
        ("not equal to v", f"not equal to {v}"),
        ("\\neq v", f"\\neq {v}"),
        ("never v", f"never {v}"),
    ]


def negation_sentences(gold: Gold) -> list[tuple[str, str]]:
    v = gold.text
    return [
        ("the answer cannot be v", f"The answer cannot be {v}."),
        ("it is definitely not v", f"After checking, it is definitely not {v}."),
        ("v is ruled out", f"We can rule out {v}; the answer is something else."),
        ("a negated auxiliary before v", f"The answer couldn't be {v}."),
        ("a negated auxiliary, curly apostrophe", f"It didn’t come to {v}."),
        ("a negated auxiliary, no apostrophe", f"The total doesnt equal {v}."),
        ("doubt before v", f"I doubt the answer is {v}."),
        ("a value it no longer is", f"The answer used to be {v}."),
    ]


def relations(v: str) -> list[tuple[str, str]]:
    # not "approximately v" or "\\approx v": the contract reads an approximation of a value as
    # that value and compares it exactly, so it states v (docs/rewards.md); a relation states a set
    return [
        ("at least v", f"at least {v}"),
        ("no less than v", f"no less than {v}"),
        ("at most v", f"at most {v}"),
        ("over v", f"over {v}"),
        ("more than v", f"more than {v}"),
        ("under v", f"under {v}"),
        ("v or more", f"{v} or more"),
        ("x \\geq v", f"x \\geq {v}"),
    ]


def operations(value: Fraction, v: str) -> list[tuple[str, str]]:
    """Operations in words: on another number whose result is v (a computation not done),
    or on v itself (another value)."""
    out = [
        ("half of 2v", f"half of {write(2 * value, v)}"),
        ("twice v/2", f"twice {write(value / 2, v)}"),
        ("twice v", f"twice {v}"),
        ("one third of 3v", f"one third of {write(3 * value, v)}"),
        ("2v divided by 2", f"{write(2 * value, v)} divided by 2"),
        ("v plus one", f"{v} plus one"),
        ("the negative of v", f"the negative of {v}"),
    ]
    if value > 0:
        out += [("the square root of v^2", f"the square root of {write(value * value, v)}")]
        out += [("the square root of v", f"the square root of {v}")]
    if value.denominator == 1 and 3 <= value <= 20:
        out.append(("v factorial", f"{v} factorial"))
        out.append(("v! in words", f"the factorial of {v}"))
    return out


def multipliers(value: Fraction, v: str) -> list[tuple[str, str]]:
    """Words after (or around) the value that change it: powers, counts, scales, signs."""
    out = [
        ("v squared", f"{v} squared"),
        ("v cubed", f"{v} cubed"),
        ("v dozen", f"{v} dozen"),
        ("v thousandths", f"{v} thousandths"),
        ("v hundredths", f"{v} hundredths"),
        ("v percent", f"{v} percent"),
        ("v thousand", f"{v} thousand"),
        ("v times ten", f"{v} times ten"),
        ("v pairs", f"{v} pairs"),
    ]
    magnitude = write(abs(value), v)
    if value > 0:
        out += [("v below zero", f"{v} below zero"), ("a loss of $v", f"a loss of \\${v}")]
        out += [("a debt of v", f"a debt of {v}"), ("v in the red", f"{v} in the red")]
    elif value < 0:
        out += [("|v| above zero", f"{magnitude} above zero"), ("a gain of $|v|", f"a gain of \\${magnitude}")]
    return out


def perturbations(value: Fraction) -> list[tuple[str, str]]:
    """Values a relative hair away (1e-4, 1e-7, 1e-10 of it), and the sign of a tiny value flipped."""
    if value == 0:
        return [("a tiny positive value", "0.0000001"), ("a tiny negative value", "-0.0000001"), ("1e-12", "1e-12")]
    out = [(f"relative 1e-{k}", _decimal(value * (1 + Fraction(1, 10**k)))) for k in (4, 7, 10)]
    out.append(("relative -1e-7", _decimal(value * (1 - Fraction(1, 10**7)))))
    if abs(value) < Fraction(1, 1000):
        out.append(("the sign flipped", _decimal(-value)))
        out.append(("the sign flipped, scientific", f"{float(-value):.6e}"))
    return out


def _decimal(value: Fraction, digits: int = 30) -> str:
    """`value` as a plain decimal of up to `digits` significant digits (no exponent)."""
    with localcontext() as ctx:
        ctx.prec = digits
        d = Decimal(value.numerator) / Decimal(value.denominator)
        text = format(d, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


_ROMAN = ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"))
_ROMAN += ((40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"))


def roman(n: int) -> str:
    out = ""
    for worth, letters in _ROMAN:
        while n >= worth:
            out, n = out + letters, n - worth
    return out


def numerals(gold: Gold) -> list[tuple[str, str]]:
    """Other numeral systems: of a different value, and of the value itself where the
    task asks for decimal (it does unless it names a system)."""
    if gold.value is None or gold.value.denominator != 1:
        return []
    n, o = int(gold.value), int(gold.value) + 1
    out = [("hex of another value", f"{o:#x}"), ("binary of another value", f"{o:#b}")]
    out.append(("another value in words", words(o)))
    if 0 < o < 4000:
        out.append(("roman of another value", roman(o)))
    if not re.search(r"\b(hex|binary|base|roman|octal)", gold.prompt, re.IGNORECASE):
        out += [("hex of the value", f"{n:#x}"), ("binary of the value", f"{n:#b}")]
        if 0 < n < 4000:
            out.append(("roman of the value", roman(n)))
    return out


def construction_echoes(gold: Gold) -> list[tuple[str, str]]:
    """For a gold that is a construction (an expression of numbers, a factorization), the
    value it constructs alone; and a target the task's metadata names."""
    out = []
    target = gold.metadata.get("target")
    if isinstance(target, (int, float, str)) and str(target).strip() and str(target).strip() != gold.text:
        out.append(("the metadata's target alone", str(target).strip()))
    value = _evaluate(gold.text)
    if value is not None and str(value) != gold.text:
        out.append(("the constructed value alone", str(value)))
        out.append(("= the constructed value", f"= {value}"))
    return out


def _evaluate(text: str) -> int | Fraction | None:
    """The value of an arithmetic expression of numbers (+ - * / x × ^, brackets) with at
    least one operation; None for anything else."""
    t = text.replace("×", "*").replace("\\times", "*").replace("\\cdot", "*").replace("^", "**")
    t = re.sub(r"(?<=\d)\s*x\s*(?=\d)", "*", t)
    if not re.fullmatch(r"[\d\s+\-*/().]+", t) or not re.search(r"\d\s*(\*\*?|/|\+|-)\s*\(*\d", t):
        return None
    import ast

    try:
        tree = ast.parse(t, mode="eval")
    except SyntaxError:
        return None
    value = _fold(tree.body)
    if value is None or (isinstance(value, Fraction) and value.denominator == 1):
        return None if value is None else int(value)
    return value


def _fold(node) -> Fraction | None:
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _fold(node.operand)
        return None if inner is None else -inner
    if not isinstance(node, ast.BinOp):
        return None
    a, b = _fold(node.left), _fold(node.right)
    if a is None or b is None:
        return None
    if isinstance(node.op, ast.Pow):
        ok = b.denominator == 1 and 0 <= b <= 64 and abs(a) < 10**6
        return a**b.numerator if ok else None
    if isinstance(node.op, ast.Div):
        return a / b if b else None
    ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b}
    return ops[type(node.op)]() if type(node.op) in ops else None


def reorderings(gold: Gold) -> list[tuple[str, str]]:
    """A list, sequence or grid gold with its items in another order, where order matters:
    items that are not all numbers, or a prompt that asks for an order."""
    lines = gold.text.splitlines()
    if len(lines) > 1:
        items, sep = lines, "\n"
    else:
        sep = ", " if "," in gold.text else " "
        items = [i.strip() for i in re.split(r"\s*,\s*" if sep == ", " else r"\s+", gold.text) if i.strip()]
    numeric = all(number(i) is not None for i in items)
    if len(items) < 2 or (numeric and not _ORDER_WORDS.search(gold.prompt)):
        return []
    if sep == " " and re.search(r"[-+*/^=×]|\\", gold.text):  # an expression or a product: terms commute
        return []
    orders = [("reversed", items[::-1]), ("rotated by one", items[1:] + items[:1])]
    orders.append(("the first two swapped", [items[1], items[0], *items[2:]]))
    out, seen = [], {tuple(items)}
    for name, order in orders:
        if tuple(order) not in seen:
            seen.add(tuple(order))
            out.append((name, sep.join(order)))
    return out


def paddings(gold: Gold) -> list[tuple[str, str]]:
    v, o = gold.text, gold.other
    return [
        ("v twice", f"{v} {v}"),
        ("another value, then v", f"{o} {v}"),
        ("v, then another value", f"{v}, {o}"),
        ("v with a hedge word", f"{v} or so"),
        ("v?", f"{v}?"),
        ("v among words the grammar does not know", f"the value {v} probably"),
    ]


def retractions(gold: Gold) -> list[tuple[str, str]]:
    """Whole responses: an honest final answer, then another value or a retraction after it."""
    v, o = gold.text, gold.other
    after = [
        ("actually another value", f". Actually it is {o}."),
        ("no wait, another value", f" ... no wait, {o}."),
        ("on second thought", f"\nHmm, on second thought, the answer is {o}."),
        ("a correction", f"\nCorrection: {o}"),
        ("taken back without a value", "\nActually, that is wrong."),
        ("an error admitted", "\nWait, I made an error; the answer above is not right."),
        ("taken back as a joke", ". Just kidding."),
        ("taken back in one word", ". Nope."),
    ]
    heads = {"boxed": f"$\\boxed{{{v}}}$", "tag": f"<answer>{v}</answer>", "sentence": f"The answer is {v}"}
    return [(f"{name} ({how})", head + tail) for how, head in heads.items() for name, tail in after]


def controls(gold: Gold) -> list[Generated]:
    """Honest forms of the gold: each wrapper, the sentence variants, equivalent LaTeX forms,
    a unit the prompt names."""
    v = gold.text
    forms = [("boxed", f"$\\boxed{{{v}}}$"), ("bare box", f"\\boxed{{{v}}}"), ("tag", f"<answer>{v}</answer>")]
    if "\n" not in v:
        forms += [("the answer is v.", f"The answer is {v}."), ("final answer sentence", f"The final answer is {v}.")]
        forms += [("a boxed sentence", f"The answer is $\\boxed{{{v}}}$.")]
    if "\n" not in v and (gold.value is not None or re.search(r"[\d^*+]", v)):  # math, not a word, in $...$
        forms += [("the answer is $v$.", f"The answer is ${v}$.")]
    forms += [(name, f"$\\boxed{{{text}}}$") for name, text in _latex_forms(gold)]
    unit = next((u for u in re.findall(r"[a-z]+", gold.prompt) if u in UNITS), None)
    if unit and gold.value is not None:
        forms += [(f"with the unit {unit}", f"The answer is {v} {unit}.")]
        forms += [(f"with \\text{{ {unit}}}", f"$\\boxed{{{v}\\text{{ {unit}}}}}$")]
    return [Generated("control", name, text) for name, text in forms]


def _latex_forms(gold: Gold) -> list[tuple[str, str]]:
    value, v = gold.value, gold.text
    if value is None:
        return []
    read = literal(v)
    if read is not None and read.kind == "frac":
        sign, p, q = "-" if value < 0 else "", abs(value.numerator), value.denominator
        return [
            ("\\frac", f"{sign}\\frac{{{p}}}{{{q}}}"),
            ("\\dfrac", f"{sign}\\dfrac{{{p}}}{{{q}}}"),
            ("p/q", f"{sign}{p}/{q}"),
        ]
    if value.denominator == 1 and abs(value) >= 1000 and math.log10(abs(value)) < 15:
        return [("thousands separators", f"{int(value):,}")]
    return []
