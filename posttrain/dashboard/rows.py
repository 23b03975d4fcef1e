"""What a row of each run file must hold before the dashboard takes any of it in. Each
check returns the fields a reader keeps, converted, or raises BadRow naming the field and
what is wrong with it, so that a row is taken whole or not at all (a reader never appends
half a row, and never raises on one)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Literal, TypeVar, overload

from posttrain.dashboard.tail import BadRow, BadRows, decode

BIG = 1 << 53  # integers beyond this do not survive a float or an int64 array
T = TypeVar("T")
K = TypeVar("K")  # what a row's check keeps


def finite(value: T) -> T | None:
    """A value the page can take: numbers that are not finite become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@overload
def integer(row: dict, key: str, required: Literal[True] = True) -> int: ...
@overload
def integer(row: dict, key: str, required: bool) -> int | None: ...
def integer(row: dict, key: str, required: bool = True) -> int | None:
    value = row.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRow(f"{key}: {_shown(value)} is {_kind(value)}, not an integer")
    if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
        raise BadRow(f"{key}: {_shown(value)} is not a whole number")
    if not -BIG < value < BIG:
        raise BadRow(f"{key}: {_shown(value)} is out of range")
    return int(value)


@overload
def number(row: dict, key: str, required: Literal[True]) -> float: ...
@overload
def number(row: dict, key: str, required: bool = False) -> float | None: ...
def number(row: dict, key: str, required: bool = False) -> float | None:
    """A number (NaN and the strings "nan"/"inf" that a non-finite float is written as pass)."""
    value = row.get(key)
    if value is None and not required:
        return None
    if isinstance(value, str) and value.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRow(f"{key}: {_shown(value)} is {_kind(value)}, not a number")
    return float(value)


@overload
def text(row: dict, key: str, required: Literal[True]) -> str: ...
@overload
def text(row: dict, key: str, required: bool = False) -> str | None: ...
def text(row: dict, key: str, required: bool = False) -> str | None:
    value = row.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise BadRow(f"{key}: {_shown(value)} is {_kind(value)}, not a {'non-empty ' if required else ''}string")
    return value


def sample_id(row: dict, key: str = "sample") -> tuple[int, int]:
    """`STEP-INDEX` as (step, index)."""
    value = row.get(key)
    if not isinstance(value, str):
        raise BadRow(f"{key}: {_shown(value)} is {_kind(value)}, not an id STEP-INDEX")
    step, dash, index = value.partition("-")
    if not (dash and step.isdigit() and index.isdigit() and int(step) < BIG >> 24 and int(index) < 1 << 24):
        raise BadRow(f"{key}: {_shown(value)} is not an id STEP-INDEX")
    return int(step), int(index)


def metrics_row(row: dict) -> tuple[str, str | None, float]:
    """(stage, job, step) of a metrics.jsonl row; an expert job's rows may say
    `stage: experts/general-max` instead of a `job`."""
    stage, job = text(row, "stage", required=True), text(row, "job")
    step = number(row, "step", required=True)
    if not math.isfinite(step) or abs(step) >= BIG:
        raise BadRow(f"step: {_shown(row['step'])} is not a finite number")
    number(row, "time")
    if job is None and "/" in stage:
        stage, job = stage.split("/", 1)
    return stage, job, step


