"""Run a pipeline: validate what can be checked before any actor starts (Ray comes up in
the background while the task sources are read), bring up the engines and the trainer
ranks once, then run the stages in order, each from the previous stage's final
checkpoint (or its `init_from`). Each start-up phase is timed (records/startup.py) and
written in the first step's metrics row.

Run folder:
  config.resolved.yaml   the validated config with every default filled in
  metrics.jsonl          one JSON object per step and stage
  rollouts/STAGE.jsonl   every scored sample of each RL step (posttrain/records/rollouts.py)
  scoreboard.jsonl       every GRM judgement: rubric, verdicts, reasons, raw replies
  synthesis/STAGE/       a synthesis stage's candidates with their verdicts, review decisions, SFT set
  checkpoints/STAGE/     `final/` (and `step_N/`): Hugging Face safetensors folders
  run_state.json         each stage's status, checkpoint and timing
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

from posttrain.config import EvalStage, PipelineConfig
from posttrain.config.files import ConfigError, dump_config
from posttrain.records.run_state import claim_run_dir, latest_checkpoint, set_aside_metrics
from posttrain.stages.registry import StageRun, stage_type


def preflight(config: PipelineConfig, source: str) -> None:
    """What can be checked before anything starts: the config's own limits, then its task
    sources (`preflight_config`, `preflight_sources`)."""
    preflight_config(config, source)
    preflight_sources(config, source)


def preflight_config(config: PipelineConfig, source: str) -> None:
    """The model's length limit and the memory plan, from the config alone: a plan that
    cannot fit is refused in a second, not after the tasks are generated."""
    from posttrain.runtime.preflight_checks import check_model_limit

    check_model_limit(config, _local_model(config, source), source)
    check_memory(config, source)


def preflight_sources(config: PipelineConfig, source: str) -> None:
    """Read every task source once (as the task-source table says: `data/registry.py`), so
    that a bad family, parameter, file or environment is a config error naming its key,
    found before anything starts; the gold of the tasks read is checked where a stage scores
    them; then what would fail inside the run (runtime/preflight_checks.py): GRM tasks
    without a judge, worked solutions as references, prompts that leave no room for
    max_tokens."""
    from posttrain.data.registry import source_kind
    from posttrain.runtime.preflight_checks import check_source

    folder = _local_model(config, source)
    tokenizer = functools.cache(lambda: _tokenizer(folder))
    for i, stage in enumerate(config.stages):
        for where, leaf in stage.task_leaves():
            path = f"{source}: stages[{i}].{where}"
            _preflight_answer_format(leaf, path)
            tasks = source_kind(leaf).preflight(stage, leaf, path)
            if stage.scores_tasks:
                if tasks is not None:
                    _preflight_gold(stage, leaf, tasks, path)
                check_source(config, stage, leaf, tasks, path, tokenizer)
    _preflight_held_out(config, source)


def _local_model(config: PipelineConfig, source: str) -> Path | None:
    """The model's folder where it is here already (never downloaded for a check)."""
    from posttrain.models import ModelNotFound, local_folder

    try:
        return local_folder(config.model)
    except ModelNotFound as exc:
        raise ConfigError(f"{source}: model.name: {exc}") from None


def _tokenizer(folder: Path | None):
    """The model's tokenizer, for the prompt-length check; None where the folder has none (a
    folder of config.json alone plans a model that is not on this machine: nothing to count)."""
    tokenizer_files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    if folder is None or not any((folder / name).is_file() for name in tokenizer_files):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def check_memory(config: PipelineConfig, source: str) -> None:
    """A plan whose GPU actors cannot fit (runtime/memory.py) is refused in one line."""
    from posttrain.runtime.memory import plan_lines

    _, problems = plan_lines(config)
    if problems:
        raise ConfigError(f"{source}: memory plan: {problems[0]}")


def _preflight_held_out(config: PipelineConfig, source: str) -> None:
    """An eval stage whose prompts the run trains on is refused before anything starts."""
    from posttrain.data.heldout import HeldOutError, check_held_out

    for i, stage in enumerate(config.stages):
        if isinstance(stage, EvalStage):
            try:
                check_held_out(stage, config)
            except HeldOutError as exc:
                raise ConfigError(f"{source}: stages[{i}]: {exc}") from None


def _preflight_answer_format(leaf, where: str) -> None:
    """An `answer_format` function that cannot be loaded is an error at its own key."""
    spec = getattr(leaf, "answer_format", None)
    if not spec or spec in ("gsm8k", "boxed", "final_line") or spec.startswith("regex:"):
        return
    from posttrain.data.answers import load_function

    try:
        load_function(spec)
    except Exception as exc:  # the user's module: whatever its import raises
        raise ConfigError(f"{where}.answer_format: cannot load {spec}: {type(exc).__name__}: {exc}") from None


