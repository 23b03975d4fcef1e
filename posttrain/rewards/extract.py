"""Reading the final answer out of a model response.

auto: the last <answer>...</answer>, else the last \\boxed{...}, else the text after a
final "answer:" marker, else the last non-empty line. `final_answers` lists every final
answer a response states, for the hedging check (`math_verifier.hedge`).
"""

from __future__ import annotations

import re

_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_MARKER = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*(.+)", re.IGNORECASE)
# a line that states an answer: "Answer: 5", "The final answer is 5", "**Final answer:** 5"
_MARKER_LINE = re.compile(r"^[\W_]*(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)\W*?\s*(\S.*)$", re.IGNORECASE)


def _boxed_at(text: str, start: int) -> str | None:
    depth, i = 0, start + len("\\boxed{")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            if depth == 0:
                return text[i:j]
            depth -= 1
    return None


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    return None if start < 0 else _boxed_at(text, start)


def all_boxed(text: str) -> list[str]:
    found = (_boxed_at(text, m.start()) for m in re.finditer(r"\\boxed\{", text))
    return [b.strip() for b in found if b is not None]


def final_answers(text: str, mode: str = "auto") -> list[str]:
    """Every final answer the response states, in the places `mode` reads: <answer> tags,
    \\boxed{}, and lines that open with an answer marker."""
    found = []
    if mode in ("auto", "answer_tag"):
        found += [a.strip() for a in _TAG.findall(text)]
    if mode in ("auto", "boxed"):
        found += all_boxed(text)
    if mode == "auto":
        found += [m.group(1).strip() for line in text.splitlines() if (m := _MARKER_LINE.match(line.strip()))]
    return found


def extract_answer(text: str, mode: str = "auto") -> tuple[str | None, str]:
    """(answer or None, how it was found)."""
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
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return None, "empty response"
    marker = _MARKER.search(lines[-1])
    if marker:
        return marker.group(1).strip().rstrip("."), "answer marker"
    return lines[-1].rstrip("."), "last line"
