"""One home per stage type: what the pipeline needs to know about a type besides its schema.

A `StageType` names the type's schema (its `type:` literal is the key) and says how a stage
of the type runs, how a finished one is restored when a run resumes, which file marks its
whole checkpoints (and holds their step), and what `posttrain run --dry-run` prints for it.
The schema answers the rest as class facts and pure methods (`config/stages.py:StageSchema`:
its task sources, what it trains, whether it samples from the policy, its references).

The pipeline, resume and the dry-run ask this registry; nothing else compares stage types.
Adding a type: its schema and its code in its own module, one `register(...)` here (or, for
a type that is not shipped, in the code that uses it: `register` also adds the schema to
the pipeline YAML's `stages` union). CONTRIBUTING.md walks through it.

This module imports no stage module at the top (`rl` brings torch and Ray): the CLI's
`validate` and the dry-run read it; a stage's code is imported when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from posttrain.config import (
    EvalStage,
    ExpertsStage,
    JudgeStage,
    MOPDStage,
    RLStage,
    SFTStage,
    StageSchema,
    SynthesisStage,
)
from posttrain.config.pipeline import register_stage_schema, unregister_stage_schema
from posttrain.config.stage_union import STAGE_SCHEMAS
from posttrain.records.run_state import ROLLOUT_STATE, SFT_STATE
from posttrain.runtime.dryrun import PlanView, expert_job_lines, slot0_lines, teacher_lines


@dataclass(frozen=True)
class StageRun:
    """What the pipeline hands a stage to run it."""

    stage: StageSchema
    init_dir: Path  # the checkpoint it starts from (the previous stage's, or its init_from)
    infra: object  # runtime.infra.Infra: engines, trainer ranks, judge, run folder, metrics
    resume_dir: Path | None  # its newest whole checkpoint when the run resumes, else None
    checkpoints: dict[str, Path]  # final checkpoints of the stages before it ("model": the base model)
    entry: dict  # its entry in run_state.json, saved by `save_state`
    save_state: Callable[[], None]
    model_dir: Path  # the base model's folder


@dataclass(frozen=True)
class StageType:
    """How the pipeline runs, restores and plans a stage type."""

    schema: type[StageSchema]
    run: Callable[[StageRun], Path | None]
    """Run the stage; record what it made in `checkpoints` and `entry`; return the checkpoint
    the next stage starts from by default, or None to leave it as it was."""
    restore: Callable[[StageSchema, dict, dict[str, Path]], Path | None]
    """A stage finished before a resume: put what it made back in `checkpoints` (from its
    run_state.json entry) as if it had just run; returns what `run` returned."""
    state_file: str | None = None
    """The file in each of its checkpoints that marks it whole and holds its `step`: a resumed
    run continues the stage from its newest one. None: the stage resumes by itself (experts'
    jobs, synthesis chunks) or runs again whole (eval)."""
    dry_run: Callable[[StageSchema, PlanView], list[str]] = slot0_lines
    """Its lines in `posttrain run --dry-run`."""
    records_init: bool = True
    """run_state.json records the checkpoint it was given (`init_from`); eval takes none."""

    @property
    def name(self) -> str:
        return self.schema.type_name()


STAGE_TYPES: dict[str, StageType] = {}


def register(kind: StageType) -> StageType:
    """Add a stage type (and its schema to the pipeline YAML's `stages` union)."""
    if kind.name in STAGE_TYPES:
        raise ValueError(f"stage type {kind.name!r} is already registered")
    if STAGE_SCHEMAS.get(kind.name) is not kind.schema:
        register_stage_schema(kind.schema)
    STAGE_TYPES[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Take a registered type out again, schema included (a test's toy type)."""
    STAGE_TYPES.pop(name)
    unregister_stage_schema(name)


def stage_type(stage: StageSchema) -> StageType:
    """The registered type of a stage."""
    return STAGE_TYPES[stage.type]


def dry_run_lines(stage: StageSchema, view: PlanView) -> list[str]:
    return stage_type(stage).dry_run(stage, view)


# ---------------------------------------------------------------- what stages make


def made_checkpoint(run: StageRun, final: Path) -> Path:
    """A stage that trains one checkpoint: the next stage starts from it by default."""
    run.checkpoints[run.stage.name] = final
    run.entry["checkpoint"] = str(final)
    return final


def restore_checkpoint(stage: StageSchema, entry: dict, checkpoints: dict[str, Path]) -> Path:
    checkpoints[stage.name] = Path(entry["checkpoint"])
    return checkpoints[stage.name]


def restore_jobs(stage: StageSchema, entry: dict, checkpoints: dict[str, Path]) -> None:
    checkpoints.update({f"{stage.name}/{job}": Path(p) for job, p in entry["checkpoints"].items()})


def restore_nothing(stage: StageSchema, entry: dict, checkpoints: dict[str, Path]) -> None:
    return None


# ---------------------------------------------------------------- the shipped types


def _run_sft(run: StageRun) -> Path:
    from posttrain.stages.sft import run_sft

    return made_checkpoint(run, run_sft(run.stage, run.init_dir, run.infra, run.resume_dir))


def _run_rl(run: StageRun) -> Path:
    from posttrain.stages.rl import run_rl

    return made_checkpoint(run, run_rl(run.stage, run.init_dir, run.infra, run.resume_dir))


def _run_mopd(run: StageRun) -> Path:
    from posttrain.stages.mopd import run_mopd

    final = run_mopd(run.stage, run.init_dir, run.infra, run.resume_dir, stages=run.checkpoints)
    return made_checkpoint(run, final)


def _run_experts(run: StageRun) -> None:
    from posttrain.stages.experts import run_experts

    finals = run_experts(run.stage, run.init_dir, run.infra, run.model_dir, run.entry, run.save_state)
    run.checkpoints.update({f"{run.stage.name}/{job}": path for job, path in finals.items()})
    run.entry["checkpoints"] = {job: str(path) for job, path in finals.items()}
    return None


def _run_eval(run: StageRun) -> None:
    from posttrain.stages.evaluate import run_eval

    run.entry["output"] = str(run_eval(run.stage, run.infra, run.checkpoints))
    return None


def _run_synthesis(run: StageRun) -> None:
    from posttrain.stages.synthesis import run_synthesis

    run.entry["summary"] = run_synthesis(run.stage, run.infra)
    run.entry["output"] = str(run.infra.run_dir / "synthesis" / run.stage.name)
    return None


def _run_judge(run: StageRun) -> None:
    from posttrain.stages.judge import run_judge

    final = run_judge(run.stage, run.init_dir, run.infra, run.entry, run.save_state)
    run.checkpoints[run.stage.name] = final
    run.entry["checkpoint"] = str(final)
    return None  # the policy's line goes on from the stage before it


def restore_judge(stage: StageSchema, entry: dict, checkpoints: dict[str, Path]) -> None:
    restore_checkpoint(stage, entry, checkpoints)
    return None


register(StageType(SFTStage, _run_sft, restore_checkpoint, state_file=SFT_STATE))
register(StageType(RLStage, _run_rl, restore_checkpoint, state_file=ROLLOUT_STATE))
register(StageType(ExpertsStage, _run_experts, restore_jobs, dry_run=expert_job_lines))
register(StageType(MOPDStage, _run_mopd, restore_checkpoint, state_file=ROLLOUT_STATE, dry_run=teacher_lines))
register(StageType(EvalStage, _run_eval, restore_nothing, records_init=False))
register(StageType(SynthesisStage, _run_synthesis, restore_nothing))
register(StageType(JudgeStage, _run_judge, restore_judge))  # its phases resume by themselves
