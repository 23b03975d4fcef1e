"""The text of one answer cleaned into the LaTeX of its value (`clean`): delimiters, spacing
commands, thousands separators, units, currency and percent signs go; constants, signs and
scale words (`2 million`) are kept or read; unicode dashes and invisible characters become
what they stand for. `answers.py` reads the result as a value."""

import re
import unicodedata
from decimal import Decimal

_SPACING = re.compile(
    r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])|(?<!\\)\\[!,;:> ]|\\q?quad(?![a-zA-Z])|~"
    r"|\\(?:display|text|script|scriptscript)style(?![a-zA-Z])"
)
_TEXT_CMD = re.compile(
    r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm|mathbf|mathit|operatorname|rm|bf|boldsymbol|bm|pmb)\s*"
    r"\{([^{}]*)\}"
)
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\circ(?![a-zA-Z])|\\degree(?![a-zA-Z])")
_PERCENT = re.compile(r"\\%|%|\s*\b(?:percent(?:age)?|pct)\b", re.IGNORECASE)
_CURRENCY = re.compile(
    r"\\\$|\$|€|£|¥|\\euro(?![a-zA-Z])|\\pounds(?![a-zA-Z])|\b(?:USD|EUR|GBP|dollars?|cents?|yuan|euros?)\b"
)
_LATEX_THOUSANDS = re.compile(
    r"(?<=\d)\s*\{\s*,\s*\}\s*(?=\d{3}(?!\d))|(?<=\d),\\[!,]\s*(?=\d{3})|(?<=\d)\\[,!]\s*(?=\d{3}(?!\d))"
)
# words that are part of a value, never a unit
_CONSTANT_WORDS = {
    "pi", "e", "i", "inf", "infty", "infinity", "oo", "sqrt", "frac", "dfrac", "tfrac", "cfrac", "sin", "cos", "tan",
    "cot", "sec", "csc", "log", "ln", "exp", "and", "or", "cup", "cap", "in", "pm", "mp", "times", "cdot", "div",
    "le", "ge", "leq", "geq", "lt", "gt", "ne", "neq", "approx", "emptyset", "varnothing", "begin", "end",
    "pmatrix", "bmatrix", "matrix", "array", "vmatrix", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "lfloor", "rfloor", "lceil", "rceil", "floor", "ceil", "binom", "mod", "pmod", "bmod", "min", "max", "gcd", "lcm",
    "sum", "prod", "int", "lim", "mid", "vert", "lvert", "rvert", "angle", "triangle", "overline", "vec", "hat",
    "mathbb", "infinite", "no", "none", "undefined", "true", "false", "yes", "odd", "even", "unless", "otherwise",
    "alternatively", "either", "maybe", "perhaps", "possibly", "probably", "might", "could", "not", "but", "if",
    "negative", "minus", "positive", "plus", "hundred", "thousand", "million", "billion", "trillion", "k",
    "percent", "percentage", "pct",
}  # fmt: skip
_SINGLE_LETTER_UNITS = set("msgLlhKNJWVA")
_UNIT_WORD = r"(?:[a-zA-Zµ]{2,}|[a-zA-Zµ](?=\s*(?:\^|²|³|/)))(?:\s*(?:\^\s*\{?\s*-?\d\s*\}?|²|³))?"
_UNIT_TAIL = re.compile(
    rf"(?<=[\d}}.\s])\s*({_UNIT_WORD}(?:\s*(?:(?:/|\bper\b)\s*[a-zA-Z]\b|(?:/|\\cdot|·|\*|\s)\s*{_UNIT_WORD}))*)\s*\.?\s*$"
)
NUMBER = r"\d+(?:\.\d+)?|\.\d+"
HEDGE_WORDS = re.compile(
    r"\b(?:or|unless|otherwise|alternatively|either|maybe|perhaps|possibly|probably|might|could)\b", re.IGNORECASE
)
RELATION = re.compile(r"\\(?:le|ge|leq|geq|leqslant|geqslant|lt|gt|ne|neq|nless|ngtr)(?![a-zA-Z])|<|>|≤|≥|≠|!=")
PM = re.compile(r"\\(?:pm|mp)(?![a-zA-Z])|±|∓")
_SPECIAL_TOKEN = re.compile(r"<\|[\w]+\|>")


