"""Reading the final answer out of a model response.

auto: the last <answer>...</answer>, else the last \\boxed{...}, else the statement after
the last answer marker ("Answer: 5", "The final answer is $5$. I hope it is correct."),
else the last line (or the display-math block the response ends with). Text after a chat
template's turn token (`<|im_start|>`) is another turn, never the answer. A statement is
read to its answer: the math in it ("The final answer is $\\boxed{42}$." is one answer:
the box), or what follows its last `is` / `=` ("The largest $n$ is 34."). `final_answers`
lists every final answer a response states (tags, boxes, marker statements), for the
hedging check (`math_verifier.hedge`).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

# `Answer:`, `The final answer is`, and GSM8K's `#### ` at the start of a line
_MARKER = re.compile(r"(?:(?:\bfinal\s+answer|\banswer)\b\**\s*(is\b|:|=)?|^\s*(#{4})(?!#))\**\s*", re.IGNORECASE)
_TURN = re.compile(r"<\|(?:im_start|im_end|endoftext|eot_id|start_header_id|end_of_text)\|>")
_SENTENCE_END = re.compile(r"(?<=[^\s\d])\.\s+(?=[A-Z\[(\\])|(?<=\d)\.\s+(?=[A-Z])|(?<!\s)\s+I hope it is correct.*$")
# the verbs of a final-answer sentence ("The answer is X", "It costs X"): what precedes
# the verb is the subject, what follows it the answer (read whole, negations included)
_COPULA = re.compile(
    r"(?:\s(?:is|are|equals|was|were|be|becomes|remains|costs|weighs|measures|totals|takes|has|have|had|needs|gets|"
    r"get|got|obtain|find|found|makes|make|gives|give|yields|yield)|"
    r"(?<=\w)'s)\s+",
    re.IGNORECASE,
)
_EQUALS = re.compile(r"\s=\s")  # the first `=` of a sentence without a verb: "The area = 5 \\cdot 12 = 60"
# `,` and `;` only in the class: in both, `, , , x` backtracks exponentially
_CONNECTORS = re.compile(r"[\s,;.:\"'“”`*\\]*(?:(?:and|or|\\quad)[\s,;.:\"'“”`*\\]*)*", re.IGNORECASE)
# "Therefore $x \\geq 5$ is the solution.": the answer named after it (searched, never
# matched from the start: a lazy group before `\s+` backtracks over long runs of spaces)
_NAMED = re.compile(r"\s(?:is|are)\s+(?:the|our|my)\s+(?:final\s+)?(?:answer|solution|result|value)s?\.?$", re.I)
_LEAD = re.compile(
    r"^(?:therefore|thus|so|hence|then|finally|consequently|accordingly|altogether|overall|in\s+total|in\s+all|"
    r"in\s+conclusion|in\s+summary|to\s+conclude|to\s+summarize|as\s+a\s+result)?,?\s*",
    re.IGNORECASE,
)
_CHOICE = re.compile(r"^\(?[A-E]\)?[.:)]\s")


def cut_turn(text: str) -> str:
    """The response up to a chat template's turn token (a form feed read back as the `\\f`
    of `\\frac` it was before a JSON decoder took it for an escape)."""
    return _TURN.split(text, maxsplit=1)[0].replace("\x0c", "\\f")


def _closing_braces(text: str) -> dict[int, int]:
    """The index of the `}` that closes each `{` of `text` (one linear pass: an unclosed
    `{` is absent)."""
    closes, stack = {}, []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            closes[stack.pop()] = i
    return closes


_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _boxes(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of every closed `\\boxed{}` / `\\fbox{}`, in linear time."""
    closes = _closing_braces(text) if "{" in text else {}
    found = []
    for m in _BOX_OPEN.finditer(text):
        end = closes.get(m.end() - 1)
        if end is not None:
            found.append((m.start(), end + 1, text[m.end() : end]))
    return found


def last_boxed(text: str) -> str | None:
    boxes = all_boxed(text)
    return boxes[-1] if boxes else None


def all_boxed(text: str) -> list[str]:
    return [b.strip() for _, _, b in _boxes(text) if b.strip()]


_MATH_OPEN = re.compile(r"\$\$|\\\[|\\\(|(?<!\\)\$")
_INLINE_CLOSE = re.compile(r"(?:[^$\n\\]|\\.)+?(?<!\\)\$")
_CLOSERS = {"$$": "$$", "\\[": "\\]", "\\(": "\\)"}


