"""The grammar of a final answer: every word of the final-answer slot is read into the value
or refused, never stripped. `read_slot` turns numbers in words into digits, reads the words
that change a value (sign, scale, fraction, multiplier: `60 below zero`, `120 dozen`, `60
thousandths`, `a loss of $60`), drops the units the task licenses (`units.py`) and the noun
the question counts, and refuses a word of a relation, negation, operation or hedge, or one
the grammar does not know, naming it. `before_problem` and `after_problem` read the words
around the slot. docs/rewards.md, "The final-answer contract", is the guarantee."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from posttrain.rewards.answers import is_label
from posttrain.rewards.units import UNITS, allowed, licensed, unit_of, unit_pattern

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALE_WORDS = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
NUMBER_WORDS = {w: n for n, w in enumerate(_ONES)} | {w: 20 + 10 * n for n, w in enumerate(_TENS)}
_NUMBER_WORD = "|".join(sorted(NUMBER_WORDS, key=len, reverse=True))
_SCALE = "|".join(_SCALE_WORDS)
_NUMBER_PHRASE = re.compile(
    rf"\b(?:{_NUMBER_WORD}|an?(?=[\s-]+(?:{_SCALE}|dozen)\b))(?:(?:[\s-]+|\s+and\s+)(?:{_NUMBER_WORD}|{_SCALE})\b)*",
    re.IGNORECASE,
)
_FRACTION_WORDS = {
    "half": 2, "halves": 2, "third": 3, "quarter": 4, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "twelfth": 12, "twentieth": 20, "hundredth": 100, "thousandth": 1000,
    "millionth": 10**6, "billionth": 10**9,
}  # fmt: skip
_MULTIPLIERS = frozenset({"dozen", "dozens", "gross", "score"})  # `5 dozen` is 5 times 12: an operation
_NUM = r"-?\d+(?:\.\d+)?"
_FRACTION_OF = re.compile(
    rf"(?<![\w.])({_NUM})\s+({'|'.join(sorted(_FRACTION_WORDS, key=len, reverse=True))})s?\b", re.IGNORECASE
)
_NEGATIVE_OF = re.compile(
    r"\b(?:an?\s+)?(?:loss|deficit|decrease|drop|decline|debt|shortfall|reduction|fall)\s+of\s+(?=[\d$\\-])", re.I
)
_POSITIVE_OF = re.compile(r"\b(?:an?\s+)?(?:profit|gain|increase|rise|surplus|growth)\s+of\s+(?=[\d$\\-])", re.I)
_BELOW_ZERO = re.compile(
    rf"(\\?\$?\s*(?:{_NUM}|\b(?:{_NUMBER_WORD})(?:[\s-]+(?:{_NUMBER_WORD}))*))((?:\s*[°a-zA-Z]+)?)\s+(below|above)\s+(?:zero|0)(?![\w.])",
    re.IGNORECASE,
)
_APPROXIMATELY = re.compile(r"(?<!\\)\b(?:approximately|approx\.?|about|around|roughly|circa)\s+", re.IGNORECASE)
_OTHER_BASE = re.compile(r"(?<![\w.])0[xXbBoO][0-9A-Fa-f]+\b|(?<![\w.])[0-9A-Fa-f]+_\{?(?!10\b)\d+\}?")
_MIXED = re.compile(r"^\s*(-?)\s*(\d+)\s*(?:\s(\d+)\s*/\s*(\d+)|\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\})\s*$")
_TEXT_COMMAND = re.compile(
    r"\\(?:text|textbf|textit|textrm|textnormal|textsf|mbox|mathrm|mathbf|mathit|mathsf|operatorname|rm|bf|boldsymbol|bm|pmb)\s*"
    r"\{([^{}]*)\}"
)
_COMMAND = re.compile(r"\\begin\s*\{array\}\s*\{[^{}]*\}|\\(?:begin|end)\s*\{[a-zA-Z*]*\}|\\[a-zA-Z]+")
_SCIENTIFIC = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[eE]([-+]?\d+)(?![\w.])")
_GLUED = re.compile(r"(?<=[\d)])(or|and)(?=[A-Z(\\])")  # `1orW(x)=-1`: a connector between two values
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_WORD = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)?")
# a negated auxiliary, with its apostrophe or without: `couldn't`, `didn’t`, `doesnt`, `won't`
_NEGATED_AUXILIARY = re.compile(
    r"(?:do|does|did|is|are|was|were|has|have|had|ca|could|sha|should|wo|would|must|might|may|need|dare|ought|ai)"
    r"n['’]?t",
    re.IGNORECASE,
)

# the words a final answer may hold whatever the task: functions, constants, signs, scales,
# connectors, and approximation (`approximately 3.14` states 3.14, compared as such)
MATH_WORDS = frozenset(
    "sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log ln lg exp sqrt lcm gcd mod bmod pmod det "
    "max min pi inf infty infinity oo negative minus positive plus hundred thousand million billion trillion k "
    "percent percentage pct and of approximately approx about around roughly circa".split()
)
# word classes that change or deny a value: read as what they do, refused where a value is stated
CLASSES: dict[str, frozenset[str]] = {
    "relation": frozenset(
        "least most less more greater fewer larger smaller bigger higher lower over under above below exceeds "
        "exceed exceeding between beyond nearly almost close within upto up".split()
    ),
    "negation": frozenset(
        "not no never cannot can't cant isn't aren't wasn't won't nor neither except but anything other than "
        "without unlike instead excluding besides nothing none false".split()
    ),
    "operation": frozenset(
        "half twice double doubled triple tripled thrice square squared cube cubed root factorial sum product "
        "difference quotient times divided multiplied power raised halved plus minus".split()
    ),
    "hedge": frozenset(
        "or maybe perhaps possibly probably likely unlikely might may could would should unless otherwise "
        "alternatively either guess assume assuming if whether think believe suppose supposing supposedly "
        "hypothetically imagine pretend doubt doubts doubtful unsure uncertain unclear questionable dubious "
        "presumably seemingly apparently seems seem allegedly reportedly".split()
    ),
    "retraction": frozenset(
        "actually wait wrong incorrect mistake oops correction rather hmm reconsider recheck redo sorry "
        "scratch mistaken nope nah kidding jk joking joke psych sike disregard untrue bogus".split()
    ),
}


@dataclass(frozen=True)
class Reading:
    """A slot read by the grammar: its text with its words read (`text`), or why it does not parse."""

    text: str
    refusal: str | None = None


def words_of(text: str) -> list[str]:
    """The words of `text` outside LaTeX command names (the content of `\\text{}` is words)."""
    text = _CAMEL.sub(" ", _COMMAND.sub(" ", _TEXT_COMMAND.sub(r" \1 ", text)))  # `orW`: two words
    return _WORD.findall(text)


def word_class(word: str) -> str | None:
    """The class of a word that changes or denies a value, or None."""
    w = word.lower().replace("’", "'")
    if _NEGATED_AUXILIARY.fullmatch(w):
        return "negation"
    base = w[:-1] if w.endswith("s") and w[:-1] in _FRACTION_WORDS else w
    if base in _FRACTION_WORDS or w in _MULTIPLIERS:
        return "operation"
    return next((name for name, members in CLASSES.items() if w in members), None)


def _number_phrase(m: re.Match) -> str:
    words = [w for w in re.split(r"[\s-]+", m.group(0).lower()) if w != "and"]
    if all(w in _SCALE_WORDS for w in words):
        return m.group(0)
    total, current = 0, 0
    for w in words:
        if w in ("a", "an"):
            current = 1
        elif w == "hundred":
            current = max(current, 1) * 100
        elif w in _SCALE_WORDS:
            total, current = total + max(current, 1) * _SCALE_WORDS[w], 0
        else:
            current += NUMBER_WORDS[w]
    return str(total + current)


def _fraction_text(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _fraction_word(m: re.Match) -> str:
    word = m.group(2).lower()
    base = word[:-1] if word.endswith("s") and word[:-1] in _FRACTION_WORDS else word
    return _fraction_text(Fraction(m.group(1)) / _FRACTION_WORDS[base])


def _below_zero(m: re.Match) -> str:
    number = m.group(1).replace("\\$", "").replace("$", "").strip()
    negative = m.group(3).lower() == "below"
    if negative:
        number = number[1:] if number.startswith("-") else f"-{number}"
    return f"{number}{m.group(2)}"


def _scientific(m: re.Match) -> str:
    if abs(int(m.group(1))) > 60:
        return m.group(0)  # not written out: the parser reads it (a value that size is no decimal)
    return format(Decimal(m.group(0)), "f")


def mixed_number(text: str) -> str:
    """`1 1/2` and `1\\frac{1}{2}` (a whole answer) as the improper fraction they write."""
    m = _MIXED.match(text)
    if not m:
        return text
    whole, p, q = int(m.group(2)), int(m.group(3) or m.group(5)), int(m.group(4) or m.group(6))
    if q == 0 or p >= q:
        return text
    value = whole + Fraction(p, q)
    return _fraction_text(-value if m.group(1) else value)


def value_words(text: str) -> str:
    """Numbers in words as digits, and the words that change a value read into it."""
    text = _TEXT_COMMAND.sub(r" \1 ", text)
    text = _BELOW_ZERO.sub(_below_zero, text)
    text = _NUMBER_PHRASE.sub(_number_phrase, text)
    text = _BELOW_ZERO.sub(_below_zero, text)
    text = _NEGATIVE_OF.sub("-", text)
    text = _POSITIVE_OF.sub("", text)
    text = _FRACTION_OF.sub(_fraction_word, text)
    return _APPROXIMATELY.sub("", text)


@dataclass(frozen=True)
class Task:
    """What licenses words in an answer: the expected answer's words and units, the question's nouns."""

    gold: str
    question: str | None = None
    several: bool = False

    @property
    def gold_words(self) -> set[str]:
        return {w.lower() for w in words_of(self.gold)}

    @property
    def gold_is_text(self) -> bool:
        return any(len(w) > 1 and w.lower() not in MATH_WORDS for w in words_of(self.gold))

    def drop_units(self, text: str) -> str:
        """`text` without the unit expressions the task allows (`units.allowed`)."""
        pattern = unit_pattern(allowed(self.gold, self.question), licensed(self.gold, self.question))
        return pattern.sub(" ", text) if pattern is not None else text

    @property
    def question_words(self) -> set[str]:
        found = {w.lower() for w in _WORD.findall(self.question or "")}
        return found | {w[:-1] for w in found if w.endswith("s")} | {w + "s" for w in found}


def read_slot(slot: str, task: Task) -> Reading:
    """The slot's text with its words read (module docstring), or the refusal naming a word."""
    other = _OTHER_BASE.search(slot)
    if other and not _OTHER_BASE.search(task.gold):
        return Reading(slot, f"not an answer: {other.group(0)!r} is a numeral in another base (expected base ten)")
    problem = _shape_problem(slot, task)
    if problem:
        return Reading(slot, problem)
    text = _SCIENTIFIC.sub(_scientific, _GLUED.sub(r" \1 ", value_words(slot)))
    text = task.drop_units(text)
    text = _drop_counted_noun(text, task)
    text = mixed_number(" ".join(text.split()))
    problems = [p for p in (_word_problem(w, task) for w in words_of(_past_label(text))) if p]
    # a word that denies or changes the value is named before a word the grammar does not know
    problems.sort(key=lambda p: "answer grammar" in p)
    return Reading(text, problems[0] if problems else None)


