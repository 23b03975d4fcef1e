"""The queue's sample accounting of an RL stage, checked against what the run saved.

Every metrics row carries drawn = trained + queued + dropped, but the queue logs that row
only after its own check of the same equation passed, so asserting it again proves nothing.
The rollouts file is a second, independent record: one row per sample of every group that
finished, written as the step is logged. Each finished sample was either trained or dropped
after scoring (its reward flagged, its response empty, or, under dynamic sampling, its
group without signal), so through every step

    trained + dropped/reward_flagged + dropped/empty_response + dropped/zero_signal
        == rollouts rows so far,

and each group there has exactly group_size rows. A sample trained twice, trained but not
counted, counted but never scored, or a group split, breaks it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import orjson

AFTER_SCORING = (
    "samples/dropped/reward_flagged",
    "samples/dropped/empty_response",
    "samples/dropped/zero_signal",  # dynamic sampling sets a scored group with no signal aside
)


def jsonl(path: Path) -> list[dict]:
    """Every row of a JSON-lines file; orjson, as the dashboard reads them: a long run's
    rollouts hold a million rows (tests/scale_run.py), too many for json's decoder."""
    return [_row(line) for line in Path(path).read_bytes().splitlines() if line.strip()]


def _row(line: bytes) -> dict:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:  # NaN or Infinity, as json.dumps writes them: json's reader takes them
        return json.loads(line)


def assert_accounting_matches_rollouts(run: Path, stage: str, group_size: int) -> list[dict]:
    """The stage's metrics rows, in step order, after checking them against its rollouts."""
    rows = jsonl(Path(run) / "metrics.jsonl")
    return _check_books(stage, rows, jsonl(Path(run) / "rollouts" / f"{stage}.jsonl"), group_size)


def _check_books(stage: str, rows: list[dict], samples: list[dict], group_size: int) -> list[dict]:
    metrics = sorted((r for r in rows if r["stage"] == stage), key=lambda r: r["step"])
    assert metrics and samples, f"{stage}: no metrics rows or no rollouts"
    groups = Counter((r["step"], r["group"]) for r in samples)
    assert set(groups.values()) == {group_size}, f"{stage}: groups of other sizes than {group_size}: {groups}"
    per_step = Counter(r["step"] for r in samples)
    assert set(per_step) <= {r["step"] for r in metrics}, f"{stage}: rollouts of steps never logged"
    saved = 0
    for row in metrics:
        saved += per_step[row["step"]]
        scored = row["samples/trained"] + sum(row.get(key, 0.0) for key in AFTER_SCORING)
        assert scored == saved, f"{stage} step {row['step']}: trained + dropped after scoring {scored} != {saved} saved"
        assert row["samples/drawn"] >= saved + row["samples/queued"], row
    return metrics


def _booked_stages(rows: list[dict]) -> list[str]:
    """The run's stages that keep queue books (their metrics rows count drawn samples)."""
    return sorted({r["stage"] for r in rows if "samples/drawn" in r and "samples/trained" in r})


def _check_run(run: Path) -> list[str]:
    """Each booked stage of one run checked, every file read once; each stage's group size
    is the one its rollouts file holds most (every group must have it)."""
    rows, failures = jsonl(run / "metrics.jsonl"), []
    for stage in _booked_stages(rows):
        path = run / "rollouts" / f"{stage}.jsonl"
        samples = jsonl(path) if path.is_file() else []
        sizes = Counter((r["step"], r["group"]) for r in samples)
        if not sizes:
            continue
        try:
            _check_books(stage, rows, samples, max(sizes.values()))
        except AssertionError as error:
            failures.append(f"{run} stage {stage}: {error}")
    return failures


def check_runs_under(folder: Path, seen: set[Path]) -> list[str]:
    """Every run folder under `folder` not in `seen` (a `metrics.jsonl` beside a `rollouts/`),
    each RL, expert and MOPD stage checked by `assert_accounting_matches_rollouts`: what fails."""
    failures = []
    for metrics in sorted(Path(folder).rglob("metrics.jsonl")):
        run = metrics.parent
        if run in seen or not (run / "rollouts").is_dir():
            continue
        seen.add(run)
        try:
            failures += _check_run(run)
        except json.JSONDecodeError:  # a file a test broke on purpose (the dashboard's error paths)
            continue
    return failures