def math_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of each math span: `$$..$$`, `\\[..\\]`, `\\(..\\)`, `$..$`
    (inline `$` within one line; `\\$` is a dollar sign). Linear time: a delimiter that finds
    no closer is not looked for again."""
    spans, unclosed, i = [], set(), 0
    while (m := _MATH_OPEN.search(text, i)) is not None:
        opener = m.group(0)
        if opener in unclosed:
            i = m.end()
            continue
        if opener == "$":
            close = _INLINE_CLOSE.match(text, m.end())
            end = close.end() if close else -1
            inner_end = end - 1
        else:
            inner_end = text.find(_CLOSERS[opener], m.end())
            end = inner_end + len(_CLOSERS[opener]) if inner_end >= 0 else -1
        if end < 0 or not text[m.end() : inner_end].strip():
            if end < 0 and opener != "$":
                unclosed.add(opener)
            i = m.end() if end < 0 else end
            continue
        spans.append((m.start(), end, text[m.end() : inner_end].strip()))
        i = end
    return spans


def tag_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of each closed `<answer>...</answer>` (case-insensitive), in linear time."""
    lower, spans, i = text.lower(), [], 0
    while (start := lower.find("<answer>", i)) >= 0:
        close = lower.find("</answer>", start + 8)
        if close < 0:
            break
        spans.append((start, close + 9, text[start + 8 : close]))
        i = close + 9
    return spans


def _first_sentence(text: str) -> str:
    m = _SENTENCE_END.search(text)
    return text[: m.start()] if m else text


def _last_sentence(text: str) -> str:
    text = re.sub(r"(?<!\s)\s*I hope it is correct.*$", "", text.strip())  # a space run is tried once
    ends = r"(?<=[^\s\d])\.\s+(?=[A-Z\[(\\])|(?<=\d)\.\s+(?=[A-Z])|(?<=\$\$)\s+(?=[A-Z])|(?<=\\\])\s+(?=[A-Z])"
    sentences = [t for t in re.split(ends, text) if t.strip()]
    return sentences[-1] if sentences else text


def _join_display(text: str) -> str:
    """Display math (`\\[..\\]`, `$$..$$`) on one line, so a line-based reading sees it whole."""
    out, i = [], 0
    for start, end, _ in math_spans(text):
        if text.startswith(("$$", "\\["), start):
            out += [text[i:start], " ".join(text[start:end].split())]
            i = end
    return "".join(out) + text[i:]


def answer_in(statement: str, depth: int = 0, last: bool = False) -> str:
    """The answer a statement states (module docstring); `last`: its last sentence (a
    response's last line), else its first (what follows an answer marker)."""
    return _statement(statement, depth, last)[1]


def _is_prose(text: str) -> bool:
    return bool(re.search(r"[A-Za-z]{3,}", re.sub(r"\\[a-zA-Z]+", " ", text)))


def _statement(statement: str, depth: int = 0, last: bool = False) -> tuple[str, str]:
    """(the words before the answer: subject and verb, the answer) of a statement."""
    s = (_last_sentence(statement) if last else _first_sentence(statement.strip())).strip().rstrip(".").strip()
    if _CHOICE.match(s):
        return "", s
    if depth == 0 and _LEAD.match(s).end() < len(s):
        s = s[_LEAD.match(s).end() :]  # "So x = 60", "Then, 60": a connective states nothing
    named = _NAMED.search(s)
    if named and depth == 0 and named.start() > 0:
        lead = _LEAD.match(s).end()
        before, answer = _statement(s[lead : named.start()], depth + 1)
        return s[:lead] + before, answer
    boxes = _boxes(s)
    if boxes:
        return s[: boxes[-1][0]], boxes[-1][2].strip()
    spans = math_spans(s)
    outside = s
    for start, end, _ in reversed(spans):
        outside = outside[:start] + " " + outside[end:]
    if spans and _CONNECTORS.fullmatch(outside):
        joined = s
        for start, end, content in reversed(spans):
            joined = joined[:start] + content + joined[end:]
        return "", re.sub(r'^(?:\\?["“”`\'])+|(?:\\?["“”`\'])+$', "", joined.strip()).strip()
    copulas = [m for m in _COPULA.finditer(s) if not any(a <= m.start() < b for a, b, _ in spans)]
    equals = [m for m in _EQUALS.finditer(s) if not any(a <= m.start() < b for a, b, _ in spans)]
    verb = copulas[-1] if copulas else (equals[0] if equals and _is_prose(s[: equals[0].start()]) else None)
    if verb and depth == 0:
        rest = s[verb.end() :].strip()
        if re.search(r"[\d$\\]", rest) or len(rest.split()) <= 3:
            before, answer = _statement(rest, depth + 1)
            return s[: verb.end()] + before, answer
    if spans and not re.search(r"\d", outside):
        answer = _with_adjacent(s, spans[-1])
        return s[: spans[-1][0]], answer
    return "", s.strip("\"'“”`").strip()


