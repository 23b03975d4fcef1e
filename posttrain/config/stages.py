"""Stage schemas of the pipeline YAML: the base every stage shares, sft, rl and synthesis
(experts, mopd, judge and eval are in `recipe_stages.py`, the `stages` union in `stage_union.py`). The
algorithm settings they share (advantage, loss, partial rollouts, token budgets) are in
`algo.py`, the synthesis stage's teacher, checks and review in `synthesis.py`."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal, get_args

from pydantic import Field, field_validator, model_validator

from posttrain.config.algo import (
    BudgetConfig,
    DynamicSamplingConfig,
    GRPOConfig,
    PartialRolloutConfig,
)
from posttrain.config.base import Base
from posttrain.config.rewards import RewardConfig
from posttrain.config.synthesis import ReviewConfig, TeacherModel, VerifyConfig
from posttrain.config.tasks import SFTSource, SynthesisData, TaskSource

# ---------------------------------------------------------------- stages


def stage_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise ValueError("must be letters, digits, '_', '.', '-' (at most 64)")
    if name == "model":
        raise ValueError("'model' is reserved (init_from: model means the base model)")
    return name


Trains = Literal["checkpoint", "jobs", "nothing"]


class StageSlot(Base):
    """With `ray.placement: per_stage`, the sizes of one stage's slot (unset: the pipeline's)."""

    engines: int | None = Field(
        default=None, ge=1, le=1024, description="Rollout engines while this stage runs (instead of rollout.engines)."
    )
    trainer_workers: int | None = Field(
        default=None, ge=1, le=4096, description="Trainer ranks while this stage runs (instead of trainer.workers)."
    )


class StageSchema(Base):
    """What every stage type's schema answers about itself, as class facts and pure
    methods, so that validation, placement, the pipeline, the held-out check and the reward
    router ask the stage instead of comparing type names. A new type overrides what
    differs; how it runs is registered in `posttrain/stages/registry.py`."""

    trains: ClassVar[Trains] = "checkpoint"
    """What it trains: one checkpoint (`checkpoints/NAME/final`, named by its stage name),
    one per job (`NAME/JOB`, the experts stage), or nothing (it writes other outputs)."""
    samples_policy: ClassVar[bool] = False
    """It samples from the policy on the slot's rollout engines (a slot then holds engines)."""
    streams_tasks: ClassVar[bool] = False
    """It may read a task source as a stream (RL draws); other stages read their tasks whole."""
    scores_tasks: ClassVar[bool] = False
    """Its verifiers score responses to its tasks, so its sources' gold answers must score full marks."""
    slot: StageSlot = Field(
        default_factory=StageSlot,
        description="With ray.placement: per_stage, this stage's engines and trainer ranks (its slot's sizes).",
    )

    def uses_trainer(self) -> bool:
        """Its code calls on the slot's trainer ranks. A stage that makes a checkpoint
        without training (weights averaged, converted) overrides this with False."""
        return self.trains != "nothing"

    @classmethod
    def type_name(cls) -> str:
        """The `type:` of this schema in the pipeline YAML (its `type` literal)."""
        return get_args(cls.model_fields["type"].annotation)[0]

    def task_sources(self) -> dict[str, Any]:
        """The task sources (and SFT data) written in this stage, by key path (`tasks`,
        `data`, `domains.NAME`); mixtures are not opened."""
        return {}

    def task_leaves(self) -> list[tuple[str, Any]]:
        """(key path, leaf task source) of the tasks this stage draws and scores: mixtures
        opened (`tasks.sources[K]`); conversation data (chat_jsonl, a synthesis stage's
        set) holds no tasks and is left out."""
        roots = self.task_sources().items()
        return [(key + part, leaf) for key, root in roots if root.holds_tasks for part, leaf in root.parts().items()]

    def training_sources(self, config) -> list:
        """What this stage trains on or makes training data from, for the held-out check:
        its own sources (and SFT data); an empty list when nothing it reads is training data.
        `config`: the pipeline, for sources this stage takes from an earlier one."""
        return list(self.task_sources().values())

    def grm(self):
        """The generative reward model of this stage's `reward`, or None."""
        return None

    def judge_stage(self) -> str | None:
        """The earlier stage (or job) whose checkpoint is this stage's GRM judge
        (`reward.grm.judge.model: stage:NAME`), or None."""
        grm = self.grm()
        model = getattr(getattr(grm, "judge", None), "model", None) if grm is not None else None
        return model.removeprefix("stage:") if isinstance(model, str) and model.startswith("stage:") else None

    def with_judge_from(self, checkpoints: dict) -> StageSchema:
        """This stage with a `stage:NAME` judge replaced by that stage's checkpoint folder
        (`checkpoints`: the final checkpoints of the stages before it, by name)."""
        name = self.judge_stage()
        if name is None:
            return self
        if name not in checkpoints:
            raise ValueError(f"stage {self.name}: its judge is stage {name!r}, which has made no checkpoint")
        grm = self.grm()
        judge = grm.judge.model_copy(update={"model": str(checkpoints[name])})
        reward = self.reward.model_copy(update={"grm": grm.model_copy(update={"judge": judge})})
        return self.model_copy(update={"reward": reward})

    def job_slots(self) -> int:
        """Slots (placement groups) this stage can use at once; slot 0 is the pipeline's own."""
        return 1

    def job_names(self) -> list[str]:
        """The jobs of a stage that trains one checkpoint per job (`NAME/JOB`)."""
        return []

    def phases(self) -> list[StageSchema]:
        """The stages it runs one after another, each with checkpoints of its own (a judge
        stage: its SFT and RL phases); itself for every other stage."""
        return [self]

    def teacher_actors(self, stages: list) -> tuple[Any, int] | None:
        """(teacher pool, actors resident at once) of a stage with teacher actors outside
        the slot, or None. `stages`: the pipeline's stages, for teachers an earlier one makes."""
        return None

    def check_references(self, earlier: dict[str, StageSchema], where: str) -> None:
        """Raise ValueError (naming the key, after `where`) for a reference to an earlier
        stage that is not there or makes no checkpoint. `earlier`: the stages before this
        one, by name."""