# currency signs an answer may carry, by unit (`units.py`): the cleaner drops every sign, so
# the grammar refuses one of a currency the task does not allow (`€60` where it is in dollars)
_CURRENCY_SIGNS = (("euro", r"€|\\euro\b"), ("pound sterling", r"£|\\pounds\b"), ("yen", r"¥"), ("dollar", r"\\\$"))
_SET = re.compile(r"^\s*(?:\\left\s*)?\\\{")
_ORDERED = re.compile(r"^\s*(?:\\left\s*)?[(\[]")


def _shape_problem(slot: str, task: Task) -> str | None:
    """Why the slot's form is not the task's, or None: a currency sign of a currency the task
    does not allow, or a set (no order) where the expected answer is a tuple or an interval."""
    units = allowed(task.gold, task.question)
    for name, sign in _CURRENCY_SIGNS:
        m = re.search(sign, slot)
        if m and next(u for u in UNITS if u.name == name) not in units:
            return f"not an answer: the currency {m.group(0)!r} is not the task's (money is fixed in another unit)"
    if _SET.match(slot) and _ORDERED.match(task.gold) and not _SET.match(task.gold):
        return f"not an answer: {slot[:40]!r} is a set (no order), the expected answer an ordered tuple or interval"
    return None


def _past_label(text: str) -> str:
    """What follows a label (`x = 60`, `|AB| = 1`, `\\angle ABC = 60`): a name is not a word of the value."""
    head, eq, rest = text.partition("=")
    return rest if eq and not rest.startswith("=") and head[-1:] not in "<>!" and is_label(head) else text