def _preflight_gold(stage, leaf, tasks: list, where: str) -> None:
    """The source's own reference answers must score full marks (rewards/gold.py)."""
    from posttrain.data.env import EnvError
    from posttrain.rewards.gold import GoldError, check_gold

    try:
        check_gold(stage, leaf, tasks)
    except (GoldError, EnvError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def resolved_model(config: PipelineConfig, source: str) -> Path:
    """The model's local folder; a hub id neither cached nor downloadable is a config error."""
    from posttrain.models import ModelNotFound, resolve_model

    try:
        return resolve_model(config.model)
    except ModelNotFound as exc:
        raise ConfigError(f"{source}: model.name: {exc}") from None


def model_line(config: PipelineConfig, source: str) -> str:
    """`posttrain validate`'s report of the model: folder, parameter count, dtype."""
    from posttrain.models import ModelNotFound, model_report

    try:
        return model_report(config.model)
    except ModelNotFound as exc:
        raise ConfigError(f"{source}: model.name: {exc}") from None


def judge_warnings(config: PipelineConfig, source: str) -> list[str]:
    """One line per GRM whose judge is a built-in model as shipped, never trained to judge:
    measured (docs/grm.md), the base judge picks the better response in 0.49 of held-out
    pairs (it answers "A" to every call), so its rewards are position bias and noise."""
    from posttrain.config.base import BUILTIN_MODELS

    lines = []
    for i, stage in enumerate(config.stages):
        grm = stage.grm()
        model = getattr(getattr(grm, "judge", None), "model", None)
        if model in BUILTIN_MODELS:
            lines.append(
                f"{source}: warning: stages[{i}].reward.grm.judge.model {model} is an untrained small judge "
                '(measured: 0.49 of held-out pairs right, "A" to every call; docs/grm.md): its rewards are noise; '
                "train one first (pipelines/judge.yaml, then `model: stage:NAME`) or name a larger model"
            )
    return lines


def resume_plan(config: PipelineConfig, run_dir: Path, state: dict) -> dict[str, Path]:
    """Checkpoint to continue each unfinished stage from; metrics rows past it are set aside
    (they will be logged again), before the metrics file is opened for appending."""
    plan = {}
    for stage in config.stages:
        entry = state["stages"][stage.name]
        state_file = stage_type(stage).state_file
        if entry["status"] == "done" or state_file is None:
            continue  # experts: each job finds its own checkpoint; eval: runs again whole
        found = latest_checkpoint(run_dir / "checkpoints" / stage.name, state_file)
        step = json.loads((found / state_file).read_text())["step"] if found else 0
        set_aside_metrics(run_dir, stage.name, step)
        if found:
            plan[stage.name] = found
            entry.setdefault("resumed_from", []).append(str(found))
            print(f"[{stage.name}] resuming from {found} (step {step})", flush=True)
    return plan


def wandb_sink(config: PipelineConfig, run_dir: Path, group: str):
    """The wandb sink of this run's metrics, or None when `wandb.enabled` is false."""
    if not config.wandb.enabled or config.wandb.mode == "disabled":
        return None
    from posttrain.records.wandb import WandbSink

    return WandbSink(config.wandb, run_dir, group, config.model_dump(mode="json"))


def _run_state(config: PipelineConfig, run_dir: Path, resume: bool) -> dict:
    """The run's state: read back to resume, else a new one in the claimed run folder."""
    if resume:
        state = json.loads((run_dir / "run_state.json").read_text())
    else:
        moved = claim_run_dir(run_dir)
        if moved:
            print(f"{run_dir} held an earlier run: moved it to {moved}", flush=True)
        (run_dir / "config.resolved.yaml").write_text(dump_config(config))
        state = {"stages": {s.name: {"status": "pending"} for s in config.stages}}
    state.setdefault("run_id", f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    return state


def run_pipeline(
    config: PipelineConfig, run_dir: Path, verbose: bool = False, source: str = "<config>", resume: bool = False
) -> dict:
    """Run every stage; with `resume`, skip finished stages and continue the interrupted one
    from its newest checkpoint."""
    from posttrain.records.startup import CLOCK

    CLOCK.pipeline_begins()
    with CLOCK.phase("preflight"):
        preflight_config(config, source)
    from posttrain.runtime.infra import RayStarting

    ray_up = RayStarting(config, verbose)  # Ray's processes start while the task sources are read
    try:
        with CLOCK.phase("preflight"):
            preflight_sources(config, source)
        state = _run_state(config, run_dir, resume)
        resume_dirs = resume_plan(config, run_dir, state) if resume else {}
        model_dir = resolved_model(config, source)
        state["model"] = str(model_dir)
    except BaseException:
        ray_up.abandon()  # a run refused before it starts leaves no Ray behind
        raise
    with CLOCK.phase("ray"):  # what is left of Ray's start once the driver is ready for it
        ray_up.wait()

    from posttrain.records.metrics import MetricsLog, write_json_atomic
    from posttrain.runtime.slots import StageSlots, check_placeable

    check_placeable(config, source)  # a slot or teachers no node can hold: exit 2 now, not a silent wait
    metrics = MetricsLog(run_dir, wandb_sink(config, run_dir, state["run_id"]))
    slots = StageSlots(config, model_dir, run_dir, metrics)
    save_state = lambda: write_json_atomic(run_dir / "run_state.json", state)  # noqa: E731
    checkpoints: dict[str, Path] = {"model": model_dir}
    previous = model_dir
    try:
        for stage in config.stages:
            entry, kind = state["stages"][stage.name], stage_type(stage)
            if entry["status"] == "done":  # what it made, as if it had just run
                previous = kind.restore(stage, entry, checkpoints) or previous
                continue
            init_dir = checkpoints[stage.init_from] if stage.init_from else previous
            entry.update(status="running", started=entry.get("started", time.time()))
            if kind.records_init:
                entry["init_from"] = str(init_dir)
            save_state()
            CLOCK.stage_begins()
            with slots.for_stage(stage) as infra:
                run = StageRun(
                    stage.with_judge_from(checkpoints),  # a judge an earlier stage trained: its checkpoint
                    init_dir,
                    infra,
                    resume_dirs.get(stage.name),
                    checkpoints,
                    entry,
                    save_state,
                    model_dir,
                )
                previous = kind.run(run) or previous
            entry.update(status="done", finished=time.time())
            entry["seconds"] = round(entry["finished"] - entry["started"], 1)
            save_state()
    finally:
        save_state()
        metrics.close()
        slots.close()
    return state