# what outside the math carries value when it touches it: any non-letter (a sign, a dash,
# \\pm, an operator, a bracket, %), a LaTeX command, and the words of a sign, a scale, a
# negation or an alternative; prose words ("The answer is", "of the pie") stop it
_VALUE_WORDS = (
    r"negative|minus|positive|plus|not|no|or|either|unless|otherwise|maybe|perhaps|possibly|probably|"
    r"hundred|thousand|million|billion|trillion|k|percent|pct"
)
_VALUE_TEXT = rf"(?:[^A-Za-z$\\]|\\[a-zA-Z]+|\\[^a-zA-Z$]|\b(?:{_VALUE_WORDS})\b)*"
_VALUE_BEFORE = re.compile(rf"{_VALUE_TEXT}$", re.IGNORECASE)
_VALUE_AFTER = re.compile(rf"[A-Za-z]*{_VALUE_TEXT}", re.IGNORECASE)  # letters touching it: `$5$i`
_PUNCTUATION = re.compile(r"[\s,.;:?*\"'“”`]*")  # not `!`: touching a number it is a factorial


def _with_adjacent(statement: str, span: tuple[int, int, str]) -> str:
    """The math of `span` with the value-carrying text that touches it outside the delimiters
    (`-(-$x$)`, `\\pm $x$`, `‑$x$`, `negative $x$`, `$x$ million`): a sign or a wrapper
    outside the math is part of the answer, never dropped."""
    start, end, content = span
    before = _VALUE_BEFORE.search(statement[max(0, start - 200) : start]).group(0)
    after = _VALUE_AFTER.match(statement, end, min(len(statement), end + 200)).group(0)
    before = "" if _PUNCTUATION.fullmatch(before) else before.lstrip(" ,.;:*\"'“”`")
    after = re.sub(r"^\s+!+", "", after)  # a spaced `!` ends the sentence; `$5$!` is 5!
    after = "" if _PUNCTUATION.fullmatch(after) else after.rstrip(" ,.;:*\"'“”`")
    while after.count("(") > after.count(")"):  # a bracket of the prose after it: "$42$ (in cm)"
        after = after[: after.rindex("(")].rstrip(" ,.;:")
    while before.count(")") > before.count("("):
        before = before[before.rindex(")") + 1 :].lstrip()
    while before.count("(") - before.count(")") > after.count(")") - after.count("("):
        before = before[before.index("(") + 1 :]  # an opening bracket of the prose around it
    while after.count(")") - after.count("(") > before.count("(") - before.count(")"):
        after = after[: after.rindex(")")]
    return f"{before}{content}{after}".strip()


def _marker_statements(text: str) -> list[tuple[str, str, str]]:
    """(the statement after the marker, the text after its line, the marker's sentence up to
    the statement: `Suppose the answer is`, `The wrong answer is`) of each answer-marker line."""
    found, offset = [], 0
    for line in text.split("\n"):
        offset += len(line) + 1
        last, end = None, len(line.rstrip())
        for m in _MARKER.finditer(line):  # the marker's `\\s*` ends where its statement starts
            if m.end() < end and (m.group(1) or m.group(2) or line.startswith(("$", "\\(", "\\[", "\\boxed"), m.end())):
                last = m
        if last is not None:
            found.append((line[last.end() :].strip(), text[offset:], _sentence_before(line[: last.end()])))
    return found


@dataclass(frozen=True)
class Slot:
    """The one final answer of a response: its text (None where there is none), how it was
    found, the words of its sentence before it (subject and verb), and what follows it."""

    answer: str | None
    how: str
    before: str = ""
    after: str = ""


def _sentence_before(text: str) -> str:
    """The sentence of `text` that runs up to its end (the words before a box or tag)."""
    line = text[-300:].rsplit("\n", 1)[-1]
    return re.split(r"[.!?](?:\s|$)", line)[-1]


