"""The infrastructure a pipeline runs on: Ray, the rollout engine actors and the trainer
ranks, built once and shared by every stage."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from posttrain.config import PipelineConfig
from posttrain.records.metrics import MetricsLog

QUIET_ENV = {
    "VLLM_LOGGING_LEVEL": "WARNING",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONWARNINGS": "ignore",
    "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", ""),
}


# Ray starts a worker process per CPU as a driver connects, for tasks in the job's own
# runtime env; posttrain's actors each name their own (thread counts), so none of those workers
# is ever used: 1 s of CPU each (measured), taken from the ranks and engines that start beside.
NO_PRESTART = {"prestart_worker_first_driver": False, "enable_worker_prestart": False}


@dataclass
class Infra:
    config: PipelineConfig
    run_dir: Path
    trainers: object  # TrainerGroup
    pool: object  # EnginePool
    metrics: MetricsLog
    tokenizer: object
    judge: object = None  # the slot's JudgeSlot (GRM judge engine kept across stages), or None
    pg: object = None  # the placement group of these engines and trainers (slot 0)
    node: str = ""  # the node it sits on
    live_progress: bool = True


def start_ray(config: PipelineConfig, verbose: bool) -> None:
    """Start Ray here (or join `ray.address`) and print where its dashboard is."""
    line = _init_ray(config, verbose)
    if line:
        print(line, flush=True)


def _init_ray(config: PipelineConfig, verbose: bool) -> str | None:
    """`ray.init` as the config says; returns the dashboard line to print (None: Ray was up)."""
    import ray

    if ray.is_initialized():
        return None
    env = {k: v for k, v in QUIET_ENV.items() if v} if not verbose else {}
    if config.ray.address:
        context = ray.init(address=config.ray.address, log_to_driver=verbose, runtime_env={"env_vars": env})
        return dashboard_line(context.dashboard_url, "the cluster's")
    from posttrain.config.resources import slot_cpus

    needed = slot_cpus(config)  # one slot: engines, trainer ranks and judge (more slots need `ray.num_cpus`)
    context = ray.init(
        num_cpus=config.ray.num_cpus or max(os.cpu_count() or 1, int(needed + 0.999)),
        include_dashboard=config.ray.dashboard,
        object_store_memory=config.ray.object_store_gib * 2**30,
        log_to_driver=verbose,
        runtime_env={"env_vars": env},
        _system_config=NO_PRESTART,
    )
    return dashboard_line(context.dashboard_url if config.ray.dashboard else None, "local")


class RayStarting:
    """Ray brought up in a thread while the driver goes on with other work: a pipeline reads
    its task sources (imports, task generation: one core) while Ray's own processes start
    (GCS, raylet, agents: mostly the other core and waiting), instead of one after the other.
    `wait()` returns once Ray is up, raising what its start raised, and prints what Ray said
    as it started; `abandon()`, for a run refused before it starts, waits for the start to
    end and shuts Ray down, saying nothing: a refused run leaves no Ray process behind and
    prints its refusal alone.

    The thread outlives the start: Ray's processes are started with a parent-death signal,
    which Linux sends when the *thread* that started them ends (measured: GCS and raylet were
    killed as the thread returned, and the driver died a minute later, unable to reach GCS).
    Ray sets its SIGTERM handler (exit, so that `finally` blocks close the slots) only from
    the main thread: it is set here, in the caller's."""

    def __init__(self, config: PipelineConfig, verbose: bool):
        import signal
        import sys
        import threading

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # as ray.init sets it
        self.error: BaseException | None = None
        self.line: str | None = None
        self.held = _HeldLogs()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._start, args=(config, verbose), name="ray-start", daemon=True)
        self.thread.start()

    def _start(self, config: PipelineConfig, verbose: bool) -> None:
        import threading

        try:
            self.held.hold()
            self.line = _init_ray(config, verbose)
        except BaseException as exc:  # noqa: BLE001 - raised again by wait(), in the caller's thread
            self.error = exc
        finally:
            self.started.set()
        threading.Event().wait()  # never returns: Ray's processes live while this thread does

    def wait(self) -> None:
        self.started.wait()
        self.held.release(replay=True)
        if self.error is not None:
            raise self.error
        if self.line:
            print(self.line, flush=True)

    def abandon(self) -> None:
        import ray

        self.started.wait()
        if self.error is None:
            ray.shutdown()
        self.held.release(replay=False)


class _HeldLogs:
    """What Ray's driver logger says while it starts (its token and start lines), held back
    to be printed once the run goes on, or dropped with a refused run; its warning that the
    SIGTERM handler is not set is dropped (RayStarting sets it)."""

    def __init__(self):
        self.records: list = []
        self.handlers: list = []

    def filter(self, record) -> bool:
        held = any(r is record for r in self.records)  # one record passes each handler
        if not held and not str(record.msg).startswith("SIGTERM handler is not set"):
            self.records.append(record)
        return False

    def hold(self) -> None:
        import logging

        import ray  # noqa: F401 - sets up the "ray" logger's handlers

        self.handlers = list(logging.getLogger("ray").handlers)
        for handler in self.handlers:
            handler.addFilter(self)

    def release(self, replay: bool) -> None:
        for handler in self.handlers:
            handler.removeFilter(self)
        for record in self.records if replay else []:
            for handler in self.handlers:
                handler.handle(record)
        self.records, self.handlers = [], []


def dashboard_line(url: str | None, whose: str) -> str:
    if url:
        url = url if "://" in url else f"http://{url}"
        return f"Ray dashboard ({whose}): {url} (`posttrain dashboard RUN_DIR` for this run's view)"
    return "Ray dashboard: off (ray.dashboard: true starts it)"


def engine_pool(config: PipelineConfig, model_dir: Path):
    """Start the engine actors (they load while the first stage runs); none if no stage samples
    from the policy (the benches' and tests' own infra; a pipeline's slot starts its own)."""
    from posttrain.rollout.engine import RolloutEngine
    from posttrain.rollout.pool import EnginePool

    def start(index: int):
        return RolloutEngine.remote_actor(
            str(model_dir), config.rollout, config.model.dtype, config.rollout.seed + index
        )

    needed = any(stage.samples_policy for stage in config.stages)
    engines = [start(i) for i in range(config.rollout.engines)] if needed else []
    return EnginePool(engines, start, config.rollout.start_timeout_s)
