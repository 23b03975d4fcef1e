"""The experts stage: one RL job per (domain, effort), run on slots of Ray resources.

Per domain the efforts form a chain: `max` starts from the stage's init checkpoint,
`high` from `max`'s final checkpoint and `low` from `high`'s, each annealing its budget
down from the previous effort's (docs/recipe.md). Jobs of different domains are independent.

Slots (posttrain/runtime/slots.py) are placement groups of one job's engines, trainer ranks
and judge; slot 0 is the pipeline's own, the others are asked for at the start and used
as Ray grants them (`parallel` at most). A job runs on a free ready slot, in a thread of
the driver; jobs without a free slot wait in order. Placement groups are reserved whole,
so waiting jobs hold nothing and cannot deadlock.

Each job checkpoints like an RL stage (`checkpoints/STAGE/DOMAIN-EFFORT/step_N`, then
`final`). If one of its actors dies, the job is tried again (`max_attempts`) from its
newest checkpoint on fresh trainer ranks and engines; a resumed pipeline does the same
for every unfinished job. `run_state.json` holds each job's status, checkpoint, node,
attempts and timings.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path

from posttrain.config import ExpertsStage
from posttrain.config.jobs import Job, expert_jobs
from posttrain.runtime.infra import Infra

ACTOR_ERRORS: tuple = ()  # filled on first use (ray import)


class ExpertsRunner:
    """Runs the jobs of one experts stage to the end; `run()` returns {job: final checkpoint}."""

    def __init__(
        self,
        stage: ExpertsStage,
        init_dir: Path,
        infra: Infra,
        model_dir: Path,
        entry: dict,
        save_state: Callable[[], None],
    ):
        self.stage, self.init_dir, self.infra, self.model_dir = stage, init_dir, infra, model_dir
        self.entry, self.save_state = entry, save_state
        self.jobs = expert_jobs(stage)
        states = entry.setdefault("jobs", {})
        for name, job in self.jobs.items():
            states.setdefault(
                name,
                {
                    "domain": job.domain,
                    "effort": job.effort,
                    "status": "pending",
                    "attempts": 0,
                    "resumed_from": [],
                    "deaths": [],
                },
            )
            if states[name]["status"] != "done":
                states[name]["status"] = "pending"  # running or failed when the driver stopped: go again
        self.slots: list = []
        self.waiting: dict[int, tuple[object, object]] = {}  # slot index -> (placement group, its ready ref)

    # ------------------------------------------------------------ slots

    def _ask_for_slots(self) -> None:
        from posttrain.runtime.slots import Slot, reserve

        main = Slot(
            index=0,
            pg=self.infra.pg,
            pool=self.infra.pool,
            trainers=self.infra.trainers,
            judge=self.infra.judge,
            node=self.infra.node,
        )
        self.slots = [main]
        wanted = self.stage.job_slots()
        for index in range(1, wanted):
            pg = reserve(self.infra.config, index, self.stage)
            self.waiting[index] = (pg, pg.ready())

    def _open_granted(self) -> None:
        import ray

        from posttrain.runtime.slots import open_slot

        for index, (pg, ready) in list(self.waiting.items()):
            if ray.wait([ready], timeout=0)[0]:
                del self.waiting[index]
                self.slots.append(open_slot(self.infra.config, self.model_dir, index, pg, self.stage))
                print(f"[{self.stage.name}] slot {index} granted on node {self.slots[-1].node}", flush=True)

    def _close_extra(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for slot in self.slots[1:]:
            slot.close()
        for pg, _ in self.waiting.values():
            remove_placement_group(pg)
        self.slots, self.waiting = self.slots[:1], {}

    # ------------------------------------------------------------ jobs

    def _runnable(self, running: set[str]) -> Job | None:
        states = self.entry["jobs"]
        for name, job in self.jobs.items():
            if states[name]["status"] == "pending" and name not in running:
                if job.after is None or states[job.after]["status"] == "done":
                    return job
        return None

    def _run_job(self, job: Job, slot) -> Path:
        """In a worker thread: the job's RL stage on `slot`, tried again from its newest
        checkpoint when one of its actors dies."""
        from posttrain.records.run_state import ROLLOUT_STATE, latest_checkpoint, set_aside_metrics
        from posttrain.stages.rl import run_rl

        global ACTOR_ERRORS
        if not ACTOR_ERRORS:  # an actor or its worker process died: killed, crashed, OOM-killed, node lost
            from ray import exceptions as rex

            from posttrain.rollout.pool import EnginesTimedOut

            ACTOR_ERRORS = tuple(
                getattr(rex, n)
                for n in (
                    "RayActorError",
                    "OutOfMemoryError",
                    "WorkerCrashedError",
                    "NodeDiedError",
                    "ActorUnavailableError",
                )
                if hasattr(rex, n)
            ) + (EnginesTimedOut,)  # engines stuck through every push of a try
        state = self.entry["jobs"][job.name]
        init = Path(self.entry["jobs"][job.after]["checkpoint"]) if job.after else self.init_dir
        infra = replace(self.infra, pool=slot.pool, trainers=slot.trainers, judge=slot.judge, live_progress=False)
        ckpt_dir = self.infra.run_dir / "checkpoints" / job.stage.name
        while True:
            resume = latest_checkpoint(ckpt_dir, ROLLOUT_STATE)
            step = json.loads((resume / ROLLOUT_STATE).read_text())["step"] if resume else 0
            moved = set_aside_metrics(self.infra.run_dir, job.stage.name, step)
            if resume or moved:
                state.setdefault("resumed_from", []).append(str(resume) if resume else "step 0")
                print(f"[{job.stage.name}] continuing from {resume or init} (step {step})", flush=True)
            try:
                return run_rl(job.stage, init, infra, resume)
            except ACTOR_ERRORS as exc:
                state["attempts"] = state.get("attempts", 0) + 1
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                if state["attempts"] >= self.stage.max_attempts:
                    raise RuntimeError(
                        f"job {job.name}: an actor died on each of {state['attempts']} tries; "
                        f"last: {type(exc).__name__}: {first}"
                    ) from exc
                state.setdefault("deaths", []).append(f"{type(exc).__name__}: {first}")
                print(
                    f"[{job.stage.name}] an actor died ({type(exc).__name__}: {first}): try {state['attempts'] + 1} "
                    f"of {self.stage.max_attempts} from the newest checkpoint",
                    flush=True,
                )
                slot.pool.revive()  # dead engines are replaced
                slot.trainers.restart()

    def run(self) -> dict[str, Path]:
        states = self.entry["jobs"]
        self._ask_for_slots()
        busy: dict[int, str] = {}  # slot index -> job name
        futures: dict[Future, tuple[Job, object]] = {}
        failures: list[str] = []
        with ThreadPoolExecutor(max_workers=max(1, len(self.waiting) + 1), thread_name_prefix="expert") as pool:
            try:
                while True:
                    self._open_granted()
                    for slot in self.slots:
                        if slot.index in busy or failures:
                            continue
                        job = self._runnable(set(busy.values()))
                        if job is None:
                            break
                        busy[slot.index] = job.name
                        states[job.name].update(
                            status="running",
                            node=slot.node,
                            slot=slot.index,
                            started=states[job.name].get("started", time.time()),
                        )
                        self.save_state()
                        print(
                            f"[{self.stage.name}] {job.name}: start on slot {slot.index} (node {slot.node})", flush=True
                        )
                        futures[pool.submit(self._run_job, job, slot)] = (job, slot)
                    if not futures:
                        break
                    done, _ = wait(futures, timeout=1.0, return_when=FIRST_COMPLETED)
                    for future in done:
                        job, slot = futures.pop(future)
                        del busy[slot.index]
                        self._finish(job, future, failures)
            finally:
                self._close_extra()
        if failures:
            raise RuntimeError(f"experts stage {self.stage.name}: " + "; ".join(failures))
        undone = [n for n, s in states.items() if s["status"] != "done"]
        if undone:
            raise RuntimeError(f"experts stage {self.stage.name}: jobs never ran: {', '.join(undone)}")
        return {name: Path(states[name]["checkpoint"]) for name in self.jobs}

    def _finish(self, job: Job, future: Future, failures: list[str]) -> None:
        state = self.entry["jobs"][job.name]
        state["finished"] = time.time()
        state["seconds"] = round(state["finished"] - state["started"], 1)
        error = future.exception()
        if error is None:
            state.update(status="done", checkpoint=str(future.result()))
            print(f"[{self.stage.name}] {job.name}: done in {state['seconds']}s", flush=True)
        else:
            state.update(status="failed", error=f"{type(error).__name__}: {str(error)[:1000]}")
            failures.append(f"{job.name}: {state['error']}")
            print(f"[{self.stage.name}] {job.name}: FAILED: {state['error']}", flush=True)
            traceback.print_exception(error)
        self.save_state()


def run_experts(
    stage: ExpertsStage, init_dir: Path, infra: Infra, model_dir: Path, entry: dict, save_state: Callable[[], None]
) -> dict[str, Path]:
    return ExpertsRunner(stage, init_dir, infra, model_dir, entry, save_state).run()