def _unwrap(text: str) -> str:
    """Delimiters around one answer: `$`, `\\(`, `\\[`, `**`, quotes, `\\boxed{}`, a trailing period."""
    prev = None
    while prev != text:
        prev = text
        text = re.sub(r'^(?:\\?["“”`])+|(?:\\?["“”`])+$', "", text.strip()).strip()
        for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**")):
            if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
                text = text[len(left) : len(text) - len(right)].strip()
        for box in ("\\boxed{", "\\fbox{"):
            if text.startswith(box) and text.endswith("}") and _balanced(text[len(box) : -1]):
                text = text[len(box) : -1].strip()
        if text.startswith("{") and text.endswith("}") and _balanced(text[1:-1]) and not split_top(text[1:-1])[1:]:
            text = text[1:-1].strip()  # `{60}`: a group around one value (`{1,3}` is read as a set)
        text = re.sub(r"[.,;:]+$", "", text).strip() if not text.endswith("...") else text
        if text.startswith("(") and text.endswith(")") and _group_closes_at_end(text) and not split_top(text[1:-1])[1:]:
            text = text[1:-1].strip()
    return text


def _group_closes_at_end(text: str) -> bool:
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and i < len(text) - 1:
            return False
    return depth == 0


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "{"
        depth -= ch == "}"
        if depth < 0:
            return False
    return depth == 0


def _text_command(m: re.Match) -> str:
    return " " + m.group(1).strip() + " "


def _strip_units(text: str) -> tuple[str, bool]:
    """(text without its trailing unit words, whether one was stripped). Only after a value,
    and never a constant or a word that is the answer itself."""
    offset = max(0, len(text) - 80)  # a unit is a few words: a long tail is not one (and stays linear)
    m = _UNIT_TAIL.search(text, offset)
    if not m or not re.search(r"[\d}]", text[: m.start()]):
        return text, False
    words = re.findall(r"[a-zA-Zµ]+", m.group(1))
    if any(w.lower() in _CONSTANT_WORDS for w in words):
        return text, False
    if len(words) == 1 and len(words[0]) == 1 and words[0] not in _SINGLE_LETTER_UNITS:
        return text, False
    return text[: m.start()].rstrip(), True


_INVISIBLE = re.compile("[\u00ad\u200b-\u200f\u2060-\u2064\ufeff]")
DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"  # every dash-like character: a minus sign
_DASH = re.compile(f"[{DASHES}]")


_SUPERSCRIPT = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+")
_SUBSCRIPT = re.compile("[₀₁₂₃₄₅₆₇₈₉₋₊]+")


def plain_unicode(text: str) -> str:
    """Unicode that writes ASCII: fullwidth digits, every dash-like character as the minus
    sign it writes before a number, invisible characters. Superscript and subscript digits
    are an exponent and an index, never the digits themselves (`2⁶` is `2^{6}`; `⁶⁰` alone
    is no value): NFKC would read them as plain digits."""
    text = _SUPERSCRIPT.sub(lambda m: "^{" + unicodedata.normalize("NFKC", m.group(0)) + "}", text)
    text = _SUBSCRIPT.sub(lambda m: "_{" + unicodedata.normalize("NFKC", m.group(0)) + "}", text)
    return _INVISIBLE.sub("", unicodedata.normalize("NFKC", _DASH.sub("-", text)))


# a word that is part of a value: a sign, a scale, a percent (never dropped like a unit)
_SIGN_WORD = re.compile(r"\b(negative|minus|positive|plus)\s+(?=[\d.\\(\[{$-])", re.IGNORECASE)
_SCALES = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12, "k": 10**3}
_SCALED = re.compile(
    rf"(?<![\d.\w])({NUMBER})\s*(hundred|thousand|million|billion|trillion)s?\b|(?<![\d.\w])({NUMBER})([kK])(?![\w^])",
    re.IGNORECASE,
)
_PERCENT_OF = re.compile(rf"(?<![\d.\w/^{{])({NUMBER})\s*(?:\\%|%|\s*\b(?:percent|pct)\b)", re.IGNORECASE)


def _decimal(value: Decimal) -> str:
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _scaled(m: re.Match) -> str:
    number, word = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
    return _decimal(Decimal(number) * _SCALES[word.lower()])


def _alone(m: re.Match, text: str) -> bool:
    """A `k` suffix scales only a number alone (`30k`); in an expression `2k` is 2·k."""
    return not re.search(r"[a-zA-Z]", text[: m.start()] + text[m.end() :])


