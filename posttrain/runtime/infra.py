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
    import ray

    if ray.is_initialized():
        return
    env = {k: v for k, v in QUIET_ENV.items() if v} if not verbose else {}
    if config.ray.address:
        context = ray.init(address=config.ray.address, log_to_driver=verbose, runtime_env={"env_vars": env})
        print_ray_dashboard(context.dashboard_url, "the cluster's")
        return
    from posttrain.config.resources import slot_cpus

    needed = slot_cpus(config)  # one slot: engines, trainer ranks and judge (more slots need `ray.num_cpus`)
    context = ray.init(
        num_cpus=config.ray.num_cpus or max(os.cpu_count() or 1, int(needed + 0.999)),
        include_dashboard=config.ray.dashboard,
        object_store_memory=config.ray.object_store_gib * 2**30,
        log_to_driver=verbose,
        runtime_env={"env_vars": env},
    )
    print_ray_dashboard(context.dashboard_url if config.ray.dashboard else None, "local")


def print_ray_dashboard(url: str | None, whose: str) -> None:
    if url:
        url = url if "://" in url else f"http://{url}"
        print(f"Ray dashboard ({whose}): {url} (`posttrain dashboard RUN_DIR` for this run's view)", flush=True)
    else:
        print("Ray dashboard: off (ray.dashboard: true starts it)", flush=True)


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