def _drop_counted_noun(text: str, task: Task) -> str:
    """A trailing noun the question counts (`12 legs` for "How many legs"), after the last number
    (a word of three letters or more: `390i` is a constant's multiple, never a noun)."""
    m = re.search(r"[\d}]\s*((?:\s*[A-Za-z]+){1,3})\s*\.?$", text[-120:])
    if not m:
        return text
    words = m.group(1).split()
    asked = task.question_words
    if all(len(w) > 2 and w.lower() in asked and word_class(w) is None and w.lower() not in MATH_WORDS for w in words):
        return text[: len(text) - len(m.group(0)) + 1].rstrip()
    return text


def _word_problem(word: str, task: Task) -> str | None:
    w = word.lower()
    if w in task.gold_words or len(w) == 1 or (w in MATH_WORDS and w not in ("and", "of")):
        return None
    if w == "and" or (w == "or" and task.several):
        return None  # a list's connector: the hedge check counts its values
    kind = word_class(w)
    if kind == "relation":
        return f"not an answer: {word!r} states a relation, not a value"
    if kind == "negation":
        return f"not an answer: {word!r} negates the value (negation)"
    if kind == "operation":
        return f"not a final value: {word!r} is an operation in words, a value is expected"
    if kind in ("hedge", "retraction"):
        return f"hedged: the answer says {word!r}"
    if task.gold_is_text or _gold_letters(w, task.gold):
        return None
    unit = unit_of(word)
    if unit is not None:
        return f"not an answer: the unit {word!r} is not the task's ({unit.dimension} is fixed in another unit)"
    return f"not an answer: the word {word!r} is not in the answer grammar (docs/rewards.md)"


