"""How a task source's reference answer is written (`answer_format`), and the gold check.

Datasets hold their reference answers in many forms: GSM8K a worked solution ending in
`#### 72`, MATH a solution whose answer is the last `\\boxed{}`, others a last line, an
`Answer: ...` marker, or something only a function can read. `answer_format` names the
form, and the final answer is read out of the reference when the tasks load
(`posttrain/data/answers.py`); the verifier then compares responses with that answer.

`gold_check`: before a run starts (and in `posttrain validate`) a sample of the source's
own reference answers is scored by its verifier as a response would be; a source whose
gold does not score full marks is refused with the setting that would fix it.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from pydantic import Field, field_validator

from posttrain.config.base import SourceSchema

FORMATS = ("gsm8k", "boxed", "final_line")
_FUNCTION = re.compile(r"(?:[\w.]+|[\w./~-]+\.py):\w+")


def answer_format_spec(value) -> str | None:
    """A normalized `answer_format`: `gsm8k`, `boxed`, `final_line`, `regex: PATTERN` (the
    first group of the first match, or the whole match), or a function `module:function`
    / `path/to/file.py:function`. A mapping `{regex: PATTERN}` or `{function: SPEC}` is the
    same (a regex with `: ` in it reads better that way in YAML)."""
    if value is None:
        return None
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in ("regex", "function"):
            raise ValueError("a mapping takes one key: `regex: PATTERN` or `function: module:function`")
        kind, body = next(iter(value.items()))
        if not isinstance(body, str):
            raise ValueError(f"{kind} must be a string")
        value = f"regex: {body}" if kind == "regex" else body
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    text = value.strip()
    if text in FORMATS:
        return text
    if text.startswith("regex:"):
        pattern = text[len("regex:") :].strip()
        if not pattern:
            raise ValueError("regex: give a pattern, e.g. 'regex: answer is (\\S+)'")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"regex {pattern!r} does not compile: {exc}") from None
        return f"regex: {pattern}"
    if _FUNCTION.fullmatch(text):
        path = text.rpartition(":")[0]
        if path.endswith(".py") and not Path(path).expanduser().is_file():
            raise ValueError(f"file does not exist: {path}")
        return text
    close = difflib.get_close_matches(text, FORMATS, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(
        f"unknown answer format {text!r}: one of {', '.join(FORMATS)}, 'regex: PATTERN' or a function "
        f"module:function (or path/to/file.py:function){hint}"
    )


class AnswerSource(SourceSchema):
    """The reference-answer settings every source of your own data shares."""

    answer_format: str | None = Field(
        default=None,
        description=(
            "How the reference answer is written: `gsm8k` (after the last `####`, thousands commas removed), "
            "`boxed` (the last `\\boxed{}`), `final_line` (the last non-empty line, an `Answer:` marker removed), "
            "`regex: PATTERN` (its first group), or a function `module:function` / `file.py:function` "
            "(reference text -> answer); none: the reference is the answer as it is."
        ),
    )
    gold_check: bool = Field(
        default=True,
        description=(
            "Before the run: score up to 16 of the source's own reference answers through its verifier, as a "
            "response would be, and refuse the source when they do not score full marks (1)."
        ),
    )

    @field_validator("answer_format", mode="before")
    @classmethod
    def _format(cls, value):
        return answer_format_spec(value)
