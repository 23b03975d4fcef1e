"""The `choice` verifier: a multiple-choice response scores 1 when its final answer names
exactly one option, the task's.

The final answer slot is the last `<answer>` tag or `\\boxed{}`, else the last sentence with
an answer word ("The answer is B.", "I choose B", "Option B"), else the last line. The slot
names an option by its letter ("B", "(B)", "B)") or its text ("16"). It is refused when it
names several ("A or B", two letters, a letter and another option's text), when the text
written as a letter's option ("B) 16") is not that option's, when a box, tag or letter
after it, or another box or tag, names another option (a hedge), and when the response ends
listing the options (its last line is then no answer). Every pattern is linear-time;
the check runs in the answer-check workers under their time limit (rewards/deadline.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from posttrain.data.choices import CHOICE, option_lines
from posttrain.rewards.extract import cut_turn
from posttrain.types import RewardResult, Sample

MAX_SLOT_CHARS = 300  # a final statement longer than this names no one option
_MARKER = re.compile(r"\b(?:answer|choice|option|choose|chose|pick|picked|select|selected|go(?:ing)? with)\b", re.I)
_SENTENCE_END = re.compile(r"(?<![A-Z])[.!?]+(?=\s|$)")
_LETTER = re.compile(r"(?<![\w\\])\(?([A-Z])\)?(?![\w'’-])")
_AS_OPTION = re.compile(r"(?<![\w\\])(?:\(([A-Z])\)|([A-Z])[).:])[ \t]*")
# after these words a capital `A` or `I` is a letter ("A or B", "A is right"), not a word
_LETTER_FOLLOWED = re.compile(
    r"\s+(?:is|was|seems|appears|looks|must|should|would|matches|fits|or|and|nor|vs|versus|but|because|since|"
    r"as|not|then|instead|too|also)\b"
)
_FILLER = re.compile(
    r"\b(?:so|thus|therefore|hence|the|my|final|correct|right|best|answer|choice|option|is|it|it's|i|i'll|"
    r"choose|chose|pick|picked|select|selected|go|going|with|would|will|think|be|letter|text|boxed|fbox)\b",
    re.I,
)
_PUNCT = re.compile(r"[\s\W_]+")
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_TAG = re.compile(r"</?answer>", re.I)


@dataclass(frozen=True)
class Reading:
    """What one answer slot names: the options' letters (named by letter or by text), and
    why it names none or several, or contradicts itself (None when it names one cleanly)."""

    letters: frozenset[str]
    problem: str | None = None


def box_spans(text: str) -> list[tuple[int, int]]:
    """The content spans of every `\\boxed{...}` (or `\\fbox{...}`), braces matched, in one pass."""
    openers = {m.end() for m in _BOX_OPEN.finditer(text)}
    spans, stack = [], []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i + 1)
        elif ch == "}" and stack:
            start = stack.pop()
            if start in openers:
                spans.append((start, i))
    return sorted(spans, key=lambda span: span[1])


def tag_spans(text: str) -> list[tuple[int, int]]:
    """The content spans of every `<answer>...</answer>`, each close tag with the open tag before it."""
    spans, opened = [], None
    for m in _TAG.finditer(text):
        if m.group(0)[1] != "/":
            opened = m.end()
        elif opened is not None:
            spans.append((opened, m.start()))
            opened = None
    return spans


def _sentence_around(text: str, at: int) -> tuple[int, int]:
    """The span of the sentence (within its line) that holds position `at`."""
    line_start = text.rfind("\n", 0, at) + 1
    line_end = text.find("\n", at)
    line_end = len(text) if line_end < 0 else line_end
    start, end = line_start, line_end
    for m in _SENTENCE_END.finditer(text, line_start, line_end):
        if m.end() <= at:
            start = m.end()
        else:
            end = m.end()
            break
    return start, end


def final_slot(text: str, choices: dict[str, str]) -> tuple[int, int, str] | None:
    """The final answer slot's span and how it was found: the last tag or box, else the
    sentence of the last answer word, else (or when that names no option and a later line
    does: "... the answer should be clear.\nB") the last line."""
    spans = [(span, "answer tag") for span in tag_spans(text)] + [(span, "boxed") for span in box_spans(text)]
    if spans:
        (start, end), how = max(spans, key=lambda item: item[0][1])
        return start, end, how
    stripped = text.rstrip()
    line_start = stripped.rfind("\n") + 1
    last_line = (line_start, len(stripped), "last line") if stripped[line_start:].strip() else None
    marker = None
    for marker in _MARKER.finditer(text):
        pass
    if marker is None:
        return last_line
    start, end = _sentence_around(text, marker.start())
    named = read_slot(text[start:end], choices)
    if last_line and line_start >= end and not named.letters:
        return last_line
    return start, end, "answer statement"


def _letters(text: str, choices: dict[str, str]) -> set[str]:
    """The option letters a text states as letters: capitals standing alone, but not the
    words `A` and `I` ("A quick check", "I choose")."""
    found = set()
    for m in _LETTER.finditer(text):
        letter = m.group(1)
        if letter not in choices:
            continue
        bracketed = m.group(0) != letter
        after = text[m.end() : m.end() + 16]
        if letter in "AI" and not bracketed and re.match(r"\s+[a-z]", after) and not _LETTER_FOLLOWED.match(after):
            continue
        found.add(letter)
    return found


def _texts(text: str, choices: dict[str, str]) -> set[str]:
    """The options a text names by their own text: whole words, and where one option's text
    holds another's ("New York City", "New York"), the longer."""
    lower = text.casefold()
    spans: list[tuple[int, int, str]] = []
    for letter, option in choices.items():
        needle = option.strip().casefold().rstrip(".")
        if not needle or (needle.isalpha() and len(needle) == 1):
            continue  # a one-letter option text reads as a letter, not as a text
        at = lower.find(needle)
        while at >= 0:
            end = at + len(needle)
            if _whole(lower, at, end):
                spans.append((at, end, letter))
            at = lower.find(needle, at + 1)
    kept = [s for s in spans if not any(o[0] <= s[0] and s[1] <= o[1] and o[:2] != s[:2] for o in spans)]
    return {letter for _, _, letter in kept}


