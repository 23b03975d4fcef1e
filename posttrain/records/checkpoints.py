"""Checkpoint retention and the disk the checkpoints take.

A stage's `keep_last: N` keeps its newest N step checkpoints, `keep_best: {metric, mode}`
also the one whose step logged the best value of a metric; `retain` runs after each save
and deletes the other step checkpoints of the stage. What a resume needs is never deleted:
the newest whole checkpoint (a resume continues from it), `final` (a finished stage's
output, never a step folder) and the best one (recorded in `best.json` beside them). A
folder still being written (`.step_N.tmp`) or one without its state file (not whole) is
left alone.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from posttrain.config import KeepBest
from posttrain.records.metrics import write_json_atomic

BEST_FILE = "best.json"


def step_of(folder: Path) -> int:
    return int(folder.name.removeprefix("step_"))


def step_checkpoints(stage_dir: Path, state_file: str) -> list[Path]:
    """The stage's whole step checkpoints, oldest first."""
    found = [p for p in stage_dir.glob("step_*") if p.is_dir() and (p / state_file).is_file()]
    return sorted(found, key=step_of)


def metric_by_step(run_dir: Path, stage: str, metric: str) -> dict[int, float]:
    """`metric` of each logged step of `stage` (the last row of a step wins: a resumed
    stage logs its steps again)."""
    path = Path(run_dir) / "metrics.jsonl"
    out: dict[int, float] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        value = row.get(metric) if row.get("stage") == stage else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[int(row["step"])] = float(value)
    return out


def best_checkpoint(
    folders: list[Path], run_dir: Path, stage: str, metric: str, mode: str
) -> tuple[Path, float] | None:
    values = metric_by_step(run_dir, stage, metric)
    scored = [(values[step_of(f)], f) for f in folders if step_of(f) in values]
    if not scored:
        return None
    value, folder = (max if mode == "max" else min)(scored, key=lambda pair: (pair[0], step_of(pair[1])))
    return folder, value


def retain(
    stage_dir: Path,
    state_file: str,
    keep_last: int | None,
    keep_best: KeepBest | None = None,
    run_dir: Path | None = None,
    stage: str | None = None,
) -> list[Path]:
    """Delete the step checkpoints of a stage that `keep_last` / `keep_best` do not keep;
    returns the folders deleted."""
    if keep_last is None and keep_best is None:
        return []
    folders = step_checkpoints(stage_dir, state_file)
    if not folders:
        return []
    keep = {folders[-1]}  # the newest: where a resume continues
    if keep_last is not None:
        keep.update(folders[-keep_last:])
    else:
        keep.update(folders)
    if keep_best is not None and run_dir is not None and stage is not None:  # the best needs the stage's metrics
        best = best_checkpoint(folders, run_dir, stage, keep_best.metric, keep_best.mode)
        if best is not None:
            keep.add(best[0])
            write_json_atomic(
                stage_dir / BEST_FILE,
                {"checkpoint": best[0].name, "step": step_of(best[0]), "metric": keep_best.metric, "value": best[1]},
            )
    removed = [f for f in folders if f not in keep]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under `folder` (0 when it does not exist)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def checkpoint_disk(run_dir: Path) -> dict:
    """Disk the run's checkpoints take: in all, per stage, and the count of checkpoints."""
    root = Path(run_dir) / "checkpoints"
    stages = {}
    if root.is_dir():
        for stage_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            count = sum(1 for p in stage_dir.rglob("*") if p.is_dir() and (p.name == "final" or p.name[:5] == "step_"))
            stages[stage_dir.name] = {"bytes": folder_bytes(stage_dir), "checkpoints": count}
    return {"bytes": sum(s["bytes"] for s in stages.values()), "stages": stages}


def human_bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"


def retain_checkpoints(stage, run_dir: Path, state_file: str) -> list[Path]:
    """`retain` with a stage's own `keep_last` / `keep_best`, after one of its saves; says
    what it deleted."""
    keep_last, keep_best = getattr(stage, "keep_last", None), getattr(stage, "keep_best", None)
    stage_dir = Path(run_dir) / "checkpoints" / stage.name
    removed = retain(stage_dir, state_file, keep_last, keep_best, Path(run_dir), stage.name)
    if removed:
        print(f"[{stage.name}] deleted {len(removed)} old checkpoint(s) (keep_last: {keep_last})", flush=True)
    return removed