def final_slot(text: str, mode: str = "auto") -> Slot:
    """The final-answer slot of a response (module docstring)."""
    text = _join_display(cut_turn(text))
    if mode in ("auto", "answer_tag"):
        tags = tag_spans(text)
        if tags:
            start, end, content = tags[-1]
            return Slot(content.strip(), "answer tag", _sentence_before(text[:start]), text[end:])
        if mode == "answer_tag":
            return Slot(None, "no <answer> tag")
    if mode in ("auto", "boxed"):
        boxes = [b for b in _boxes(text) if b[2].strip()]
        if boxes:
            start, end, content = boxes[-1]
            settled = _final_statement_after(text[end:])
            if settled is not None and all(_COMPUTED.search(text[max(0, b[0] - 40) : b[0]]) for b in boxes):
                return settled
            return Slot(content.strip(), "boxed", _sentence_before(text[:start]), text[end:])
        if mode == "boxed":
            return Slot(None, "no \\boxed{}")
    if mode == "whole":
        return Slot(text.strip() or None, "whole response")
    return _statement_slot(text)


_FINAL_MARKER = re.compile(r"\bfinal\s+answer\b", re.IGNORECASE)
_COMPUTED = re.compile(r"=\s*$")  # a box that closes a computation: `0.04 \cdot 10000 / 2 = \boxed{200}`


def _final_statement_after(text: str) -> Slot | None:
    """The slot of a final-answer statement ("Final Answer: The final answer is $10,455$.")
    that follows a response's last box, or None. The caller takes it only where every box
    closes a computation (`... = \boxed{200}`): such boxes held the work's intermediate
    results; a box that stands alone is a final answer, and two that differ are a hedge."""
    if not _FINAL_MARKER.search(text):
        return None
    slot = _statement_slot(text)
    if slot.how != "answer marker" or not slot.answer:
        return None
    return Slot(slot.answer, "final answer after the boxes", slot.before, slot.after)


def marker_statement(text: str) -> str | None:
    """The whole line after a response's last answer marker ("Final answer: ..."), unread:
    a text answer may hold a verb (`YOU WILL EVER BE THE SAME`) that a statement's reading
    takes for the one between a subject and its answer."""
    statements = _marker_statements(_join_display(cut_turn(text)))
    return statements[-1][0].strip() if statements else None


def _statement_slot(text: str) -> Slot:
    statements = _marker_statements(text)
    if statements:
        statement, following, subject = statements[-1]
        sentence = _first_sentence(statement.strip())
        before, answer = _statement(statement)
        return Slot(answer, "answer marker", subject + before, statement.strip()[len(sentence) :] + "\n" + following)
    stripped = text.strip()
    if stripped.endswith(("\\]", "$$")):
        spans = math_spans(stripped)
        if spans and spans[-1][1] == len(stripped):
            return Slot(spans[-1][2], "last line")
    lines = [ln.strip() for ln in stripped.splitlines() if ln.strip()]
    if not lines:
        return Slot(None, "empty response")
    before, answer = _statement(lines[-1], last=True)
    return Slot(answer.rstrip(".") or None, "last line", before)


def final_answers(text: str, mode: str = "auto") -> list[str]:
    """Every final answer the response states, in the places `mode` reads: <answer> tags,
    \\boxed{}, and statements after an answer marker (one with a box in it is that box)."""
    text = _join_display(cut_turn(text))
    found = []
    if mode in ("auto", "answer_tag"):
        found += [a.strip() for _, _, a in tag_spans(text)]
    if mode in ("auto", "boxed"):
        found += all_boxed(text)
    if mode == "auto":
        found += [answer_in(s) for s, *_ in _marker_statements(text) if not all_boxed(s)]
    return [f for f in found if f]


def extract_answer(text: str, mode: str = "auto") -> tuple[str | None, str]:
    """(answer or None, how it was found)."""
    slot = final_slot(text, mode)
    return slot.answer, slot.how


def after_final(text: str, mode: str = "auto") -> str:
    """What a response says after its final `<answer>` tag or `\\boxed{}` ("" where it has neither)."""
    slot = final_slot(text, mode) if mode in ("auto", "answer_tag", "boxed") else Slot(None, "")
    return slot.after if slot.how in ("answer tag", "boxed") else ""