def _whole(text: str, start: int, end: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return not (before.isalnum() or before in "._") and not (after.isalnum() or after == "_" or _decimal(text, end))


def _decimal(text: str, end: int) -> bool:
    return end + 1 < len(text) and text[end] == "." and text[end + 1].isdigit()


def _words_left(text: str) -> str:
    return _PUNCT.sub(" ", _FILLER.sub(" ", text)).strip()


def read_slot(slot: str, choices: dict[str, str]) -> Reading:
    """The options one answer slot names (module docstring), or why it names none or several."""
    if len(slot) > MAX_SLOT_CHARS:
        return Reading(frozenset(), f"no answer: the final statement is {len(slot)} characters")
    letters = _letters(slot, choices)
    texts = _texts(slot, choices)
    if not letters and not texts:
        core = _words_left(slot).upper()
        letters = {core} if core in choices else set()
    named = letters | texts
    if len(letters) > 1 or (not letters and len(texts) > 1):
        return Reading(frozenset(named), f"several options: {', '.join(sorted(named))}")
    if letters and texts - letters:
        other = sorted(texts - letters)[0]
        return Reading(frozenset(named), f"several options: letter {min(letters)} and option {other}'s text")
    if not named:
        return Reading(frozenset(), "no option named")
    return Reading(frozenset(named), _contradiction(slot, min(named), choices))


def _contradiction(slot: str, letter: str, choices: dict[str, str]) -> str | None:
    """Why the text written as the letter's option ("B) 16") is not that option's text, or None."""
    for m in _AS_OPTION.finditer(slot):
        if (m.group(1) or m.group(2)) != letter:
            continue
        written = re.split(r"(?<![A-Z\d])[.!?](?:\s|$)|\n", slot[m.end() :], maxsplit=1)[0]
        if m.group(0).rstrip().endswith(".") and written[:1].isupper():
            continue  # "B. I hope it is correct": a new sentence, not B's text
        words = _words_left(written.casefold())
        option = _words_left(choices[letter].casefold())
        if words and option and words not in option and option not in words:
            shown, option_text = written.strip()[:40], choices[letter][:40]
            return f"contradicts itself: it writes {letter} as {shown!r}, option {letter} is {option_text!r}"
    return None


def _others(text: str, slot: tuple[int, int], letter: str, choices: dict[str, str]) -> str | None:
    """Why the response names another option outside its final slot, or None: another box
    or tag that names a different option, or a different letter after the slot."""
    for span in tag_spans(text) + box_spans(text):
        named = read_slot(text[span[0] : span[1]], choices).letters if span != slot else frozenset()
        if named - {letter}:
            return f"hedged: another final answer names {', '.join(sorted(named))}"
    after = _letters(text[slot[1] : slot[1] + 2000], choices) - {letter}
    if after:
        return f"hedged: after its answer the response names {', '.join(sorted(after))}"
    return None


def judge_choice(gold: str, text: str, choices: dict[str, str]) -> RewardResult:
    """The verdict on a multiple-choice response against the letter `gold`."""
    body = cut_turn(text)
    found = final_slot(body, choices)
    if found is None:
        return RewardResult(0.0, "no answer found", CHOICE)
    start, end, how = found
    slot = body[start:end]
    details = {"extracted": slot[:200], "extracted_by": how, "expected": gold}
    reading = read_slot(slot, choices)
    if reading.problem:
        return RewardResult(0.0, f"{reading.problem} ({how}: {slot.strip()[:60]!r})", CHOICE, details)
    listed = {letter for letter, _ in option_lines(body)}
    if how == "last line" and option_lines(slot) and len(listed) > 1:
        reason = f"no answer: the response ends listing the options ({', '.join(sorted(listed))})"
        return RewardResult(0.0, reason, CHOICE, details)
    letter = min(reading.letters)
    details["value"] = letter
    hedge = _others(body, (start, end), letter, choices)
    if hedge:
        return RewardResult(0.0, hedge, CHOICE, details)
    if letter != gold:
        return RewardResult(0.0, f"wrong: option {letter} vs expected {gold} ({how})", CHOICE, details)
    return RewardResult(1.0, f"correct: option {letter} ({how})", CHOICE, details)


def is_choice(sample: Sample) -> bool:
    """Whether the sample's task is multiple choice (`answer_form: choice`)."""
    return (sample.task.answer_form or sample.task.entry.get("answer_form")) == CHOICE


def score_choice(sample: Sample, source: str) -> RewardResult:
    """A multiple-choice sample's reward, under the name of the verifier that routed it."""
    choices = sample.task.entry.get("choices") or {}
    gold = sample.task.answer if sample.task.answer is not None else sample.task.entry.get("answer")
    if not choices or gold not in choices:
        return RewardResult(0.0, "task error: a choice task without its options or letter", source, ok=False)
    result = judge_choice(str(gold), sample.completion.text, choices)
    return RewardResult(result.score, result.reason, source, result.details)
