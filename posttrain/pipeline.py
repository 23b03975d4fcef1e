"""Run a pipeline: validate what can be checked before any actor starts, bring up Ray,
the engines and the trainer ranks once, then run the stages in order, each from the
previous stage's final checkpoint (or its `init_from`).

Run folder:
  config.resolved.yaml   the validated config with every default filled in
  metrics.jsonl          one JSON object per step and stage
  checkpoints/STAGE/     `final/` (and `step_N/`): Hugging Face safetensors folders
  run_state.json         each stage's status, checkpoint and timing
"""

from __future__ import annotations

import time
from pathlib import Path

from posttrain.config import ConfigError, PipelineConfig, ReasoningGymTasks, dump_config


def preflight(config: PipelineConfig, source: str) -> None:
    """Generate every task set once so that a bad family or parameter is a config error
    naming its key, found before anything starts."""
    from posttrain.data.tasks import load_tasks

    for i, stage in enumerate(config.stages):
        field = "tasks" if stage.type == "rl" else "data"
        data = getattr(stage, field)
        if not isinstance(data, ReasoningGymTasks):
            continue
        for j, family in enumerate(data.families):
            try:
                load_tasks(data.model_copy(update={"families": [family], "size": 1}))
            except ValueError as exc:
                raise ConfigError(f"{source}: stages[{i}].{field}.families[{j}]: {exc}") from None


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


def run_pipeline(config: PipelineConfig, run_dir: Path, verbose: bool = False, source: str = "<config>") -> dict:
    preflight(config, source)
    moved = claim_run_dir(run_dir)
    if moved:
        print(f"{run_dir} held an earlier run: moved it to {moved}", flush=True)
    (run_dir / "config.resolved.yaml").write_text(dump_config(config))

    from transformers import AutoTokenizer

    from posttrain.infra import Infra, engine_pool, start_ray
    from posttrain.metrics import MetricsLog, write_json_atomic
    from posttrain.models import resolve_model
    from posttrain.rl import run_rl
    from posttrain.sft import run_sft
    from posttrain.train.group import TrainerGroup

    model_dir = resolve_model(config.model)
    start_ray(config, verbose)
    pool = engine_pool(config, model_dir)
    trainers = TrainerGroup(config.trainer, config.seed)
    pool.on_restart = lambda engine: trainers.sync_weights([engine])
    infra = Infra(config=config, run_dir=run_dir, trainers=trainers, pool=pool,
                  metrics=MetricsLog(run_dir), tokenizer=AutoTokenizer.from_pretrained(model_dir))
    state = {"model": str(model_dir), "stages": {s.name: {"status": "pending"} for s in config.stages}}
    checkpoints: dict[str, Path] = {"model": model_dir}
    previous = model_dir
    for stage in config.stages:
        init_dir = checkpoints[stage.init_from] if stage.init_from else previous
        entry = state["stages"][stage.name]
        entry.update(status="running", init_from=str(init_dir), started=time.time())
        write_json_atomic(run_dir / "run_state.json", state)
        runner = run_sft if stage.type == "sft" else run_rl
        previous = checkpoints[stage.name] = runner(stage, init_dir, infra)
        entry.update(status="done", checkpoint=str(previous), finished=time.time())
        entry["seconds"] = round(entry["finished"] - entry["started"], 1)
        write_json_atomic(run_dir / "run_state.json", state)
    infra.metrics.close()
    infra.trainers.shutdown()
    pool.shutdown()
    return state
