"""Reading the final answer out of a model response.

auto: the last <answer>...</answer>, else the last \\boxed{...}, else the text after a
final "answer:" marker, else the last non-empty line.
"""

from __future__ import annotations

import re

_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_MARKER = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*(.+)", re.IGNORECASE)


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed{")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            if depth == 0:
                return text[i:j]
            depth -= 1
    return None


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
