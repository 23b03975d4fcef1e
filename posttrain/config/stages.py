"""Stage schemas of the pipeline YAML (sft, rl, experts, mopd, eval, synthesis). The
algorithm settings they share (advantage, loss, partial rollouts, token budgets) are in
`algo.py`, the synthesis stage's teacher, checks and review in `synthesis.py`."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import Field, field_validator, model_validator

from posttrain.config.algo import (
    BudgetConfig,
    GRPOConfig,
    PartialRolloutConfig,
)
from posttrain.config.base import Base
from posttrain.config.rewards import RewardConfig
from posttrain.config.synthesis import ReviewConfig, TeacherModel, VerifyConfig
from posttrain.config.tasks import ChatJsonl, JudgementTasks, MixtureTasks, SFTSource, SynthesisData, TaskSource

# ---------------------------------------------------------------- stages


def stage_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise ValueError("must be letters, digits, '_', '.', '-' (at most 64)")
    if name == "model":
        raise ValueError("'model' is reserved (init_from: model means the base model)")
    return name


Trains = Literal["checkpoint", "jobs", "nothing"]


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
        out = []
        for key, root in self.task_sources().items():
            if isinstance(root, MixtureTasks):
                out += [(f"{key}.sources[{k}]", leaf) for k, leaf in enumerate(root.sources)]
            elif not isinstance(root, (ChatJsonl, SynthesisData)):
                out.append((key, root))
        return out

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
    mode: Literal["max", "min"] = Field("max", description="Whether higher or lower is better.")


class StageBase(StageSchema):
    """A stage that trains from a checkpoint: the previous stage's, or its `init_from`."""

    name: str = Field(description="Stage name; checkpoints go to RUN_DIR/checkpoints/NAME.")
    init_from: str | None = Field(
        None,
        description=(
            "Earlier stage whose final checkpoint starts this one; `model`: the base model; none: the "
            "previous stage, or the model for the first stage."
        ),
    )
    lr: float = Field(gt=0, le=1, description="Peak learning rate.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    steps: int = Field(ge=1, le=10_000_000, description="Optimizer steps.")
    save_every: int = Field(0, ge=0, description="Checkpoint every N steps; 0: only at the end.")
    keep_last: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Keep only the newest N step checkpoints (`final`, the newest and `keep_best`'s are never "
        "deleted); none: keep every one.",
    )
    keep_best: KeepBest | None = Field(
        None, description="Also keep the step checkpoint whose step logged the best value of a metric."
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

    prob: float = Field(0.5, ge=0, le=1, description="Share of conversations that get a scratchpad.")
    max_words: int = Field(8, ge=1, le=1000, description="Longest scratchpad, in words of the question.")
    prefix: str = Field("Thinking:", min_length=1, description="Start of the scratchpad line.")
    code_prefix: str = Field(
        "# Thinking:",
        min_length=1,
        description="Start of the line for code tasks (a comment, so the program still runs).",
    )
    seed: int = Field(0, description="Seed of which conversations get one, and how long.")
    by_effort: dict[Literal["low", "high", "max"], tuple[int, int]] | None = Field(
        None,
        description="Scratchpad length in words, [min, max], for each stated effort (needs `effort_lines`); "
        "[0, 0]: none. The SFT model then thinks longer at higher effort, as reasoning models "
        "are taught to; an effort not listed uses 1..max_words.",
    )

    forms: dict[Literal["full", "short", "none", "tool"], float] | None = Field(
        None,
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
    batch_size: int = Field(32, ge=1, description="Conversations per optimizer step, over all ranks.")
    max_len: int = Field(512, ge=8, description="Conversations are cut to this many tokens.")
    think: ThinkConfig | None = Field(
        None, description="Scratchpads of random length before some task answers (task sources only)."
    )
    effort_lines: bool = Field(
        False,
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
    prompts_per_step: int = Field(16, ge=1, description="Prompts drawn per step.")
    group_size: int = Field(8, ge=2, description="Samples per prompt (G).")
    max_tokens: int = Field(64, ge=1, description="Most tokens generated per response.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling.")
    partial: PartialRolloutConfig = Field(default_factory=PartialRolloutConfig, description="Partial-rollout queue.")
    budget: BudgetConfig = Field(default_factory=BudgetConfig, description="Token budget and effort tier.")

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


Effort = Literal["low", "high", "max"]
DOMAIN_NAME = r"[a-z][a-z0-9_]{0,31}"


class TeacherSpec(Base):
    """One teacher of MOPD: the expert checkpoint of a (domain, effort) cell."""

    domain: str = Field(description="Domain; its tasks come from the stage's `domains`.")
    effort: Effort = Field(description="Effort tier, stated in the system prompt of its prompts.")
    checkpoint: str = Field(
        description=(
            "The expert's model folder, or `stage:NAME` for the final checkpoint of an earlier stage of the pipeline."
        )
    )

    @property
    def teacher_id(self) -> str:
        return f"{self.domain}-{self.effort}"


class TeacherPoolConfig(Base):
    """Inference-only teacher workers (Ray actors) that score the student's tokens; at most
    `memory_gib` of them are resident, the least recently used is unloaded first. With
    `hf`, all teachers share one worker process (its runtime is paid once); with `vllm`,
    each is its own engine."""

    backend: Literal["hf", "vllm"] = Field(
        "hf", description="hf: a forward pass in transformers; vllm: a prompt-logprobs pass in a vLLM engine."
    )
    memory_gib: float = Field(
        4.0, gt=0, le=100_000, description="Memory budget of the resident teachers, all together."
    )
    overhead_gib: float = Field(
        0.5,
        ge=0,
        le=1024,
        description=(
            "Memory a worker takes besides its weights (runtime, activations; vllm: plus its KV cache, "
            "per engine); raised to what is measured."
        ),
    )
    num_cpus: float = Field(
        0, ge=0, description="Ray CPUs reserved per teacher worker process (they run between rollouts)."
    )
    num_gpus: float = Field(
        0, ge=0, description="Ray GPUs per teacher worker process (vllm: at most 1; a share lets teachers pack)."
    )
    gpu_memory_utilization: float = Field(
        0.4, gt=0, le=1, description="vllm on GPU: share of its GPU's memory each teacher engine takes."
    )
    max_resident: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Most teachers loaded at once besides memory_gib (least recently used unloaded first); "
        "none: memory_gib alone decides.",
    )
    micro_batch_tokens: int = Field(4096, ge=16, description="Most tokens (padded) per forward pass of the hf backend.")

    @model_validator(mode="after")
    def _one_gpu_per_engine(self) -> TeacherPoolConfig:
        if self.backend == "vllm" and self.num_gpus > 1:
            raise ValueError(
                f"num_gpus {self.num_gpus:g}: a vllm teacher engine runs on one GPU or a share of one "
                "(tensor_parallel 1)"
            )
        return self


class MOPDStage(RolloutStage):
    """Multi-teacher on-policy distillation (docs/recipe.md, MOPD): the student samples prompts
    of every (domain, effort) cell and each token is rewarded by its cell's teacher:
    A_t = sg[log pi_T - log pi_student] + alpha * A_outcome."""

    type: Literal["mopd"]
    experts: str | None = Field(
        None,
        description=(
            "An earlier experts stage: its nine experts are the teachers and its domains the prompts "
            "(instead of `domains` and `teachers`)."
        ),
    )
    domains: dict[str, TaskSource] = Field(default_factory=dict, description="Task source of each domain.")
    teachers: list[TeacherSpec] = Field(default_factory=list, description="One teacher per (domain, effort) cell.")
    effort_max_tokens: dict[Effort, int] = Field(
        default_factory=dict, description="Most tokens per response of each effort; missing: max_tokens."
    )
    alpha: float = Field(
        0.0, ge=0, le=100, description="Weight of the outcome (verifier) advantage added to the teacher's."
    )
    teacher_pool: TeacherPoolConfig = Field(default_factory=TeacherPoolConfig, description="Where teachers run.")

    @field_validator("domains")
    @classmethod
    def _domain_names(cls, domains: dict) -> dict:
        for name in domains:
            if not re.fullmatch(DOMAIN_NAME, name):
                raise ValueError(f"domain name {name!r} must be lowercase letters, digits and '_'")
        return domains

    @model_validator(mode="after")
    def _cells(self) -> MOPDStage:
        if self.experts is not None and (self.domains or self.teachers):
            raise ValueError(
                "give `experts` (teachers and domains from an experts stage) or `domains` and `teachers`, not both"
            )
        if self.experts is None and not (self.domains and self.teachers):
            raise ValueError("needs `experts: STAGE` (an earlier experts stage) or both `domains` and `teachers`")
        seen = set()
        for i, t in enumerate(self.teachers):
            if t.domain not in self.domains:
                raise ValueError(f"teachers[{i}]: unknown domain {t.domain!r} (domains: {', '.join(self.domains)})")
            if t.teacher_id in seen:
                raise ValueError(f"teachers[{i}]: a second teacher for cell {t.teacher_id}")
            seen.add(t.teacher_id)
        if self.temperature != 1.0 or self.top_p != 1.0:
            raise ValueError(
                "temperature and top_p must be 1.0: the reverse KL to the teacher needs samples from the "
                "student's own distribution (nucleus truncation biases its estimate)"
            )
        if any(v < 1 for v in self.effort_max_tokens.values()):
            raise ValueError("effort_max_tokens must be >= 1")
        return self

    def task_sources(self) -> dict[str, Any]:
        return {f"domains.{name}": source for name, source in self.domains.items()}

    def training_sources(self, config) -> list:
        if self.experts is not None:  # the experts stage's domains
            return config.stage(self.experts).training_sources(config)
        return super().training_sources(config)

    def teacher_actors(self, stages: list) -> tuple[Any, int] | None:
        """vllm: one engine actor per resident teacher (at most `max_resident`); hf: one
        shared host actor."""
        pool = self.teacher_pool
        if pool.backend == "hf":
            return pool, 1
        teachers = len(self.teachers)
        if self.experts is not None:
            teachers = len(next(s for s in stages if s.name == self.experts).job_names())
        return pool, min(teachers, pool.max_resident or teachers)

    def check_references(self, earlier: dict[str, StageSchema], where: str) -> None:
        super().check_references(earlier, where)
        for j, teacher in enumerate(self.teachers):
            if teacher.checkpoint.startswith("stage:"):
                check_checkpoint_ref(
                    earlier, teacher.checkpoint.removeprefix("stage:"), f"{where}.teachers[{j}].checkpoint"
                )
        if self.experts is not None and not isinstance(earlier.get(self.experts), ExpertsStage):
            raise ValueError(f"{where}.experts: '{self.experts}' names no earlier experts stage")


Domain = Literal["general", "agent", "coding"]
EFFORT_ORDER: tuple[str, ...] = ("max", "high", "low")  # each effort's expert starts from the one before


class EffortSpec(Base):
    """Token budget of one effort tier (docs/recipe.md, Token-budget effort annealing)."""

    tokens: int | dict[Domain, int] | None = Field(
        None, description="Absolute budget per response; one number, or one per domain."
    )
    multiple: float | None = Field(
        None, gt=0, description="Budget as a multiple of the task's reference answer length."
    )
    steps: int | None = Field(
        None, ge=1, le=10_000_000, description="Optimizer steps of this effort's jobs; none: the stage's `steps`."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> EffortSpec:
        if (self.tokens is None) == (self.multiple is None):
            raise ValueError("give exactly one of tokens, multiple")
        values = self.tokens.values() if isinstance(self.tokens, dict) else [self.tokens]
        if any(v is not None and v < 1 for v in values):
            raise ValueError("tokens must be >= 1")
        return self

    def tokens_for(self, domain: str) -> int | None:
        if isinstance(self.tokens, dict):
            if domain not in self.tokens:
                raise ValueError(f"tokens has no budget for domain {domain!r}")
            return self.tokens[domain]
        return self.tokens


class EffortAnneal(Base):
    """How a `high` or `low` expert's budget shrinks from the previous effort's to its own."""

    steps: int = Field(ge=1, description="Optimizer steps from the previous effort's budget to this one's.")
    kind: Literal["linear", "step"] = Field("linear", description="Straight line or stairs.")
    every: int = Field(1, ge=1, description="Stair width in steps (kind: step).")


class ExpertsStage(RolloutStage):
    """The nine RL experts: one RL job per (domain, effort). Per domain, `max` starts from
    this stage's init checkpoint, `high` from `max` and `low` from `high`, each annealing
    its budget down from the previous effort's. Jobs of different domains run in parallel
    as far as Ray's resources allow, each in a placement group of its engines and trainers."""

    type: Literal["experts"]
    domains: dict[Domain, TaskSource] = Field(
        min_length=1, description="Task source of each domain (general, agent, coding)."
    )
    efforts: dict[Effort, EffortSpec] = Field(min_length=1, description="Budget of each effort tier (max, high, low).")
    anneal: EffortAnneal | None = Field(
        None,
        description="Budget schedule of high and low from the previous effort's; none: their own budget from step 1.",
    )
    parallel: int | None = Field(
        None, ge=1, le=1024, description="Job slots (placement groups) at most; none: one per domain."
    )
    max_attempts: int = Field(
        3,
        ge=1,
        le=100,
        description=(
            "Tries of a job whose trainer or engine actors died; each continues from the job's newest checkpoint."
        ),
    )

    @model_validator(mode="after")
    def _budgets(self) -> ExpertsStage:
        if self.budget.model_copy(update={"margin": BudgetConfig().margin}) != BudgetConfig():
            raise ValueError(
                "budget: set the budgets per effort under `efforts`; the experts stage's `budget` takes `margin` only"
            )
        for effort, spec in self.efforts.items():
            for domain in self.domains:
                try:
                    tokens = spec.tokens_for(domain) if spec.tokens is not None else None
                except ValueError as exc:
                    raise ValueError(f"efforts.{effort}: {exc}") from None
                if tokens is not None and tokens >= self.max_tokens:
                    raise ValueError(
                        f"efforts.{effort}: budget of {tokens} tokens ({domain}) needs max_tokens above it "
                        f"(is {self.max_tokens}): an over-budget response could never be generated"
                    )
        return self

    trains: ClassVar[Trains] = "jobs"
    streams_tasks: ClassVar[bool] = True

    def cells(self) -> list[tuple[str, str]]:
        """(domain, effort) of every job, in the order they can start."""
        return [(d, e) for e in EFFORT_ORDER if e in self.efforts for d in self.domains]

    def longest_steps(self) -> int:
        return max(spec.steps or self.steps for spec in self.efforts.values())

    def job_names(self) -> list[str]:
        return [f"{d}-{e}" for d, e in self.cells()]

    def task_sources(self) -> dict[str, Any]:
        return {f"domains.{name}": source for name, source in self.domains.items()}

    def job_slots(self) -> int:
        return min(self.parallel or len(self.domains), len(self.domains))


class JudgeRL(Base):
    """The judge stage's RL phase: its verdict calls, reward 1 when a reply gives the known verdict."""

    steps: int = Field(0, ge=0, le=1_000_000, description="RL steps after SFT; 0: SFT only.")
    lr: float = Field(1e-5, gt=0, le=1, description="Peak learning rate.")
    prompts_per_step: int = Field(8, ge=1, description="Verdict calls drawn per step.")
    group_size: int = Field(4, ge=2, description="Replies per call (G).")
    max_tokens: int = Field(48, ge=8, description="Most tokens of a reply.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature.")


class JudgeStage(StageBase):
    """Post-trains a judge for the generative reward model: SFT on the judge's own calls, in
    the GRM's formats, on generated cases whose verdicts are known (`data`), then (`rl.steps`)
    RL on its verdict calls, reward 1 for the known verdict. It starts from `init_from` (the
    base model unless set) and leaves the policy's line alone: the stage after it starts from
    what the stage before it made. A later GRM uses it as `judge: {type: vllm, model:
    stage:NAME}`, with `examples` as in `data` (docs/grm.md)."""

    type: Literal["judge"]
    samples_policy: ClassVar[bool] = True  # its RL phase samples from the judge on the slot's engines

    init_from: str | None = Field(
        "model", description="Checkpoint the judge starts from: `model` (the base model) or an earlier stage."
    )
    data: JudgementTasks = Field(
        default_factory=lambda: JudgementTasks(type="judgements", size=400, examples=False),
        description="The cases (and which of the judge's calls) it trains on.",
    )
    batch_size: int = Field(16, ge=1, description="SFT: conversations per optimizer step, over all ranks.")
    max_len: int = Field(512, ge=64, description="SFT: conversations are cut to this many tokens.")
    rl: JudgeRL = Field(default_factory=JudgeRL, description="The RL phase after SFT.")

    def task_sources(self) -> dict[str, Any]:
        return {"data": self.data}

    def sft_stage(self) -> SFTStage:
        """The SFT phase as an SFT stage of its own (checkpoints and metrics under NAME/sft)."""
        shared = {k: getattr(self, k) for k in StageBase.model_fields if k not in ("name", "init_from")}
        sft = SFTStage.model_validate(
            {**shared, "type": "sft", "name": "sft", "data": self.data, "batch_size": self.batch_size,
             "max_len": self.max_len}
        )  # fmt: skip
        return sft.model_copy(update={"name": f"{self.name}/sft", "init_from": None})

    def phases(self) -> list[StageSchema]:
        return [p for p in (self.sft_stage(), self.rl_stage()) if p is not None]

    def rl_stage(self) -> RLStage | None:
        """The RL phase (verdict calls of other cases than SFT's), or None without one."""
        if not self.rl.steps:
            return None
        tasks = self.data.model_copy(update={"calls": ["verdict"], "seed": self.data.seed + 1})
        settings = self.rl.model_dump()
        rl = RLStage.model_validate(
            {**settings, "type": "rl", "name": "rl", "tasks": tasks, "save_every": self.save_every,
             "keep_last": self.keep_last}
        )  # fmt: skip
        return rl.model_copy(update={"name": f"{self.name}/rl", "init_from": None})


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


class EvalStage(CheckpointlessStage):
    """Score checkpoints on held-out tasks of every (domain, effort) cell; writes
    RUN_DIR/eval.json and prints the table. An experts stage's checkpoints are each
    scored on their own cell; any other checkpoint on every cell."""

    type: Literal["eval"]
    checkpoints: list[str] = Field(min_length=1, description="Earlier stages to score (`model`: the base model).")
    experts: str | None = Field(
        None,
        description=(
            "The experts stage whose domains and effort budgets define the cells; none: the pipeline's "
            "only experts stage."
        ),
    )
    domains: dict[Domain, TaskSource] | None = Field(
        None,
        description=(
            "Held-out tasks per domain; none: the experts stage's sources with their seeds moved by `seed_offset`."
        ),
    )
    seed_offset: int = Field(
        100_003, description="Added to every task seed of the experts' sources to draw held-out tasks."
    )
    tasks_per_cell: int = Field(32, ge=1, le=100_000, description="Tasks scored per cell.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature; 0 is greedy.")
    on_overlap: Literal["fail", "drop"] = Field(
        "fail",
        description="An eval prompt that occurs in the run's training data: `fail` refuses to run (checked before "
        "the run starts, and again by the stage); `drop` scores only the unseen tasks and counts the others.",
    )

    samples_policy: ClassVar[bool] = True
    scores_tasks: ClassVar[bool] = True

    def task_sources(self) -> dict[str, Any]:
        return {f"domains.{name}": source for name, source in (self.domains or {}).items()}

    def training_sources(self, config) -> list:
        return []  # held out: what it scores is checked against the others' sources

    def check_references(self, earlier: dict[str, StageSchema], where: str) -> None:
        if self.experts is not None and not isinstance(earlier.get(self.experts), ExpertsStage):
            raise ValueError(f"{where}.experts: '{self.experts}' names no earlier experts stage")
        for j, ref in enumerate(self.checkpoints):
            if ref != "model":
                check_checkpoint_ref(earlier, ref, f"{where}.checkpoints[{j}]", whole_jobs=True)
        if self.experts is None and sum(isinstance(s, ExpertsStage) for s in earlier.values()) != 1:
            raise ValueError(
                f"{where}.experts: name the experts stage whose cells to evaluate "
                f"(earlier experts stages: {[n for n, s in earlier.items() if isinstance(s, ExpertsStage)]})"
            )


class SynthesisStage(CheckpointlessStage):
    """A teacher model writes K candidate trajectories per task (multi-turn with tools for
    agent tasks); each is verified (format, outcome, length, dedup) and some go to human
    review. The kept ones are the SFT set of a later `data: {type: synthesis}` stage."""

    scores_tasks: ClassVar[bool] = True

    type: Literal["synthesis"]
    name: str = Field(description="Stage name; the set goes to RUN_DIR/synthesis/NAME/.")
    teacher: TeacherModel = Field(description="The model that writes the trajectories.")
    tasks: TaskSource = Field(description="Tasks to write trajectories for (each is scored by its verifier).")
    candidates: int = Field(4, ge=1, le=1024, description="K: candidate trajectories per task.")
    max_tokens: int = Field(128, ge=1, description="Most teacher tokens per trajectory (all its turns).")
    temperature: float = Field(0.8, ge=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling.")
    chunk: int = Field(
        8, ge=1, le=100_000, description="Tasks generated, verified and written together (the unit a resume skips)."
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


# ---------------------------------------------------------------- the `stages` union

STAGE_SCHEMAS: dict[str, type[StageSchema]] = {}
"""Stage type -> its schema, in the order of the pipeline YAML's `stages` union. A type is
added with `posttrain.config.pipeline.register_stage_schema` (the stage registry,
`posttrain/stages/registry.py`, does it for the types it registers)."""


def add_stage_schema(schema: type[StageSchema]) -> None:
    name = schema.type_name()
    if name in STAGE_SCHEMAS and STAGE_SCHEMAS[name] is not schema:
        raise ValueError(f"stage type {name!r} is already registered ({STAGE_SCHEMAS[name].__name__})")
    STAGE_SCHEMAS[name] = schema


for _schema in (SFTStage, RLStage, ExpertsStage, MOPDStage, EvalStage, SynthesisStage, JudgeStage):
    add_stage_schema(_schema)


def stage_union() -> Any:
    """The `stages` item type: a union of every registered schema, told apart by `type`."""
    return Annotated[Union[tuple(STAGE_SCHEMAS.values())], Field(discriminator="type")]  # noqa: UP007


Stage = stage_union()
