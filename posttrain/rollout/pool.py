"""The rollout engines of a run, and one partial-rollout iteration over them.

Trajectories are spread over the engines; each engine stops once its share of the
`lambda` fraction has finished and returns the rest cut. If an engine actor dies, the
trajectories it held are left exactly as they were before the iteration (they continue
in a later one), and a new engine with the current weights takes its place. An
iteration can be started and collected later (`rollout.overlap`: the engines generate
while the trainer trains). An engine is waited for until it has started (loaded, compiled,
graphs captured; `rollout.start_timeout_s`) before anything is pushed to it: a push's own
deadline counts only once every engine is ready.
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
START_TIMEOUT_S = 1800.0  # rollout.start_timeout_s's default


class EnginesTimedOut(GetTimeoutError):
    """A push that some engines did not answer within its deadline: those engines are at
    fault (hung, or stuck in a collective), and are replaced like dead ones."""

    def __init__(self, message: str, engines: list):
        super().__init__(message)
        self.engines = engines


class EngineStartTimeout(RuntimeError):
    """An engine that did not become ready within `rollout.start_timeout_s`."""


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
    def __init__(self, engines: list, start_engine: Callable[[int], object], start_timeout_s: float = START_TIMEOUT_S):
        self.engines = engines
        self.start_engine = start_engine
        self.start_timeout_s = start_timeout_s
        self.restarts = 0
        self.on_restart: Callable[[object], None] | None = None  # pushes current weights
        now = time.monotonic()
        self.starting: dict[int, float] = {i: now for i in range(len(engines))}  # index -> when it was started

    def wait_ready(self) -> None:
        """Wait until every engine still starting answers (its constructor has returned: the
        model loaded, compiled, CUDA graphs captured), each up to `start_timeout_s` from its
        start. One that dies while starting raises its RayActorError; one that outlasts the
        deadline is an EngineStartTimeout naming the key."""
        for index in sorted(self.starting):
            ping = self.engines[index].info.remote()
            left = self.starting[index] + self.start_timeout_s - time.monotonic()
            if not ray.wait([ping], timeout=max(left, 0.0))[0]:
                raise EngineStartTimeout(
                    f"engine {index} was not ready {self.start_timeout_s:.0f} s after it started (loading, "
                    "compiling, capturing CUDA graphs): raise rollout.start_timeout_s, or set "
                    "rollout.enforce_eager: true to skip compilation"
                )
            del self.starting[index]  # dead or alive, it has stopped starting: `revive` replaces a dead one
            ray.get(ping)  # raises its death

    def _start(self, index: int) -> None:
        self.engines[index] = self.start_engine(index)
        self.starting[index] = time.monotonic()
        self.restarts += 1

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
        self._start(index)
        if self.on_restart:
            self.wait_ready()  # the push's deadline must not count the new engine's start
            self.on_restart(self.engines[index])

    def on_every_engine(self, push: Callable[[list], T], attempts: int = 3) -> T:
        """Run `push(engines)` (a weight sync, a checkpoint load) once every engine has
        started. If an engine died meanwhile, or the push timed out (an engine fault: those
        it names, EnginesTimedOut, and those that no longer answer are replaced), `push` runs
        again on all: an engine lost or stuck at that moment costs a restart, not the run. A
        failure while every engine answers (a trainer rank died) is raised as it is."""
        for attempt in range(attempts):
            try:
                self.wait_ready()
                return push(self.engines)
            except GetTimeoutError as exc:  # EnginesTimedOut names the engines that missed it
                if attempt + 1 == attempts:
                    raise
                replaced = self.replace_engines(getattr(exc, "engines", [])) + self.revive()
                what = f"a push timed out ({exc}); {replaced} engine(s)"
            except RayActorError as exc:
                if attempt + 1 == attempts or not (replaced := self.revive()):
                    raise
                what = f"{replaced} engine(s) died during a push ({type(exc).__name__})"
            print(f"[engines] {what}: replaced, pushing again (try {attempt + 2} of {attempts})", flush=True)
        raise AssertionError("unreachable")

    def replace_engines(self, engines: list) -> int:
        """Replace these engine actors (killed, started again), without pushing weights."""
        ids = {e._actor_id for e in engines}
        stuck = [i for i, e in enumerate(self.engines) if e._actor_id in ids]
        for index in stuck:
            try:
                ray.kill(self.engines[index])
            except Exception:  # noqa: BLE001 - already gone
                pass
            self._start(index)
        return len(stuck)

    def revive(self, timeout: float = 120.0) -> int:
        """Replace every started engine that died (an actor error on a ping), without pushing
        weights: the caller syncs them next (engines still starting are waited for by the
        push, not pinged here). Returns how many were replaced."""
        replaced = 0
        for index, engine in enumerate(self.engines):
            if index in self.starting:
                continue
            try:
                ray.get(engine.info.remote(), timeout=timeout)
            except Exception:  # noqa: BLE001 - died, OOM-killed, unreachable: any failed ping replaces it
                try:
                    ray.kill(engine)
                except Exception:  # already gone
                    pass
                self._start(index)
                replaced += 1
        return replaced

    def shutdown(self) -> None:
        for engine in self.engines:
            ray.kill(engine)
