"""User task files: JSONL or Parquet, one task per row.

Row schema: {"prompt": str} or {"messages": [{"role", "content"}, ...]} (ending with the
user's turn), or the columns `prompt_template` names, and optionally "id" (str), "answer"
(str), "metadata" (object), "answer_form". A bad row is reported with its number and
skipped, or rejects the whole file (`on_bad_row: fail`).
"""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.config import UserTasks
from posttrain.config.tasks import template_columns
from posttrain.data.answers import read_answer
from posttrain.data.choices import CHOICE, choice_entry, render
from posttrain.data.rows import rows_to_tasks
from posttrain.types import ANSWER_FORMS, Message, Task

ROLES = ("system", "user", "assistant", "tool")


class BadTaskFile(ValueError):
    pass


def task_file_rows(path: Path):
    """(line or row number, row) of a JSONL or Parquet task file; a row that cannot be read is
    its exception, for the caller to report with its number."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as exc:
            raise BadTaskFile(f"{path}: not a readable Parquet file ({exc})") from None
        yield from enumerate(table.to_pylist(), 1)
        return
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadTaskFile(f"{path}: not UTF-8 text (byte {exc.start})") from None
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                yield number, exc


def row_messages(row: dict, system_prompt: str | None) -> tuple[Message, ...]:
    """A row's `messages` list, or its `prompt` (after the system prompt, if any)."""
    if row.get("messages") is not None:
        msgs = row["messages"]
        if (
            not isinstance(msgs, list)
            or not msgs
            or not all(
                isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in msgs
            )
        ):
            raise ValueError("messages must be a non-empty list of {role, content} with a known role")
        return tuple(Message(m["role"], m["content"]) for m in msgs)
    if isinstance(row.get("prompt"), str) and row["prompt"].strip():
        system = (Message("system", system_prompt),) if system_prompt else ()
        return system + (Message("user", row["prompt"]),)
    raise ValueError("needs a non-empty string `prompt` or a `messages` list")


def _task(row, number: int, source: UserTasks) -> Task:
    if isinstance(row, Exception):
        raise ValueError(f"invalid JSON ({row.msg})")
    if not isinstance(row, dict):
        raise ValueError(f"a row must be an object, got {type(row).__name__}")
    columns = template_columns(source.prompt_template) if source.prompt_template else []
    prompt = render(source.prompt_template, row) if source.prompt_template else None
    unknown = set(row) - {"id", "prompt", "messages", "answer", "metadata", "answer_form", *columns}
    if unknown:
        raise ValueError(f"unknown field(s) {sorted(unknown)}")
    if prompt is not None:
        row = {**row, "prompt": prompt, "messages": None}
    messages = row_messages(row, source.system_prompt)
    answer = row.get("answer")
    if answer is not None and not isinstance(answer, (str, int, float)):
        raise ValueError("answer must be a string or a number")
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError("metadata must be an object")
    task_id = str(row.get("id", f"{Path(source.path).name}:{number}"))
    reference = None if answer is None else str(answer)
    answer = reference if reference is None else read_answer(reference, source.answer_format, row)
    form = row.get("answer_form") or source.answer_form
    if form is not None and form not in (*ANSWER_FORMS, CHOICE):
        raise ValueError(f"answer_form {form!r} is not one of {', '.join((*ANSWER_FORMS, CHOICE))}")
    entry = {"answer": answer, "metadata": metadata, "row": number}
    if form == CHOICE:
        entry.update(choice_entry(messages[-1].content, answer))
    if reference != answer:
        entry["reference"] = reference  # the reference as written (the gold check reads it)
    if form:
        entry["answer_form"] = form
    return Task(
        task_id=task_id,
        family="user",
        messages=messages,
        answer=entry["answer"],
        entry=entry,
        verifier="user",
        answer_form=form,
    )


def tasks_from_file(path: Path, on_bad_row: str, parse) -> list[Task]:
    """`parse(row, number)` on every row of a JSONL or Parquet file, through the row loop
    every source shares (data/rows.py): a bad row is reported by its line number."""
    return rows_to_tasks(
        task_file_rows(path), parse, on_bad_row, str(path), error=BadTaskFile, at="{where}:{number}", empty="empty file"
    )


def user_tasks(source: UserTasks) -> list[Task]:
    path = Path(source.path).expanduser()
    return tasks_from_file(path, source.on_bad_row, lambda row, number: _task(row, number, source))