# What touches a box and changes its value: the box is then an operand, not the stated answer
# (`-\boxed{30}`, `\pm\boxed{30}`, `\sqrt{\boxed{900}}`, `\boxed{30}^2`, `\boxed{30}\%`,
# `$\boxed{30}$ million`). Layout around a box (spacing, `\text`, `=`, `\quad`, `\end{align}`,
# `\pmod{11}`, a unit, degrees) leaves it the answer.
_SIGNS = "-+±∓−‐‑‒–—―﹣－"
_OPERATOR_COMMANDS = (
    r"pm|mp|sqrt|frac|dfrac|tfrac|cdot|times|div|lfloor|lceil|rfloor|rceil|neg|lnot|log|ln|lg|exp|sin|cos|tan|"
    r"cot|sec|csc|arcsin|arccos|arctan|sinh|cosh|tanh|sum|prod|int|lim|max|min|binom|overline|bar|pi|infty|varpi"
)
_MATH_EDGE_BEFORE = re.compile(r"(?:\$+|\\[(\[])$")
_MATH_EDGE_AFTER = re.compile(r"^(?:\$+|\\[)\]])")
_LAYOUT_BEFORE = re.compile(r"(?:\s+|\\displaystyle|\\[,;:! ]|\\q?quad|\(|\[|\\left\s*[(\[.]|\\\{)$")
_LAYOUT_AFTER = re.compile(r"^(?:\s+|\\[,;:! ]|\\q?quad|\)|\]|\\right\s*[)\].]|\\\})")
_IN_MATH_BEFORE = re.compile(r"(?:[" + re.escape(_SIGNS) + r"*/^_×÷·{\d]|\\(?:" + _OPERATOR_COMMANDS + r"))$")
_IN_MATH_AFTER = re.compile(
    r"^(?:[" + re.escape(_SIGNS) + r"*/^_×÷·!%\d]|\\%|\\(?:" + _OPERATOR_COMMANDS + r")(?![a-zA-Z])|[a-zA-Z])"
)
_PROSE_BEFORE = re.compile(r"(?:[" + re.escape(_SIGNS) + r"]|\b(?:negative|minus|not|plus)\s*)$", re.I)
_PROSE_AFTER = re.compile(
    r"^(?:!|\s*(?:[%^]|\\%|(?:million|billion|thousand|trillion|percent|squared|cubed|times)\b))", re.I
)
_DEGREES = re.compile(r"^\^\s*(?:\\circ|\{\s*\\circ\s*\})")
_PERCENT = re.compile(r"^\s*(?:%|\\%|percent\b)", re.I)


def _outward(before: str, after: str, in_math: bool) -> tuple[str, str, bool, bool]:
    """Step out of the layout around a box, up to the edge of its math span: (before, after,
    whether each side is prose: it left the span, or the box was in none). Prose is read
    from the edge on: a sign there must touch the span to count."""
    out_before = out_after = not in_math
    while True:
        moved = False
        if out_before:
            pass
        elif m := _MATH_EDGE_BEFORE.search(before):
            before, out_before, moved = before[: m.start()], True, True
        elif m := _LAYOUT_BEFORE.search(before):
            before, moved = before[: m.start()], True
        if out_after:
            pass
        elif m := _MATH_EDGE_AFTER.match(after):
            after, out_after, moved = after[m.end() :], True, True
        elif m := _LAYOUT_AFTER.match(after):
            after, moved = after[m.end() :], True
        if not moved or (out_before and out_after):
            return before, after, out_before, out_after


def box_operand(text: str, percent: bool = False) -> str | None:
    """Why a box of `text` is an operand of something that changes its value, or None."""
    spans = math_spans(text)
    span_starts = [a for a, _, _ in spans]
    for start, end, _ in _boxes(text):
        k = bisect_right(span_starts, start) - 1
        in_math = k >= 0 and start < spans[k][1]
        # what touches a box is near it: a bounded window keeps the layout regexes linear
        before, after, prose_before, prose_after = _outward(
            text[max(0, start - 200) : start], text[end : end + 200], in_math
        )
        prev = (_PROSE_BEFORE if prose_before else _IN_MATH_BEFORE).search(before[-16:])
        following = None
        if not _DEGREES.match(after) and not (percent and _PERCENT.match(after)):
            following = (_PROSE_AFTER if prose_after else _IN_MATH_AFTER).match(after)
        if prev or following:
            what = (
                (prev.group(0).strip() if prev else "")
                + "\\boxed{...}"
                + (following.group(0).strip() if following else "")
            )
            return f"not a final value: the box is an operand of {what!r} ({text[start:end][:60]!r})"
    return None
