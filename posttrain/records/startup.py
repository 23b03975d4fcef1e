"""Start-up by phase: the seconds from `posttrain run` to a stage's first step, written in
that step's metrics row as `startup/PHASE_s` with `startup/total_s`. The process-wide
phases (preflight, Ray, the slot's placement and actor starts) go to the first stage that
reaches a step; each stage adds its own (data, trainer ranks loading, engines ready,
first weight push), and its total counts from the process's start (the first stage) or
from its own start."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

PREFIX = "startup/"


def process_started() -> float:
    """The wall-clock time this process started (the interpreter's own start-up included)."""
    import psutil

    return psutil.Process().create_time()


class StartupClock:
    """Phases of start-up not yet written to a metrics row, and where they count from."""

    def __init__(self, origin: float | None = None):
        self.origin = origin  # wall-clock time the phases count from; None: each stage's own start
        self.phases: dict[str, float] = {}
        self.lock = threading.Lock()  # expert jobs reach their first step in threads of their own
        self.stages = 0  # stages begun in this process

    def pipeline_begins(self) -> None:
        """A pipeline starts in this process: nothing of an earlier one (a test's) is carried."""
        with self.lock:
            self.phases, self.stages = {}, 0

    def stage_begins(self) -> None:
        """A stage starts (before its slot opens, with `ray.placement: per_stage`). The first
        keeps the process's origin and phases; a later one counts from now, and phases left
        by a stage that logged no step (synthesis, eval) are not its own."""
        with self.lock:
            if self.stages:
                self.origin, self.phases = time.time(), {}
            self.stages += 1

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase `name` (added up where it runs more than once)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            with self.lock:
                self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - started

    def take(self, stage_started: float, own: dict[str, float]) -> dict[str, float]:
        """The row of a stage's first step: the phases pending here (taken once), the stage's
        `own` and the total since the origin (or since `stage_started`)."""
        with self.lock:
            phases, origin = {**self.phases, **own}, self.origin or stage_started
            self.phases, self.origin = {}, None
        row = {f"{PREFIX}{name}_s": seconds for name, seconds in phases.items()}
        row[f"{PREFIX}total_s"] = time.time() - origin
        return row


class StageStartup:
    """One stage's own start-up phases, kept until its first step is logged."""

    def __init__(self, clock: StartupClock):
        self.clock, self.started = clock, time.time()
        self.own = StartupClock()
        self.row: dict[str, float] | None = None

    def phase(self, name: str):
        return self.own.phase(name)

    def first_step(self) -> dict[str, float]:
        """Call as the first step begins: the start-up row it will carry (empty after)."""
        if self.row is not None:
            return {}
        self.row = self.clock.take(self.started, self.own.phases)
        return self.row


CLOCK = StartupClock()
"""The process's clock: `posttrain run` sets its origin to the process's start."""
