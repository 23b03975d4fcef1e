"""Every metrics row to Weights & Biases as well: one wandb run per job (a stage, or one
expert job when the row names a `job`), grouped by pipeline run, with the resolved config.

Offline by default (files under RUN_DIR/wandb, no account); online when the environment
sets WANDB_MODE or WANDB_API_KEY. wandb runs in a background thread so that its start-up
never holds up a step, and a wandb failure is a warning: metrics.jsonl goes on.
The API key stays in the environment, where wandb reads it; nothing here writes it.
"""

from __future__ import annotations

import atexit
import math
import os
import queue
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from posttrain.config import WandbConfig

if TYPE_CHECKING:  # wandb itself is imported on the background thread, at the first row
    import wandb


def wandb_mode(setting: str, environ: Mapping[str, str]) -> str:
    """The mode passed to wandb.init. Explicit, read here: wandb reads its environment once
    per process, so a later change of WANDB_MODE would not reach it."""
    if setting != "auto":
        return setting
    if environ.get("WANDB_MODE"):
        return environ["WANDB_MODE"]
    return "online" if environ.get("WANDB_API_KEY") else "offline"


def job_of(row: dict) -> str:
    """The job a row belongs to: its stage, or one job of a stage (`experts/general-max`)."""
    return f"{row['stage']}/{row['job']}" if row.get("job") else row["stage"]


def top_stage(row: dict) -> str:
    """The pipeline stage of a row (`experts` for `experts/general-max`)."""
    return row["stage"].split("/")[0]


def numeric(row: dict) -> dict[str, float]:
    """The row's metrics wandb can plot (finite numbers; `stage`, `job`, `time` are the run's)."""
    skip = ("stage", "job", "step", "time")
    return {
        k: v
        for k, v in row.items()
        if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


class WandbSink:
    """Feed rows with `log(row)`; `close()` finishes every run (waits up to `timeout` s)."""

    def __init__(self, config: WandbConfig, run_dir: Path, group: str, resolved: dict, stream: TextIO | None = None):
        self.config, self.run_dir, self.group, self.resolved = config, Path(run_dir), group, resolved
        self.mode = wandb_mode(config.mode, dict(os.environ))
        self.stream = stream or sys.stderr
        self.runs: dict[str, wandb.Run] = {}
        self.last_step: dict[str, int] = {}
        self.stage_of: dict[str, str] = {}  # job -> its pipeline stage
        self.started = False
        self.failed: str | None = None
        self._queue: queue.Queue[dict | None] = queue.Queue()  # None: close
        self._thread = threading.Thread(target=self._work, name="wandb-sink", daemon=True)
        self._thread.start()
        self._closed = False
        atexit.register(self.close, 15.0)  # a run that raised still finishes its wandb runs

    def log(self, row: dict) -> None:
        if self.failed is None:
            self._queue.put(dict(row))

    def close(self, timeout: float = 60.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._warn(f"still busy after {timeout:.0f}s at close; its last rows may be missing")

    # ------------------------------------------------------------ the background thread

    def _work(self) -> None:
        while (row := self._queue.get()) is not None:
            if self.failed is None:
                self._guard(self._log, row)
        for job in list(self.runs):
            self._guard(self._finish, job)
        if self.started:
            import wandb

            self._guard(wandb.teardown)  # waits for wandb's service to write every file out

    def _guard(self, fn: Callable[..., object], *args: object) -> None:
        try:
            fn(*args)
        except Exception as exc:  # wandb is optional: warn once, keep metrics.jsonl going
            self.failed = f"{type(exc).__name__}: {exc}"
            self._warn(f"{self.failed}; metrics go to metrics.jsonl only from here")

    def _warn(self, text: str) -> None:
        print(f"wandb: {text}", file=self.stream, flush=True)

    def _log(self, row: dict) -> None:
        job = job_of(row)
        if job not in self.runs:
            stage = top_stage(row)
            for other in [j for j in self.runs if self.stage_of[j] != stage]:
                self._finish(other)  # stages run one after another: a new one ends the earlier ones' runs
            self.runs[job] = self._start(job, row)
            self.stage_of[job] = stage
        step = row.get("step")
        metrics = numeric(row) | {"stage_step": step}
        if isinstance(step, int) and step > self.last_step.get(job, -1):
            self.runs[job].log(metrics, step=step)
            self.last_step[job] = step
        else:  # a step logged again (a resume) or none: wandb's own step counter moves on
            self.runs[job].log(metrics)

    def _start(self, job: str, row: dict) -> wandb.Run:
        import wandb

        self.started = True
        settings = wandb.Settings(
            silent=True,
            console="off",
            save_code=False,
            disable_git=True,
            disable_job_creation=True,
            x_disable_stats=True,
            x_disable_meta=True,
            x_disable_machine_info=True,
            x_save_requirements=False,
            init_timeout=30,
        )
        return wandb.init(
            project=self.config.project,
            entity=self.config.entity,
            group=self.group,
            name=job,
            id=f"{self.group}-{job.replace('/', '-')}-{uuid.uuid4().hex[:6]}",
            job_type=top_stage(row),
            dir=str(self.run_dir),
            # WANDB_MODE may name any mode wandb's Settings take (dryrun, run), wider than init's
            # annotation; wandb validates it, and a bad one is a warning like any wandb failure
            mode=self.mode,  # pyright: ignore[reportArgumentType]
            reinit="create_new",
            settings=settings,
            config={
                "pipeline": self.resolved,
                "stage": row["stage"],
                "job": job,
                "run_dir": str(self.run_dir.resolve()),
            },
        )

    def _finish(self, job: str) -> None:
        run = self.runs.pop(job)
        run.finish()
