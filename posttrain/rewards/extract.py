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

_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_MARKER = re.compile(r"(?:\bfinal\s+answer|\banswer)\b\**\s*(is\b|:|=)?\**\s*", re.IGNORECASE)
_TURN = re.compile(r"<\|(?:im_start|im_end|endoftext|eot_id|start_header_id|end_of_text)\|>")
_SENTENCE_END = re.compile(r"(?<=[^\s\d])\.\s+(?=[A-Z\[(\\])|(?<=\d)\.\s+(?=[A-Z])|\s+I hope it is correct.*$")
_COPULA = re.compile(r"\s(?:is|are|equals|was|be|becomes)\s+(?!not\b)|\s=\s", re.IGNORECASE)
_CONNECTORS = re.compile(r"[\s,;.:\"'“”`*\\]*(?:(?:and|or|,|;|\\quad)[\s,;.:\"'“”`*\\]*)*", re.IGNORECASE)
_CHOICE = re.compile(r"^\(?[A-E]\)?[.:)]\s")


def cut_turn(text: str) -> str:
    """The response up to a chat template's turn token (a form feed read back as the `\\f`
    of `\\frac` it was before a JSON decoder took it for an escape)."""
    return _TURN.split(text, maxsplit=1)[0].replace("\x0c", "\\f")


def _boxed_at(text: str, start: int) -> str | None:
    depth, i = 0, text.index("{", start) + 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            if depth == 0:
                return text[i:j]
            depth -= 1
    return None


def last_boxed(text: str) -> str | None:
    boxes = all_boxed(text)
    return boxes[-1] if boxes else None


def all_boxed(text: str) -> list[str]:
    found = (_boxed_at(text, m.start()) for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text))
    return [b.strip() for b in found if b is not None and b.strip()]


def math_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of each math span: `$$..$$`, `\\[..\\]`, `\\(..\\)`, `$..$`
    (inline `$` within one line; `\\$` is a dollar sign)."""
    spans = []
    pattern = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]|\\\((.+?)\\\)|(?<!\\)\$((?:[^$\n\\]|\\.)+?)(?<!\\)\$", re.DOTALL)
    for m in pattern.finditer(text):
        content = next(g for g in m.groups() if g is not None)
        spans.append((m.start(), m.end(), content.strip()))
    return spans


def _first_sentence(text: str) -> str:
    m = _SENTENCE_END.search(text)
    return text[: m.start()] if m else text


def _last_sentence(text: str) -> str:
    text = re.sub(r"\s*I hope it is correct.*$", "", text.strip())
    ends = r"(?<=[^\s\d])\.\s+(?=[A-Z\[(\\])|(?<=\d)\.\s+(?=[A-Z])|(?<=\$\$)\s+(?=[A-Z])|(?<=\\\])\s+(?=[A-Z])"
    sentences = [t for t in re.split(ends, text) if t.strip()]
    return sentences[-1] if sentences else text


def _join_display(text: str) -> str:
    """Display math (`\\[..\\]`, `$$..$$`) on one line, so a line-based reading sees it whole."""
    return re.sub(r"\$\$.+?\$\$|\\\[.+?\\\]", lambda m: " ".join(m.group(0).split()), text, flags=re.DOTALL)


def answer_in(statement: str, depth: int = 0, last: bool = False) -> str:
    """The answer a statement states (module docstring); `last`: its last sentence (a
    response's last line), else its first (what follows an answer marker)."""
    s = (_last_sentence(statement) if last else _first_sentence(statement.strip())).strip().rstrip(".").strip()
    if _CHOICE.match(s):
        return s
    boxes = all_boxed(s)
    if boxes:
        return boxes[-1]
    spans = math_spans(s)
    outside = s
    for start, end, _ in reversed(spans):
        outside = outside[:start] + " " + outside[end:]
    if spans and _CONNECTORS.fullmatch(outside):
        joined = s
        for start, end, content in reversed(spans):
            joined = joined[:start] + content + joined[end:]
        return re.sub(r'^(?:\\?["“”`\'])+|(?:\\?["“”`\'])+$', "", joined.strip()).strip()
    copulas = [m for m in _COPULA.finditer(s) if not any(a <= m.start() < b for a, b, _ in spans)]
    if copulas and depth == 0:
        rest = s[copulas[-1].end() :].strip()
        if re.search(r"[\d$\\]", rest):
            return answer_in(rest, depth + 1)
    if spans and not re.search(r"\d", outside):
        return _with_adjacent(s, spans[-1])
    return s.strip("\"'“”`").strip()


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


def _marker_statements(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        last = None
        for m in _MARKER.finditer(line):
            rest = line[m.end() :].strip()
            if rest and (m.group(1) or rest.startswith(("$", "\\(", "\\[", "\\boxed"))):
                last = rest
        if last is not None:
            found.append(last)
    return found


def final_answers(text: str, mode: str = "auto") -> list[str]:
    """Every final answer the response states, in the places `mode` reads: <answer> tags,
    \\boxed{}, and statements after an answer marker (one with a box in it is that box)."""
    text = _join_display(cut_turn(text))
    found = []
    if mode in ("auto", "answer_tag"):
        found += [a.strip() for a in _TAG.findall(text)]
    if mode in ("auto", "boxed"):
        found += all_boxed(text)
    if mode == "auto":
        found += [answer_in(s) for s in _marker_statements(text) if not all_boxed(s)]
    return [f for f in found if f]


def extract_answer(text: str, mode: str = "auto") -> tuple[str | None, str]:
    """(answer or None, how it was found)."""
    text = _join_display(cut_turn(text))
    if mode in ("auto", "answer_tag"):
        found = _TAG.findall(text)
        if found:
            return found[-1].strip(), "answer tag"
        if mode == "answer_tag":
            return None, "no <answer> tag"
    if mode in ("auto", "boxed"):
        boxed = last_boxed(text)
        if boxed is not None:
            return boxed.strip(), "boxed"
        if mode == "boxed":
            return None, "no \\boxed{}"
    if mode == "whole":
        return (text.strip() or None), "whole response"
    statements = _marker_statements(text)
    if statements:
        return answer_in(statements[-1]), "answer marker"
    stripped = text.strip()
    if stripped.endswith(("\\]", "$$")):
        spans = math_spans(stripped)
        if spans and spans[-1][1] == len(stripped):
            return spans[-1][2], "last line"
    lines = [ln.strip() for ln in stripped.splitlines() if ln.strip()]
    if not lines:
        return None, "empty response"
    return answer_in(lines[-1], last=True).rstrip(".") or None, "last line"


def after_final(text: str, mode: str = "auto") -> str:
    """What a response says after its final `<answer>` tag or `\\boxed{}` ("" where it has neither)."""
    text = _join_display(cut_turn(text))
    if mode in ("auto", "answer_tag"):
        tags = list(_TAG.finditer(text))
        if tags:
            return text[tags[-1].end() :]
    if mode in ("auto", "boxed"):
        starts = [m.start() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
        for start in reversed(starts):
            inner = _boxed_at(text, start)
            if inner is not None and inner.strip():
                return text[text.index("{", start) + 1 + len(inner) + 1 :]
    return ""


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
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        inner = _boxed_at(text, m.start())
        if inner is None:
            continue
        start, end = m.start(), m.end() + len(inner) + 1
        in_math = any(a <= start < b for a, b, _ in spans)
        before, after, prose_before, prose_after = _outward(text[:start], text[end:], in_math)
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