def check_checkpoint_ref(earlier: dict[str, StageSchema], ref: str, where: str, whole_jobs: bool = False) -> None:
    """`ref` must name an earlier stage with a checkpoint: one that trains one (sft, rl,
    mopd), one job of a stage that trains one per job (`EXPERTS/DOMAIN-EFFORT`), or (with
    `whole_jobs`, eval) a whole such stage."""
    name, _, cell = ref.partition("/")
    stage = earlier.get(name)
    if stage is None:
        raise ValueError(f"{where}: '{ref}' names no earlier stage")
    if stage.trains == "nothing":
        raise ValueError(f"{where}: '{ref}' is an {stage.type} stage, which makes no checkpoint")
    if stage.trains == "jobs":
        jobs = stage.job_names()
        if not cell and not whole_jobs:
            raise ValueError(
                f"{where}: '{ref}' is an {stage.type} stage: name one of its jobs, e.g. '{name}/{jobs[0]}'"
            )
        if cell and cell not in jobs:
            raise ValueError(
                f"{where}: '{ref}': {stage.type} stage '{name}' has no job '{cell}' (jobs: {', '.join(jobs)})"
            )
    elif cell:
        raise ValueError(f"{where}: '{ref}': only an experts stage has jobs ('{name}' is {stage.type})")


class KeepBest(Base):
    """The step checkpoint to keep whatever `keep_last` says: the best by a logged metric."""

    metric: str = Field(min_length=1, description="A metric of the stage's rows, e.g. `reward/mean`.")
    mode: Literal["max", "min"] = Field(default="max", description="Whether higher or lower is better.")


