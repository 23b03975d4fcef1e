"""Reading the final answer out of a reference answer, by the source's `answer_format`
(posttrain/config/answers.py), and guessing the format of a sample of references.

A reference the format cannot read (no `####`, no `\\boxed{}`, no match) is a ValueError
naming the problem: the row loop reports it as a bad row (skipped, or the load stops).
"""

from __future__ import annotations

import inspect
import re
from functools import lru_cache

from posttrain.data.imports import load_object

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_MARKER = re.compile(r"^[\W_]*(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)[\s*_:]*(\S.*)$", re.IGNORECASE)
_BOXES = ("\\boxed{", "\\fbox{")


def _braced(text: str, start: int) -> str | None:
    """The text of the balanced `{...}` whose `{` is at `start - 1`."""
    depth = 0
    for j in range(start, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            if depth == 0:
                return text[start:j]
            depth -= 1
    return None


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), or of `\\boxed 5`."""
    start = max(text.rfind(box) for box in _BOXES)
    if start >= 0:
        box = next(b for b in _BOXES if text.startswith(b, start))
        return _braced(text, start + len(box))
    bare = list(re.finditer(r"\\boxed\s+([^\s$]+)", text))
    return bare[-1].group(1) if bare else None


def gsm8k(text: str) -> str:
    if "####" not in text:
        raise ValueError("no `####` before a final answer (answer_format: gsm8k)")
    answer = text.rsplit("####", 1)[1].strip()
    answer = _THOUSANDS.sub("", answer).strip().rstrip(".").strip()
    if not answer:
        raise ValueError("nothing after `####` (answer_format: gsm8k)")
    return answer


def boxed(text: str) -> str:
    answer = last_boxed(text)
    if answer is None or not answer.strip():
        raise ValueError("no \\boxed{...} answer (answer_format: boxed)")
    return answer.strip()


def final_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise ValueError("empty reference answer (answer_format: final_line)")
    line = lines[-1]
    marker = _MARKER.match(line)
    answer = (marker.group(1) if marker else line).strip().rstrip(".").strip()
    if not answer:
        raise ValueError("the last line holds no answer (answer_format: final_line)")
    return answer


def by_regex(text: str, pattern: str) -> str:
    match = re.search(pattern, text)
    if match is None:
        raise ValueError(f"the pattern {pattern!r} does not match (answer_format: regex)")
    found = next((g for g in match.groups() if g is not None), None) if match.groups() else match.group(0)
    if found is None or not found.strip():
        raise ValueError(f"the pattern {pattern!r} matched no answer (answer_format: regex)")
    return found.strip()


@lru_cache(maxsize=32)
def load_function(spec: str):
    """`module:function` (found on the path and in the directory the command runs from) or
    `path/to/file.py:function`."""
    function = load_object(spec, prefix="_answer_format")
    if not callable(function):
        raise TypeError(f"{spec} is not a function")
    return function


def _call(spec: str, text: str, row: dict | None) -> str:
    function = load_function(spec)
    try:
        takes_row = len(inspect.signature(function).parameters) >= 2
    except (TypeError, ValueError):
        takes_row = False
    try:
        value = function(text, row or {}) if takes_row else function(text)
    except Exception as exc:  # the user's function: its failure is this row's problem
        raise ValueError(f"answer_format {spec} raised {type(exc).__name__}: {exc}") from None
    if value is None:
        raise ValueError(f"answer_format {spec} found no answer")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"answer_format {spec} returned {type(value).__name__}, not a string")
    return str(value).strip()


def read_answer(text: str, spec: str | None, row: dict | None = None) -> str:
    """The final answer of a reference answer written in the form `spec` names."""
    if spec is None:
        return text
    if spec == "gsm8k":
        return gsm8k(text)
    if spec == "boxed":
        return boxed(text)
    if spec == "final_line":
        return final_line(text)
    if spec.startswith("regex:"):
        return by_regex(text, spec[len("regex:") :].strip())
    return _call(spec, text, row)


def guesses(references: list[str]) -> list[str]:
    """Formats every one of `references` can be read in, most specific first (the gold
    check tries each on the sampled references and names one that scores)."""
    out = []
    for spec in ("gsm8k", "boxed", "final_line"):
        try:
            if references and all(read_answer(r, spec) for r in references):
                out.append(spec)
        except ValueError:
            continue
    return out
