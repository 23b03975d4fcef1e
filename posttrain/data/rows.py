"""The one row loop of every task source that reads rows (user files, coding files,
Hugging Face datasets): each row is parsed into a Task, and a row the parser rejects
(ValueError) is reported by its number and skipped, or stops the load (`on_bad_row: fail`).
A row that shows the source's settings do not fit the data (`SettingsMismatch`) always stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from posttrain.types import Task


class SettingsMismatch(ValueError):
    """A row the source's own settings cannot read (a `prompt_template` column it lacks, a
    multiple-choice answer that is no option's letter): the settings are wrong, not the row."""


def rows_to_tasks(
    rows: Iterable[tuple[int, object]],
    parse: Callable[[object, int], Task | None],
    on_bad_row: str,
    where: str,
    *,
    error: type[ValueError] = ValueError,
    at: str = "{where}: row {number}",
    empty: str = "no rows",
    limit: int | None = None,
) -> list[Task]:
    """`parse(row, number)` on every (number, row); None from it skips the row silently (a
    row of another part). An Exception in place of a row (unreadable JSON) is a bad row."""
    tasks, bad = [], []
    for number, row in rows:
        if limit is not None and len(tasks) >= limit:
            break
        try:
            if isinstance(row, Exception):
                raise ValueError(f"invalid JSON ({getattr(row, 'msg', row)})")
            task = parse(row, number)
        except ValueError as exc:
            if on_bad_row == "fail" or isinstance(exc, SettingsMismatch):
                raise error(f"{at.format(where=where, number=number)}: {exc}") from None
            bad.append(f"row {number}: {exc}")
            continue
        if task is not None:
            tasks.append(task)
    if bad:
        print(f"{where}: skipped {len(bad)} bad row(s); first: {bad[0]}", flush=True)
    if not tasks:
        raise error(f"{where}: no usable task" + (f" ({bad[0]})" if bad else f" ({empty})"))
    return tasks