class StageBase(StageSchema):
    """A stage that trains from a checkpoint: the previous stage's, or its `init_from`."""

    name: str = Field(description="Stage name; checkpoints go to RUN_DIR/checkpoints/NAME.")
    init_from: str | None = Field(
        default=None,
        description=(
            "Earlier stage whose final checkpoint starts this one; `model`: the base model; none: the "
            "previous stage, or the model for the first stage."
        ),
    )
    lr: float = Field(gt=0, le=1, description="Peak learning rate.")
    warmup_steps: int = Field(default=0, ge=0, description="Linear warm-up steps.")
    lr_decay: Literal["constant", "cosine"] = Field(
        default="constant",
        description="After the warm-up: the peak lr throughout, or a cosine to lr x min_lr_ratio at the last step.",
    )
    min_lr_ratio: float = Field(
        default=0.1, ge=0, le=1, description="With lr_decay cosine: the last step's lr over the peak."
    )
    steps: int = Field(ge=1, le=10_000_000, description="Optimizer steps.")
    save_every: int = Field(default=0, ge=0, description="Checkpoint every N steps; 0: only at the end.")
    keep_last: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Keep only the newest N step checkpoints (`final`, the newest and `keep_best`'s are never "
        "deleted); none: keep every one.",
    )
    keep_best: KeepBest | None = Field(
        default=None, description="Also keep the step checkpoint whose step logged the best value of a metric."
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        return stage_name(name)

    def check_references(self, earlier: dict[str, StageSchema], where: str) -> None:
        if self.init_from not in (None, "model"):
            check_checkpoint_ref(earlier, self.init_from, f"{where}.init_from")
        judge = self.judge_stage()
        if judge is not None:
            check_checkpoint_ref(earlier, judge, f"{where}.reward.grm.judge.model")

    def longest_steps(self) -> int:
        """Optimizer steps of its longest job (the stage's own steps where it has one job)."""
        return self.steps


class ThinkConfig(Base):
    """A scratchpad of random length before some reference answers: the first assistant
    turn starts with `prefix` and the first k words of the question (k uniform in
    1..max_words), on a line of its own. The SFT model then answers with or without
    thinking at lengths that vary; the experts' token budgets choose among them (a stand-in
    for reasoning traces when the task data has none)."""

    prob: float = Field(default=0.5, ge=0, le=1, description="Share of conversations that get a scratchpad.")
    max_words: int = Field(default=8, ge=1, le=1000, description="Longest scratchpad, in words of the question.")
    prefix: str = Field(default="Thinking:", min_length=1, description="Start of the scratchpad line.")
    code_prefix: str = Field(
        default="# Thinking:",
        min_length=1,
        description="Start of the line for code tasks (a comment, so the program still runs).",
    )
    seed: int = Field(default=0, description="Seed of which conversations get one, and how long.")
    by_effort: dict[Literal["low", "high", "max"], tuple[int, int]] | None = Field(
        default=None,
        description="Scratchpad length in words, [min, max], for each stated effort (needs `effort_lines`); "
        "[0, 0]: none. The SFT model then thinks longer at higher effort, as reasoning models "
        "are taught to; an effort not listed uses 1..max_words.",
    )

    forms: dict[Literal["full", "short", "none", "tool"], float] | None = Field(
        default=None,
        description="For tasks that carry exact scratchpads (arithmetic, linear code, agent arithmetic): the "
        "weight of each form of answer, drawn per conversation whatever the stated effort: `full` (the whole "
        "scratchpad), `short` (the short one), `none` (the answer alone), `tool` (agent tasks: the tool episode). "
        "The experts' token budgets then decide how much each effort thinks.",
    )

    @field_validator("forms")
    @classmethod
    def _weights(cls, value):
        if value is not None and (any(w < 0 for w in value.values()) or not sum(value.values()) > 0):
            raise ValueError("weights must be >= 0 with a positive sum")
        return value

    @field_validator("by_effort")
    @classmethod
    def _ranges(cls, value):
        for effort, (low, high) in (value or {}).items():
            if not 0 <= low <= high <= 1000:
                raise ValueError(f"{effort}: [{low}, {high}] is not a range of word counts (0 <= min <= max <= 1000)")
        return value


class SFTStage(StageBase):
    """Supervised fine-tuning on chat data: next-token loss on assistant tokens."""

    type: Literal["sft"]
    data: SFTSource = Field(description="Where the chat data comes from.")
    batch_size: int = Field(default=32, ge=1, description="Conversations per optimizer step, over all ranks.")
    max_len: int = Field(default=512, ge=8, description="Conversations are cut to this many tokens.")
    think: ThinkConfig | None = Field(
        default=None, description="Scratchpads of random length before some task answers (task sources only)."
    )
    effort_lines: bool = Field(
        default=False,
        description=(
            "State a random effort tier (`Reasoning effort: low|high|max`) in each task conversation's "
            "system prompt, as expert, MOPD and eval prompts do: without it the line is new to the model after "
            "SFT."
        ),
    )

    @model_validator(mode="after")
    def _by_effort_needs_lines(self) -> SFTStage:
        if self.think and self.think.by_effort and not self.effort_lines:
            raise ValueError("think.by_effort needs effort_lines: true (the effort must be stated to think by it)")
        return self

    def task_sources(self) -> dict[str, Any]:
        return {"data": self.data}

    def check_references(self, earlier: dict[str, StageSchema], where: str) -> None:
        super().check_references(earlier, where)
        if isinstance(self.data, SynthesisData) and not isinstance(earlier.get(self.data.stage), SynthesisStage):
            raise ValueError(f"{where}.data.stage: '{self.data.stage}' names no earlier synthesis stage")


class RolloutStage(StageBase):
    """What every stage that samples from the policy shares (RL and MOPD)."""

    samples_policy: ClassVar[bool] = True
    scores_tasks: ClassVar[bool] = True

    algo: GRPOConfig = Field(default_factory=GRPOConfig, description="Advantage and loss.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Answer extraction.")
    prompts_per_step: int = Field(default=16, ge=1, description="Prompts drawn per step.")
    group_size: int = Field(default=8, ge=2, description="Samples per prompt (G).")
    max_tokens: int = Field(default=64, ge=1, description="Most tokens generated per response.")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling.")
    partial: PartialRolloutConfig = Field(default_factory=PartialRolloutConfig, description="Partial-rollout queue.")
    budget: BudgetConfig = Field(default_factory=BudgetConfig, description="Token budget and effort tier.")
    dynamic_sampling: DynamicSamplingConfig | None = Field(
        default=None,
        description=(
            "Replace groups whose rewards are all equal (no gradient) by fresh draws until the step holds "
            "prompts_per_step groups with signal (DAPO); none: train every group drawn."
        ),
    )

    @model_validator(mode="after")
    def _minibatches_fit(self) -> RolloutStage:
        size = self.prompts_per_step * self.group_size
        if self.algo.minibatches > size:
            raise ValueError(
                f"algo.minibatches ({self.algo.minibatches}) must be at most prompts_per_step x group_size ({size}): "
                "each minibatch needs a sequence"
            )
        return self

    def grm(self):
        return self.reward.grm

    def distill_weight(self) -> float:
        """Weight of the loss's KL to a teacher's top-k next tokens (MOPD); 0: none."""
        return 0.0


class RLStage(RolloutStage):
    """RL with verifiable rewards: generate -> score -> advantage -> train -> sync."""

    type: Literal["rl"]
    tasks: TaskSource = Field(description="Prompts and how they are scored.")

    streams_tasks: ClassVar[bool] = True

    def task_sources(self) -> dict[str, Any]:
        return {"tasks": self.tasks}

    @model_validator(mode="after")
    def _budget_fits(self) -> RLStage:
        b = self.budget
        largest = b.tokens or (max(b.anneal.start, b.anneal.end) if b.anneal else None)
        if largest is not None and largest >= self.max_tokens:
            raise ValueError(
                f"budget of {largest} tokens needs max_tokens above it (is {self.max_tokens}): "
                "an over-budget response could never be generated"
            )
        return self


class CheckpointlessStage(StageSchema):
    """A stage that trains nothing: no checkpoint of its own, nothing to start from."""

    trains: ClassVar[Trains] = "nothing"

    name: str = Field(description="Stage name.")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        return stage_name(name)

    @property
    def init_from(self) -> None:
        return None


class SynthesisStage(CheckpointlessStage):
    """A teacher model writes K candidate trajectories per task (multi-turn with tools for
    agent tasks); each is verified (format, outcome, length, dedup) and some go to human
    review. The kept ones are the SFT set of a later `data: {type: synthesis}` stage."""

    scores_tasks: ClassVar[bool] = True

    type: Literal["synthesis"]
    name: str = Field(description="Stage name; the set goes to RUN_DIR/synthesis/NAME/.")
    teacher: TeacherModel = Field(description="The model that writes the trajectories.")
    tasks: TaskSource = Field(description="Tasks to write trajectories for (each is scored by its verifier).")
    candidates: int = Field(default=4, ge=1, le=1024, description="K: candidate trajectories per task.")
    max_tokens: int = Field(default=128, ge=1, description="Most teacher tokens per trajectory (all its turns).")
    temperature: float = Field(default=0.8, ge=0, description="Sampling temperature.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling.")
    chunk: int = Field(
        default=8,
        ge=1,
        le=100_000,
        description="Tasks generated, verified and written together (the unit a resume skips).",
    )
    reward: RewardConfig = Field(
        default_factory=RewardConfig, description="Answer extraction and the GRM for tasks without a verifier."
    )
    verify: VerifyConfig = Field(default_factory=VerifyConfig, description="Verification stages.")
    review: ReviewConfig = Field(default_factory=ReviewConfig, description="Human review queue.")

    def task_sources(self) -> dict[str, Any]:
        return {"tasks": self.tasks}

    def grm(self):
        return self.reward.grm

    @model_validator(mode="after")
    def _pairwise_needs_candidates(self) -> SynthesisStage:
        grm = self.reward.grm
        if grm is not None and grm.method == "pairwise" and self.candidates < 2:
            raise ValueError(
                "candidates: reward.grm.method pairwise compares a task's candidates with each other and needs 2 "
                "or more (a lone candidate would be unscored)"
            )
        return self