def value_words(text: str, percent: bool) -> str:
    """Sign, scale and percent words read into the value: `negative 30` is -30, `minus 30`
    -30, `30 million` 30000000, `30k` 30000; `11\\%` is 0.11, unless `percent` (the expected
    answer is a percentage), where it is 11."""
    text = _SIGN_WORD.sub(lambda m: "-" if m.group(1).lower() in ("negative", "minus") else "+", text)
    text = _SCALED.sub(lambda m: _scaled(m) if m.group(1) is not None or _alone(m, text) else m.group(0), text)
    if percent:
        return _PERCENT.sub(" ", text)
    text = _PERCENT_OF.sub(lambda m: _decimal(Decimal(m.group(1)) / 100), text)
    return re.sub(r"\\%|%", "/100", text)


def clean(answer: str, percent: bool = False, units: bool = True) -> str:
    """The LaTeX of an answer's value (module docstring). Idempotent. `percent`: the expected
    answer is a percentage, so `11\\%` is 11 (else 0.11). `units`: trailing unit words go
    (an expected answer's); a response's units are read by `answer_grammar`, never guessed."""
    text = plain_unicode(_SPECIAL_TOKEN.split(answer)[0]).replace("\x0c", "\\f")  # a form feed: a mangled `\\f`
    text = re.sub(r"(?<=\d)_\{?10\}?(?![\d}])", "", text)  # `60_{10}`: base ten
    text = re.sub(r"(?<!\\)\\\\(?=[a-zA-Z]{2})(?!end\b|begin\b)", r"\\", text)  # `\\\\frac`: an escaped `\\frac`
    text = re.sub(r"\{[bBvV]?matrix\}", "{pmatrix}", text)
    text = _unwrap(text)
    text = text.replace("$", " ") if text.count("$") and not re.search(r"\\\$", text) else text
    text = _LATEX_THOUSANDS.sub("", text)
    text = _SPACING.sub(" ", text)
    text = re.sub(r"(?<=[)\]}])\s*(and|or)\s*(?=[(\[{])", r" \1 ", text)
    text = re.sub(r"\\text\s*\{\s*(and|or)\s*\}", r" \1 ", text)
    text = _TEXT_CMD.sub(_text_command, text)
    text = _DEGREES.sub(" ", text)
    text = _CURRENCY.sub(" ", text)
    text = _LATEX_THOUSANDS.sub("", text)
    if not re.search(r"[()\[\]{}]", text) and text.count(",") == len(re.findall(r"(?<=\d),(?=\d{3}(?!\d))", text)):
        text = re.sub(
            r"(?<![\d.])([1-9]\d{0,2})((?:,\d{3})+)(?!\d)", lambda m: m.group(1) + m.group(2).replace(",", ""), text
        )
    text = re.sub(
        r"(?<![\d.,])(\d{1,3})((?: \d{3})+)(?![\d.,])", lambda m: m.group(1) + m.group(2).replace(" ", ""), text
    )
    # a decimal comma: `2,74`, `0,111` (a number alone, or the one number among words)
    if (
        not re.search(r"[()\[\]{}]|\b(?:and|or)\b", text)
        and len(re.findall(r",", text)) == 1
        and len(re.findall(r"\d,\d", text)) == 1
    ):
        text = re.sub(r"(?<![\d.,])(\d+),(\d+)(?![\d,])", _decimal_comma, text)
    text = value_words(text, percent)
    text = " ".join(text.split()).rstrip("\\").strip()
    for _ in range(3 if units else 0):
        text, stripped = _strip_units(text)
        if not stripped:
            break
    text = re.sub(r"^\s*(?:\\\$|\$)\s*", "", text)
    return _unwrap(text)


def _decimal_comma(m: re.Match) -> str:
    whole, frac = m.group(1), m.group(2)
    if (len(frac) != 3 and len(frac) > 1) or whole == "0":
        return f"{whole}.{frac}"
    return m.group(0)


def split_top(text: str, separators: str = ",;") -> list[str]:
    """Parts of `text` split at `separators` outside brackets (and at the words `and`, `or`)."""
    depth, parts, current = 0, [], []
    i = 0
    while i < len(text):
        ch = text[i]
        if text.startswith(("\\{", "\\}"), i):
            current.append(text[i : i + 2])
            depth += 1 if text[i + 1] == "{" else -1 if depth else 0
            i += 2
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}" and depth:
            depth -= 1
        word = re.match(r"\s+(?:and|or|\\text\{\s*(?:and|or)\s*\})\s+", text[i:])
        if depth == 0 and (ch in separators or word):
            parts.append("".join(current))
            current = []
            i += word.end() if word and ch not in separators else 1
            continue
        current.append(ch)
        i += 1
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]
