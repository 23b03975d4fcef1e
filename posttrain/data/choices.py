"""Prompts built from several columns (`prompt_template`) and multiple-choice tasks.

`render` fills a template from one row, naming a column the row lacks. `options` reads a
prompt's option lines (`A) 12`, `(B) 16`, `C. 20`, `D: 24`); `choice_entry` checks that a
task's answer is one of their letters and stores the options in the task's entry, where the
`choice` verifier (rewards/choice.py) reads them.
"""

from __future__ import annotations

import re

from posttrain.config.tasks import template_columns
from posttrain.data.rows import SettingsMismatch

CHOICE = "choice"  # the `answer_form` of a multiple-choice task
# one option line: a capital letter, `)` `.` or `:` (or in brackets), then its text; linear-time
_OPTION_LINE = re.compile(r"^[ \t]*(?:\(([A-Z])\)|([A-Z])[).:])[ \t]+(\S[^\n]*)$", re.MULTILINE)
_GOLD = re.compile(r"\(?([A-Za-z])\)?\.?")


def render(template: str, row: dict) -> str:
    """The template with each `{column}` replaced by the row's value (SettingsMismatch
    naming a column the row lacks; ValueError for one it leaves empty)."""
    values = {}
    for name in template_columns(template):
        if name not in row:
            columns = ", ".join(map(str, row))
            raise SettingsMismatch(f"prompt_template: no column {name!r} in this row (columns: {columns})")
        if row[name] is None:
            raise ValueError(f"prompt_template: column {name!r} is empty in this row")
        values[name] = row[name]
    return template.format_map(values)


def option_lines(text: str) -> list[tuple[str, str]]:
    """Every option line of a text, in order: (letter, its text)."""
    return [((m.group(1) or m.group(2)), m.group(3).strip()) for m in _OPTION_LINE.finditer(text)]


def options(prompt: str) -> dict[str, str]:
    """The option letters of a prompt and their texts: the last run of option lines that
    starts at `A` and goes on letter by letter (`{}` when there are fewer than two)."""
    lines = option_lines(prompt)
    starts = [i for i, (letter, _) in enumerate(lines) if letter == "A"]
    if not starts:
        return {}
    found: dict[str, str] = {}
    for letter, text in lines[starts[-1] :]:
        if ord(letter) != ord("A") + len(found):
            break
        found[letter] = text
    return found if len(found) >= 2 else {}


def choice_entry(prompt: str, answer: str | None) -> dict:
    """What a multiple-choice task adds to its entry: its options and its answer as their
    letter (SettingsMismatch when the prompt lists no options or the answer is not one's
    letter; ValueError for a row with no answer)."""
    found = options(prompt)
    if not found:
        raise SettingsMismatch("answer_form choice: the prompt has no option lines (`A) ...`, `B) ...`, one per line)")
    if answer is None:
        raise ValueError("answer_form choice: the row has no answer (the correct option's letter)")
    match = _GOLD.fullmatch(answer.strip())
    letter = match.group(1).upper() if match else None
    if letter not in found:
        named = [k for k, text in found.items() if text.strip().casefold() == answer.strip().casefold()]
        hint = f" (it is option {named[0]}'s text: write {named[0]!r})" if named else ""
        raise SettingsMismatch(
            f"answer_form choice: answer {answer[:40]!r} is not one of the option letters {', '.join(found)}{hint}"
        )
    return {"answer": letter, "choices": found}
