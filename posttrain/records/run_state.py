"""The run folder's state across stops: claiming a folder for a new run, finding a stage's
newest whole checkpoint, and setting aside the rows logged past a resume point (they are
logged again). Used by the pipeline and by the experts stage's job retries."""

from __future__ import annotations

import json
import time
from pathlib import Path

from posttrain.records.metrics import RUN_FILES_LOCK
from posttrain.records.rollouts import SCOREBOARD, rollouts_path

SFT_STATE = "sft_state.json"  # in each SFT checkpoint: its step and data order
ROLLOUT_STATE = "rollout_state.json"  # in each RL or MOPD checkpoint (an expert job's too): step, queue, sampler


def claim_run_dir(run_dir: Path) -> Path | None:
    """Make `run_dir` empty for a new run. A folder that already holds something is moved
    aside to `RUN_DIR.old-TIMESTAMP`, never overwritten; returns where it went."""
    moved = None
    if run_dir.exists() and any(run_dir.iterdir()):
        moved = run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        suffix = 1
        while moved.exists():
            moved = moved.with_name(f"{moved.name.split('~')[0]}~{suffix}")
            suffix += 1
        run_dir.rename(moved)
    run_dir.mkdir(parents=True, exist_ok=True)
    return moved


def latest_checkpoint(stage_dir: Path, state_file: str) -> Path | None:
    """The newest complete checkpoint of a stage (its state file, which the stage registry
    names for each type, is written inside the atomic rename, so a folder that has it is whole)."""
    found = sorted(p for p in stage_dir.glob("step_*") if (p / state_file).is_file())
    return found[-1] if found else None


def set_aside_rows(path: Path, replaced: Path, stage: str, after_step: int) -> int:
    """Rows of `stage` past the resume point are redone: move them from `path` to `replaced`."""
    if not path.exists():
        return 0
    keep, moved = [], []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:  # a line torn by the crash: it is redone
            row = {"stage": stage, "step": after_step + 1}
        (moved if row and row["stage"] == stage and row["step"] > after_step else keep).append(line)
    if moved:
        with replaced.open("a") as f:
            f.write("\n".join(moved) + "\n")
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        tmp.replace(path)
    return len(moved)


def set_aside_metrics(run_dir: Path, stage: str, after_step: int) -> int:
    """Metrics, saved rollouts and scoreboard rows of `stage` past the resume point are
    redone: move them to their `*.replaced.jsonl` files. Returns the metrics rows moved."""
    rollouts = rollouts_path(run_dir, stage)
    with RUN_FILES_LOCK:  # expert jobs of other slots may be writing these files
        set_aside_rows(rollouts, rollouts.with_name(f"{rollouts.stem}.replaced.jsonl"), stage, after_step)
        set_aside_rows(run_dir / SCOREBOARD, run_dir / "scoreboard.replaced.jsonl", stage, after_step)
        return set_aside_rows(run_dir / "metrics.jsonl", run_dir / "metrics.replaced.jsonl", stage, after_step)
