"""The rollout engines of a run, and one partial-rollout iteration over them.

Trajectories are spread over the engines; each engine stops once its share of the
`lambda` fraction has finished and returns the rest cut. If an engine actor dies, the
trajectories it held are left exactly as they were before the iteration (they continue
in a later one), and a new engine with the current weights takes its place. An
iteration can be started and collected later (`rollout.overlap`: the engines generate
while the trainer trains).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from posttrain.rollout.queue import Trajectory
from posttrain.types import GenerationRequest, SamplingSettings

T = TypeVar("T")


@dataclass
class Iteration:
    """An iteration sent to the engines and not yet collected."""

    shares: list[list[Trajectory]]  # per engine, the trajectories it was given
    refs: dict[int, ray.ObjectRef]  # engine index -> its pending completions
    version: int  # the policy version the engines serve while generating them
    started: float
    busy_before: list[float]
    trajs: list[Trajectory]


class EnginePool:
    def __init__(self, engines: list, start_engine: Callable[[int], object]):
        self.engines = engines
        self.start_engine = start_engine
        self.restarts = 0
        self.on_restart: Callable[[object], None] | None = None  # pushes current weights

    def busy_seconds(self) -> list[float]:
        return [info["busy_seconds"] for info in ray.get([e.info.remote() for e in self.engines])]

    def run_iteration(
        self, trajs: list[Trajectory], sampling: SamplingSettings, lam: float, version: int
    ) -> dict[str, float]:
        """Generate for `trajs` in place: finished ones get their finish reason, the rest
        keep their prefix and wait. Returns timing facts."""
        return self.finish_iteration(self.start_iteration(trajs, sampling, lam, version))

    def start_iteration(
        self, trajs: list[Trajectory], sampling: SamplingSettings, lam: float, version: int
    ) -> Iteration:
        """Send `trajs` to the engines and return at once; `finish_iteration` collects them.
        Until then the trajectories are untouched (so an engine lost meanwhile loses none)."""
        started = time.perf_counter()
        busy_before = self.busy_seconds()
        shares: list[list[Trajectory]] = [[] for _ in self.engines]
        for i, traj in enumerate(trajs):
            shares[i % len(self.engines)].append(traj)
        refs = {}
        for index, (engine, share) in enumerate(zip(self.engines, shares)):
            if share:
                requests = [
                    GenerationRequest(t.prompt_ids + tuple(t.response_ids), 1, t.max_tokens - t.model_tokens)
                    for t in share
                ]
                refs[index] = engine.generate_partial.remote(requests, sampling, math.ceil(lam * len(share)))
        return Iteration(shares, refs, version, started, busy_before, trajs)

    def finish_iteration(self, it: Iteration) -> dict[str, float]:
        """Wait for an iteration and extend its trajectories; an engine that died is replaced
        and its share left as it was, to continue in a later iteration."""
        waited = time.perf_counter()
        lost = 0
        for index, ref in it.refs.items():
            try:
                completions = ray.get(ref)
            except RayActorError:
                lost += len(it.shares[index])
                self._replace(index)
                continue
            for traj, c in zip(it.shares[index], completions):
                traj.extend(c.token_ids, c.logprobs, it.version, None if c.finish_reason == "cut" else c.finish_reason)
        now = time.perf_counter()
        busy = sum(max(0.0, after - before) for after, before in zip(self.busy_seconds(), it.busy_before))
        return {
            "wall": now - it.started,
            "waited": now - waited,
            "busy": busy,
            "engines": float(len(self.engines)),
            "requeued_by_engine_death": float(lost),
        }

    def _replace(self, index: int) -> None:
        try:
            ray.kill(self.engines[index])
        except Exception:  # already gone
            pass
        self.engines[index] = self.start_engine(index)
        self.restarts += 1
        if self.on_restart:
            self.on_restart(self.engines[index])

    def on_every_engine(self, push: Callable[[list], T], attempts: int = 3) -> T:
        """Run `push(engines)` (a weight sync, a checkpoint load). If an engine died or hung
        meanwhile, the dead ones are replaced and `push` runs again on all: an engine lost
        at that moment costs a restart, not the run. A failure while every engine answers
        (a trainer rank died) is raised as it is."""
        for attempt in range(attempts):
            try:
                return push(self.engines)
            except (RayActorError, GetTimeoutError):
                if attempt + 1 == attempts or not self.revive():
                    raise
                print(
                    f"[engines] an engine died during a weight push: replaced, pushing again "
                    f"(try {attempt + 2} of {attempts})",
                    flush=True,
                )
        raise AssertionError("unreachable")

    def revive(self, timeout: float = 120.0) -> int:
        """Replace every engine that died (an actor error on a ping), without pushing weights:
        the caller syncs them next. Returns how many were replaced."""
        replaced = 0
        for index, engine in enumerate(self.engines):
            try:
                ray.get(engine.info.remote(), timeout=timeout)
            except Exception:  # noqa: BLE001 - died, OOM-killed, unreachable: any failed ping replaces it
                try:
                    ray.kill(engine)
                except Exception:  # already gone
                    pass
                self.engines[index] = self.start_engine(index)
                self.restarts += 1
                replaced += 1
        return replaced

    def shutdown(self) -> None:
        for engine in self.engines:
            ray.kill(engine)