def _gold_letters(word: str, gold: str) -> bool:
    """A run of letters that is a product of the expected answer's variables (`xy` for `2xy`)."""
    variables = {c for c in re.sub(r"\\[a-zA-Z]+", " ", gold) if c.isalpha()}
    return bool(variables) and set(word) <= variables


# an answer said to be another's: "The teacher's answer is", "The answer in the book is",
# "according to the key": the response reports it and does not commit to it
_SOURCE = r"(?:answer\s+)?(?:book|textbook|key|teacher|manual|solutions?|source|reference|internet|website)"
_ATTRIBUTED = re.compile(
    r"\b(?!(?:it|that|what|here|there|let|one|problem|question|equation|puzzle|exercise|task|system)'s\b)"
    r"[A-Za-z]+'s\s+(?:\w+\s+)?(?:answer|solution|result)s?\b|\b(?:his|her|their|your|its)\s+(?:\w+\s+)?answers?\b"
    r"|\b(?:official|reference|textbook|book|key|expected|claimed|given|suggested|proposed|published)\s+answers?\b"
    rf"|\b(?:answers?\s+(?:in|from|of)|according\s+to)\s+(?:the|an?|my|our|his|her|their)\s+{_SOURCE}\b",
    re.IGNORECASE,
)


_NO_LONGER = re.compile(r"\bused\s+to\b|\bformerly\b|\bany\s?more\b|\b(?:was|were)\s+going\s+to\b", re.IGNORECASE)


def before_problem(before: str, several: bool = False) -> str | None:
    """Why the words of the answer's sentence before it deny, hedge or change it, or None:
    a negation, hedge or retraction anywhere in it (`The answer cannot be`, `It might be`),
    a relation or an operation among the last words before it (`is at least`, `is half of`)."""
    # the clause of the answer, past the last number: "not 10, it is 60" negates 10, not 60
    clause = re.split(r"[,;:]|(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])", before)[-1]
    words = words_of(clause)
    # the clause's opening ("Maybe it is", "It is not true that") and the words at its verb
    # ("cannot be", "is probably"): a modal inside the subject ("the points that could be in
    # the domain is") is the subject's
    for word in words[:3] + words[-3:]:
        if word.lower() in ("or", "and") and several:
            continue  # a list's connector: "x = 1 or x = 2" where several values are expected
        if word_class(word) in ("negation", "hedge", "retraction"):
            return f"hedged: the final-answer sentence says {word!r} before the answer"
    for word in words[-3:]:
        kind = word_class(word)
        if kind in ("relation", "operation") and word.lower() not in ("of", "sum", "product", "difference", "quotient"):
            return f"not an answer: {word!r} before the answer makes it a {kind}, not the value"
    past = _NO_LONGER.search(clause)
    if past:
        return f"hedged: the final-answer sentence says {past.group(0)!r}: a value it no longer is"
    speaker = _ATTRIBUTED.search(before)
    if speaker:
        return f"hedged: the final answer is given as another's ({speaker.group(0).strip()!r}), not stated"
    return None


