"""The reward debugger's indexes: per line of rollouts/STAGE.jsonl its byte offset, step,
index, reward and source, and per scoreboard entry its offset and rubric, in flat arrays
filled as the files grow. Filters run on the arrays; only the rows of the page asked for are
read from disk (one seek each), so memory stays a few bytes per sample."""

from __future__ import annotations

import math
from array import array
from pathlib import Path
from typing import overload

import numpy as np

from posttrain.dashboard.rows import read_rows, rollout_row, scoreboard_row
from posttrain.dashboard.tail import BadRows, JsonlTail, parse, read_line

PAGE = 200
KEY = 1 << 24  # key of a sample: step * KEY + index within the step


def sample_key(sample_id) -> int | None:
    """`STEP-INDEX` (the id every saved sample has) as one integer."""
    step, _, index = str(sample_id).partition("-")
    try:
        return int(step) * KEY + int(index)
    except ValueError:
        return None


class _Codes:
    """Small integer codes for repeated strings (sources, stages, rubrics)."""

    def __init__(self):
        self.names: list = []
        self.ids: dict = {}

    def code(self, name) -> int:
        if name not in self.ids:
            self.ids[name] = len(self.names)
            self.names.append(name)
        return self.ids[name]


class SampleIndex:
    """One rollouts file: offset, key (step, index), step, reward (NaN when unscored), source
    and verifier."""

    def __init__(self, path: Path, name: str | None = None):
        self.path = Path(path)
        self.tail = JsonlTail(path)
        self.bad = BadRows(name or self.path.name)
        self.clear()

    def clear(self) -> None:
        self.offset, self.key, self.step = array("q"), array("q"), array("q")
        self.reward, self.source, self.verifier = array("d"), array("i"), array("i")
        self.sources, self.verifiers = _Codes(), _Codes()
        self.bad.clear()

    def refresh(self) -> None:
        reset, lines = self.tail.poll()
        if reset:
            self.clear()
        read_rows(lines, self.bad, rollout_row, self._take)

    def _take(self, offset: int, kept: tuple) -> None:
        key, step, reward, source, verifier = kept
        self.offset.append(offset)
        self.key.append(key)
        self.step.append(step)
        self.reward.append(reward)
        self.source.append(self.sources.code(source))
        self.verifier.append(self.verifiers.code(verifier))

    def counts(self, codes: _Codes, column: array) -> dict[str, int]:
        """How many samples each name (source or verifier) has."""
        found = np.bincount(np.asarray(column, dtype=np.int64), minlength=len(codes.names)) if len(column) else []
        return {name: int(n) for name, n in zip(codes.names, found)}

    def __len__(self) -> int:
        return len(self.offset)

    def position(self, sample_id: str) -> int | None:
        """Where the sample's (last) line is in the index."""
        key = sample_key(sample_id)
        hits = np.flatnonzero(np.array(self.key) == key) if key is not None else []
        return int(hits[-1]) if len(hits) else None

    def find(self, sample_id: str) -> dict | None:
        at = self.position(sample_id)
        return None if at is None else read_line(self.path, self.offset[at])


class ScoreboardIndex:
    """scoreboard.jsonl: per GRM entry its stage, key, offset and rubric (texts held once per
    distinct rubric, for the criterion filter)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.tail = JsonlTail(path)
        self.bad = BadRows(self.path.name)
        self.clear()

    def clear(self) -> None:
        self.stage, self.key, self.offset, self.rubric = array("i"), array("q"), array("q"), array("i")
        self.stages, self.rubrics = _Codes(), _Codes()  # rubric: tuple of criterion texts
        self.bad.clear()

    def refresh(self) -> None:
        reset, lines = self.tail.poll()
        if reset:
            self.clear()
        read_rows(lines, self.bad, scoreboard_row, self._take)

    def _take(self, offset: int, kept: tuple) -> None:
        key, stage, texts = kept
        self.stage.append(self.stages.code(stage))
        self.key.append(key)
        self.offset.append(offset)
        self.rubric.append(self.rubrics.code(texts))

    def of_stage(self, stage: str) -> np.ndarray:
        """Positions of the stage's entries."""
        code = self.stages.ids.get(stage)
        return np.flatnonzero(np.array(self.stage) == code) if code is not None else np.zeros(0, dtype=np.int64)

    def keys_matching(self, stage: str, text: str) -> np.ndarray:
        """Keys of the stage's samples whose rubric has a criterion containing `text`."""
        wanted = [i for i, texts in enumerate(self.rubrics.names) if any(text.lower() in t.lower() for t in texts)]
        at = self.of_stage(stage)
        return np.array(self.key)[at[np.isin(np.array(self.rubric)[at], wanted)]]

    def criteria_counts(self, stage: str, keys: list[int | None]) -> list[int]:
        """Criteria in the rubric of each of `keys` (a page's samples; None: an id that is not
        STEP-INDEX), 0 for a sample without an entry."""
        at = self.of_stage(stage)
        at = at[np.isin(np.array(self.key)[at], [k for k in keys if k is not None])]
        found = dict(zip(np.array(self.key)[at].tolist(), np.array(self.rubric)[at].tolist()))
        return [len(self.rubrics.names[found[k]]) if k in found else 0 for k in keys]

    def entry(self, stage: str, sample_id: str) -> dict | None:
        at = self.of_stage(stage)
        hits = at[np.array(self.key)[at] == sample_key(sample_id)]
        return read_line(self.path, self.offset[hits[-1]]) if len(hits) else None