def rollout_row(row: dict) -> tuple[int, int, float, str, str]:
    """(key, step, reward or NaN when unscored, source, verifier) of a rollouts/STAGE.jsonl row.
    A row as the writer writes it passes on plain type tests (a million rows are indexed at
    a first load); any other goes through the checks that say what is wrong."""
    sample, step, reward, ok = row.get("sample"), row.get("step"), row.get("reward"), row.get("ok", True)
    source, verifier, messages = row.get("source"), row.get("verifier"), row.get("messages")
    if (
        type(sample) is str
        and type(step) is int
        and -BIG < step < BIG
        and type(ok) is bool
        and (type(reward) is float or type(reward) is int or reward is None)
        and (type(source) is str or source is None)
        and (type(verifier) is str or verifier is None)
        and (messages is None or type(messages) is list)
        and type(row.get("response", "")) is str
        and type(row.get("reason", "")) is str
        and type(row.get("family", "")) is str
    ):
        head, dash, tail = sample.partition("-")
        if dash and head.isdigit() and tail.isdigit() and len(head) < 9 and len(tail) < 7:
            return (
                (int(head) << 24) + int(tail),
                step,
                float(reward) if ok and reward is not None else math.nan,
                source or "?",
                verifier or "?",
            )
    return _rollout_row_checked(row)


def _rollout_row_checked(row: dict) -> tuple[int, int, float, str, str]:
    step, index = sample_id(row)
    logged = integer(row, "step")
    reward = number(row, "reward")
    ok = row.get("ok", True)
    if not isinstance(ok, bool):
        raise BadRow(f"ok: {_shown(ok)} is {_kind(ok)}, not true or false")
    source, verifier = text(row, "source") or "?", text(row, "verifier") or "?"
    messages = row.get("messages")
    if messages is not None and not (isinstance(messages, list) and all(isinstance(m, dict) for m in messages)):
        raise BadRow("messages: not a list of objects")
    for key in ("response", "reason", "family"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise BadRow(f"{key}: {_shown(row[key])} is {_kind(row[key])}, not a string")
    return (step << 24) + index, logged, reward if ok and reward is not None else math.nan, source, verifier


def scoreboard_row(row: dict) -> tuple[int, str, tuple[str, ...]]:
    """(key, stage, criterion texts) of a scoreboard.jsonl entry."""
    step, index = sample_id(row)
    stage = text(row, "stage", required=True)
    rubric = row.get("rubric") or []
    if not isinstance(rubric, list) or not all(isinstance(c, dict) for c in rubric):
        raise BadRow("rubric: not a list of objects")
    if not isinstance(row.get("verdicts") or [], list):
        raise BadRow("verdicts: not a list")
    return (step << 24) + index, stage, tuple(str(c.get("text", "")) for c in rubric)


EVAL_TEXT = ("checkpoint", "role", "domain", "effort")
EVAL_NUMBERS = ("score", "score_se", "mean_tokens", "n", "unscored", "overlap")


def eval_row(row: object) -> dict:
    if not isinstance(row, dict):
        raise BadRow(f"{_kind(row)}, not an object")
    text(row, "checkpoint", required=True)
    for key in EVAL_TEXT[1:]:
        text(row, key)
    for key in EVAL_NUMBERS:
        number(row, key)
    return row


def comparison_row(row: object) -> dict[str, str | float | None]:
    if not isinstance(row, dict):
        raise BadRow(f"{_kind(row)}, not an object")
    out: dict[str, str | float | None] = {key: text(row, key, required=True) for key in ("kind", "a", "b")}
    out.update({key: text(row, key) for key in ("domain", "effort")})
    out["diff"] = number(row, "diff", required=True)
    out["se"] = number(row, "se")
    out["n"] = integer(row, "n", required=False)
    return out


def read_rows(
    lines: Iterable[tuple[int, int, bytes]],
    bad: BadRows,
    check: Callable[[dict], K],
    take: Callable[[int, K], None],
) -> None:
    """Every row of `lines` (a tail's poll): `check(row)` validates the whole row and returns
    what to keep (or raises BadRow), then `take(offset, kept)` appends it. A line that is not
    a row, or fails its check, is counted in `bad` with its line number and why."""
    for offset, lineno, line in lines:
        for at, row, why in decode(offset, line):
            if row is None:
                bad.add(lineno, why)
                continue
            try:
                kept = check(row)
            except (BadRow, TypeError, ValueError, OverflowError) as exc:
                bad.add(lineno, str(exc))
                continue
            take(at, kept)