# closing formulas addressed to the reader: they state no value and take nothing back
_POLITE = re.compile(
    r"I hope (?:it|this|that) (?:is|was) (?:correct|right|helpful)[.!]?"
    r"|I hope (?:it|this|that) helps[.!]?|Hope (?:it|this|that) helps[.!]?"
    r"|If you have (?:any )?(?:other |further |more |additional )?questions(?: or need (?:any )?(?:further |more )?"
    r"(?:clarification|help|assistance))?,? (?:please )?(?:feel free to ask|let me know|just ask)[.!]?"
    r"|(?:Please )?(?:feel free to ask|let me know) if you have (?:any )?(?:other |further |more )?questions[.!]?"
    r"|Thank you(?: for (?:asking|reading|your (?:question|patience)))?[.!]|Thanks[.!]",
    re.IGNORECASE,
)
_QUESTIONED = re.compile(r"[\s$}\\)\]]{0,8}\?")  # `\boxed{60}?`, `$60$?`
_NUMBER_TOKEN = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:/\d+)?")
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")
# a number after the answer in its own sentence that qualifies it, not another value:
# "$\\boxed{16386.17}$ after 5 years", "\\boxed{9} \\pmod{11}", "in base 5"
_QUALIFIER = re.compile(
    r"\b(?:after|in|for|of|at|per|with|within|from|on|mod|pmod|bmod|modulo|base|each|every)(?:\s+the)?[\s{$\\]*$", re.I
)


def after_problem(after: str, answer: str, task: Task) -> str | None:
    """Why the text after the final answer takes it back or states another value, or None:
    any word that changes, denies or retracts a value; any number but the answer's own,
    except one its own sentence ties to the answer with a preposition ("after 5 years")."""
    if _QUESTIONED.match(after):
        return "hedged: a question mark follows the final answer (it is asked, not stated)"
    tail = task.drop_units("0" + value_words(_POLITE.sub(" ", after[:2000])))[1:]
    end = _SENTENCE_END.search(tail)
    sentence_end = end.start() if end else len(tail)
    same_sentence = [(w, True) for w in words_of(tail[:sentence_end])]
    for word, near in same_sentence + [(w, False) for w in words_of(tail[sentence_end:])]:
        kind = word_class(word)
        if kind is None or word.lower() in task.gold_words or (not near and kind in ("relation", "operation")):
            continue  # a later sentence may compare or compute ("the above", "the sum of"); it may not retract
        return f"hedged: after its final answer the response says {word!r} ({kind})"
    own = {_as_fraction(n) for n in _NUMBER_TOKEN.findall(answer)} | {_as_fraction(answer.strip())}
    for start, sentence in _sentences(tail):
        numbers = list(_NUMBER_TOKEN.finditer(sentence))
        if "=" in sentence and numbers and _as_fraction(numbers[-1].group(0)) in own:
            continue  # a check that comes back to the answer: "Check: 2 * 30 = 60."
        for m in numbers:
            if _as_fraction(m.group(0)) in own:
                continue
            if start == 0 and _QUALIFIER.search(sentence[max(0, m.start() - 40) : m.start()]):
                continue
            return f"hedged: after its final answer the response states another value ({m.group(0)!r})"
    return None


def _sentences(text: str) -> list[tuple[int, str]]:
    """(start, text) of each sentence (or line) of `text`."""
    found, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        found.append((start, text[start : m.start()]))
        start = m.end()
    return [*found, (start, text[start:])]


def _as_fraction(text: str) -> Fraction | None:
    try:
        return Fraction(text.replace(" ", ""))
    except (ValueError, ZeroDivisionError):
        return None