def parse_steps(text: str) -> list[tuple[int, int]]:
    """`3,7-9,12` as ranges [(3, 3), (7, 9), (12, 12)]; ValueError names a bad part."""
    ranges = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, dash, hi = part.partition("-")
        try:
            ranges.append((int(lo), int(hi) if dash else int(lo)))
        except ValueError:
            raise ValueError(f"steps: {part!r} is not a step or a range A-B") from None
    return ranges


def select(index: SampleIndex, board: ScoreboardIndex, stage: str, f: dict) -> np.ndarray:
    """Positions of the index's samples that pass the filters, in file order."""
    step, reward = np.array(index.step), np.array(index.reward)
    mask = np.ones(len(index), dtype=bool)
    if f.get("step") is not None:
        mask &= step == f["step"]
    if f.get("steps"):
        mask &= _within(step, f["steps"])
    if f.get("flag_steps") is not None:  # a health flag's steps: none fired, nothing matches
        mask &= _within(step, f["flag_steps"])
    for name, codes, column in (("source", index.sources, index.source), ("verifier", index.verifiers, index.verifier)):
        if f.get(name):
            code = codes.ids.get(f[name])
            mask &= np.asarray(column) == (-1 if code is None else code)
    with np.errstate(invalid="ignore"):  # unscored samples (NaN) pass no reward bound
        if f.get("min") is not None:
            mask &= reward >= f["min"]
        if f.get("max") is not None:
            mask &= reward <= f["max"]
    if f.get("criterion"):
        mask &= np.isin(np.array(index.key), board.keys_matching(stage, f["criterion"]))
    return np.flatnonzero(mask)


def _within(step: np.ndarray, ranges: list) -> np.ndarray:
    inside = np.zeros(len(step), dtype=bool)
    for lo, hi in ranges:
        inside |= (step >= lo) & (step <= hi)
    return inside


def page_of(matched: np.ndarray, page: int, size: int = PAGE) -> np.ndarray:
    """Page 0 is the newest `size` matches, page 1 the ones before, ...; each newest first."""
    end = len(matched) - page * size
    return matched[max(0, end - size) : max(0, end)][::-1]


@overload
def plain(value: dict) -> dict: ...
@overload
def plain(value: object) -> object: ...
def plain(value: object) -> object:
    """JSON the browser parses: a non-finite float (Python's json reads NaN) becomes a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def slim(row: dict, criteria: int) -> dict:
    return {
        "sample": row.get("sample"),
        "step": row.get("step"),
        "source": row.get("source"),
        "verifier": row.get("verifier"),
        "reward": plain(row.get("reward")),
        "ok": row.get("ok", True),
        "family": row.get("family"),
        "reason": str(row.get("reason", ""))[:160],
        "tokens": row.get("response_tokens"),
        "criteria": criteria,
    }


def read_page(index: SampleIndex, positions: np.ndarray) -> list[dict]:
    rows = []
    with index.path.open("rb") as f:
        for i in positions.tolist():
            f.seek(index.offset[i])
            row = parse(f.readline())
            if row is not None:
                rows.append(row)
    return rows
