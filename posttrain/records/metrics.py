"""Run-folder metrics and the live progress line.

`metrics.jsonl` gets one JSON object per line: `stage`, `step`, `time` (unix seconds)
and the metrics, flushed as written so that a crash loses at most the line in flight.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from pathlib import Path

# Expert jobs write the run folder's shared files (metrics, scoreboard) from their own
# threads, and a job that restarts rewrites them (rows past its checkpoint set aside):
# every write and rewrite holds this lock, and files are opened per write, never held.
RUN_FILES_LOCK = threading.RLock()


class MetricsLog:
    """Appends rows to metrics.jsonl, and hands each to `sink` (wandb) when there is one."""

    def __init__(self, run_dir: Path, sink=None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.sink = sink

    def log(self, stage: str, step: int, metrics: dict[str, float]) -> dict:
        row = {"stage": stage, "step": step, "time": round(time.time(), 3)}
        row.update({k: _clean(v) for k, v in metrics.items()})
        with RUN_FILES_LOCK, self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if self.sink is not None:
            self.sink.log(row)
        return row

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
            self.sink = None


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def write_json_atomic(path: Path, data) -> None:
    """Write JSON through a temp file and a rename: a crash leaves the old file or the new one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def read_metrics(run_dir: Path, stage: str | None = None) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if stage is None or r["stage"] == stage]


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(max(seconds, 0))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """One live line per stage: rewritten in place on a terminal, a line every 10% otherwise."""

    def __init__(self, stage: str, total: int, stream=None, live: bool = True):
        self.stage, self.total = stage, total
        self.stream = stream or sys.stderr
        self.live = live and self.stream.isatty()  # several jobs at once: lines, not a rewritten one
        self.started = time.perf_counter()
        self._last_tenth = -1

    def update(self, step: int, **values: float) -> None:
        now = time.perf_counter()
        elapsed = now - self.started
        if not hasattr(self, "_first"):
            self._first = (step, now)  # the first step carries start-up costs: rate from the next ones
        done, since = step - self._first[0], now - self._first[1]
        eta = since / done * (self.total - step) if done > 0 else float("nan")
        shown = " ".join(f"{k} {v:.3g}" for k, v in values.items())
        line = f"[{self.stage}] step {step}/{self.total} {shown} elapsed {_duration(elapsed)} ETA {_duration(eta)}"
        if self.live:
            self.stream.write("\r\033[K" + line)
            if step >= self.total:
                self.stream.write("\n")
        elif step * 10 // self.total != self._last_tenth or step >= self.total:
            self._last_tenth = step * 10 // self.total
            self.stream.write(line + "\n")
        self.stream.flush()
