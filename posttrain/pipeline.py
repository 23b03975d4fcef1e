"""Run a pipeline: validate what can be checked before any actor starts, bring up Ray,
the engines and the trainer ranks once, then run the stages in order, each from the
previous stage's final checkpoint (or its `init_from`).

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

from posttrain.config import (
    CodingTasks,
    EnvTasks,
    EvalStage,
    HFTasks,
    PipelineConfig,
    ReasoningGymTasks,
    UserTasks,
    VerifiersTasks,
)
from posttrain.config.files import ConfigError, dump_config
from posttrain.records.run_state import claim_run_dir, latest_checkpoint, set_aside_metrics
from posttrain.stages.registry import StageRun, stage_type


def preflight(config: PipelineConfig, source: str) -> None:
    """Generate every task set once so that a bad family or parameter is a config error
    naming its key, found before anything starts; then what would fail inside the run
    (runtime/preflight_checks.py): the model's length limit, GRM tasks without a judge,
    worked solutions as references, prompts that leave no room for max_tokens."""
    from posttrain.runtime.preflight_checks import check_model_limit, check_source

    folder = _local_model(config, source)
    check_model_limit(config, folder, source)
    tokenizer = functools.cache(lambda: _tokenizer(folder))
    for i, stage in enumerate(config.stages):
        for where, leaf in stage.task_leaves():
            at = f"{source}: stages[{i}].{where}"
            tasks = _preflight_leaf(stage, leaf, at)
            if stage.scores_tasks:
                check_source(config, stage, leaf, tasks, at, tokenizer)
    _preflight_held_out(config, source)
    check_memory(config, source)


def _preflight_leaf(stage, leaf, at: str) -> list | None:
    """One task source read as the run will read it; its tasks where it was read whole
    (or its first window), None for a generated source."""
    tasks = None
    _preflight_answer_format(leaf, at)
    if isinstance(leaf, UserTasks) or isinstance(leaf, CodingTasks) and leaf.path is not None:
        tasks = _preflight_file(leaf, at)
    if isinstance(leaf, (HFTasks, EnvTasks, VerifiersTasks)):
        tasks = _preflight_own(stage, leaf, at)
    if isinstance(leaf, (UserTasks, HFTasks)) and leaf.reward:
        _preflight_reward(leaf, at)  # the file first, then the reward function
    if tasks is not None and stage.scores_tasks:
        _preflight_gold(stage, leaf, tasks, at)
    if isinstance(leaf, ReasoningGymTasks):
        _preflight_families(leaf, at)
    return tasks


def _preflight_families(leaf: ReasoningGymTasks, at: str) -> None:
    from posttrain.data.tasks import load_tasks

    for j, family in enumerate(leaf.families):
        try:
            load_tasks(leaf.model_copy(update={"families": [family], "size": 1}))
        except ValueError as exc:
            raise ConfigError(f"{at}.families[{j}]: {exc}") from None


def _local_model(config: PipelineConfig, source: str) -> Path | None:
    """The model's folder where it is here already (never downloaded for a check)."""
    from posttrain.models import ModelNotFound, local_folder

    try:
        return local_folder(config.model)
    except ModelNotFound as exc:
        raise ConfigError(f"{source}: model.name: {exc}") from None


def _tokenizer(folder: Path | None):
    """The model's tokenizer, for the prompt-length check; None where the folder has none."""
    if folder is None or not (folder / "config.json").is_file():
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


def _preflight_own(stage, leaf, where: str) -> list:
    """Your own data and environments, read once: a missing column, a bad file, an
    environment that cannot be built or gives no tasks is a config error naming the key
    (the key at fault where there is one: `env` for a class that cannot be loaded). Returns
    the tasks (of a streamed source, its first window)."""
    from posttrain.data.env import EnvError
    from posttrain.data.hf import StreamSampler
    from posttrain.data.tasks import load_tasks

    if getattr(leaf, "streaming", False) and not stage.streams_tasks:
        raise ConfigError(f"{where}.streaming: a {stage.type} stage reads its tasks whole; streaming is for RL stages")
    if getattr(leaf, "streaming", False) and ".sources[" in where:
        raise ConfigError(f"{where}.streaming: a streamed source cannot be mixed; give it as the stage's `tasks`")
    try:
        return StreamSampler(leaf, seed=0).tasks if getattr(leaf, "streaming", False) else load_tasks(leaf)
    except EnvError as exc:
        raise ConfigError(f"{where}{'.' + exc.key if exc.key else ''}: {exc}") from None
    except (ValueError, ImportError, AttributeError, TypeError, NotImplementedError) as exc:
        raise ConfigError(f"{where}: {exc}{_format_hint(leaf, exc)}") from None


def _format_hint(leaf, exc: Exception) -> str:
    """Where an `answer_format` read no row: the format the references are written in, if
    one reads them all."""
    spec = getattr(leaf, "answer_format", None)
    if not spec or "answer_format" not in str(exc) or getattr(leaf, "streaming", False):
        return ""
    from posttrain.data.answers import guesses
    from posttrain.data.tasks import load_tasks
    from posttrain.rewards.gold import sampled

    try:
        tasks = load_tasks(leaf.model_copy(update={"answer_format": None}))
    except (ValueError, ImportError, AttributeError, TypeError):
        return ""
    found = [g for g in guesses([t.answer for t in sampled(tasks) if t.answer is not None]) if g != spec]
    return f"; the references read as `answer_format: {found[0]}`" if found else ""


def _preflight_file(leaf, where: str) -> list:
    """A task file (user or coding) read whole: a broken file is a config error."""
    from posttrain.data.tasks import load_tasks

    try:
        return load_tasks(leaf)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}{_format_hint(leaf, exc)}") from None


def _preflight_reward(leaf, where: str) -> None:
    """A `reward: module:function` that cannot be loaded (from the path or the current
    folder, as environments are) is an error at its own key."""
    from posttrain.rewards.user import load_reward_function

    try:
        load_reward_function(leaf.reward)
    except Exception as exc:  # the user's module: whatever its import raises
        raise ConfigError(f"{where}.reward: cannot load {leaf.reward}: {type(exc).__name__}: {exc}") from None


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


def run_pipeline(
    config: PipelineConfig, run_dir: Path, verbose: bool = False, source: str = "<config>", resume: bool = False
) -> dict:
    """Run every stage; with `resume`, skip finished stages and continue the interrupted one
    from its newest checkpoint."""
    preflight(config, source)
    if resume:
        state = json.loads((run_dir / "run_state.json").read_text())
    else:
        moved = claim_run_dir(run_dir)
        if moved:
            print(f"{run_dir} held an earlier run: moved it to {moved}", flush=True)
        (run_dir / "config.resolved.yaml").write_text(dump_config(config))
        state = {"stages": {s.name: {"status": "pending"} for s in config.stages}}
    state.setdefault("run_id", f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}")

    from posttrain.records.metrics import MetricsLog, write_json_atomic
    from posttrain.runtime.infra import start_ray
    from posttrain.runtime.slots import check_placeable, open_first_slot

    resume_dirs = resume_plan(config, run_dir, state) if resume else {}
    model_dir = resolved_model(config, source)
    state["model"] = str(model_dir)
    start_ray(config, verbose)
    check_placeable(config, source)  # a slot or teachers no node can hold: exit 2 now, not a silent wait
    slot, infra = open_first_slot(
        config, model_dir, run_dir, MetricsLog(run_dir, wandb_sink(config, run_dir, state["run_id"]))
    )
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
        infra.metrics.close()
        slot.close()
    return state
