"""Stage schemas of the recipe past SFT: the nine experts (effort budgets and their
annealing), MOPD (its teachers and their pool), the judge stage, and eval over the experts'
(domain, effort) cells. The stages they build on are in `stages.py`."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from posttrain.config.algo import BudgetConfig
from posttrain.config.base import Base
from posttrain.config.stages import (
    CheckpointlessStage,
    RLStage,
    RolloutStage,
    SFTStage,
    StageBase,
    StageSchema,
    Trains,
    check_checkpoint_ref,
)
from posttrain.config.tasks import JudgementTasks, TaskSource

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
        default="hf", description="hf: a forward pass in transformers; vllm: a prompt-logprobs pass in a vLLM engine."
    )
    memory_gib: float = Field(
        default=4.0, gt=0, le=100_000, description="Memory budget of the resident teachers, all together."
    )
    overhead_gib: float = Field(
        default=0.5,
        ge=0,
        le=1024,
        description=(
            "Memory a worker takes besides its weights (runtime, activations; vllm: plus its KV cache, "
            "per engine); raised to what is measured."
        ),
    )
    num_cpus: float = Field(
        default=0, ge=0, description="Ray CPUs reserved per teacher worker process (they run between rollouts)."
    )
    num_gpus: float = Field(
        default=0,
        ge=0,
        description="Ray GPUs per teacher worker process (vllm: at most 1; a share lets teachers pack).",
    )
    gpu_memory_utilization: float = Field(
        default=0.4, gt=0, le=1, description="vllm on GPU: share of its GPU's memory each teacher engine takes."
    )
    max_resident: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="Most teachers loaded at once besides memory_gib (least recently used unloaded first); "
        "none: memory_gib alone decides.",
    )
    micro_batch_tokens: int = Field(
        default=4096, ge=16, description="Most tokens (padded) per forward pass of the hf backend."
    )

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
        default=None,
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
        default=0.0, ge=0, le=100, description="Weight of the outcome (verifier) advantage added to the teacher's."
    )
    teacher_pool: TeacherPoolConfig = Field(default_factory=TeacherPoolConfig, description="Where teachers run.")
    distill_topk: int = Field(
        default=0,
        ge=0,
        le=4096,
        description=(
            "Each teacher also returns its k most likely next tokens at every position of the student's "
            "sample, and the loss adds the forward KL from that top-k to the student's distribution "
            "(exact when k is the vocabulary size): the student learns the teacher's choice at each "
            "position, also the tokens it never samples (an early stop, a longer form). 0: the sampled "
            "tokens' reverse KL alone."
        ),
    )
    distill_coef: float = Field(
        default=1.0, gt=0, le=100, description="Weight of the top-k KL term (with distill_topk)."
    )

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
        if self.dynamic_sampling is not None:
            raise ValueError(
                "dynamic_sampling does not apply to MOPD: the teacher's per-token advantage is dense, so a group "
                "whose rewards are all equal still teaches (set it on the rl or experts stages)"
            )
        return self

    def task_sources(self) -> dict[str, Any]:
        return {f"domains.{name}": source for name, source in self.domains.items()}

    def distill_weight(self) -> float:
        return self.distill_coef if self.distill_topk else 0.0

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
        default=None, description="Absolute budget per response; one number, or one per domain."
    )
    multiple: float | None = Field(
        default=None, gt=0, description="Budget as a multiple of the task's reference answer length."
    )
    steps: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="Optimizer steps of this effort's jobs; none: the stage's `steps`.",
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
    kind: Literal["linear", "step"] = Field(default="linear", description="Straight line or stairs.")
    every: int = Field(default=1, ge=1, description="Stair width in steps (kind: step).")


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
        default=None,
        description="Budget schedule of high and low from the previous effort's; none: their own budget from step 1.",
    )
    parallel: int | None = Field(
        default=None, ge=1, le=1024, description="Job slots (placement groups) at most; none: one per domain."
    )
    max_attempts: int = Field(
        default=3,
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

    def distill_weight(self) -> float:
        return self.distill_coef if self.distill_topk else 0.0

    def job_slots(self) -> int:
        return min(self.parallel or len(self.domains), len(self.domains))


class JudgeRL(Base):
    """The judge stage's RL phase: its verdict calls, reward 1 when a reply gives the known verdict."""

    steps: int = Field(default=0, ge=0, le=1_000_000, description="RL steps after SFT; 0: SFT only.")
    lr: float = Field(default=1e-5, gt=0, le=1, description="Peak learning rate.")
    prompts_per_step: int = Field(default=8, ge=1, description="Verdict calls drawn per step.")
    group_size: int = Field(default=4, ge=2, description="Replies per call (G).")
    max_tokens: int = Field(default=48, ge=8, description="Most tokens of a reply.")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature.")


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
        default="model", description="Checkpoint the judge starts from: `model` (the base model) or an earlier stage."
    )
    data: JudgementTasks = Field(
        default_factory=lambda: JudgementTasks(type="judgements", size=400, examples=False),
        description="The cases (and which of the judge's calls) it trains on.",
    )
    batch_size: int = Field(default=16, ge=1, description="SFT: conversations per optimizer step, over all ranks.")
    max_len: int = Field(default=512, ge=64, description="SFT: conversations are cut to this many tokens.")
    decision_weight: float = Field(
        default=1.0,
        ge=1.0,
        le=1000.0,
        description="SFT: the loss weight of a reply's decision token (the verdict's yes/no, the 1-10 score) "
        "against 1 for every other reply token.",
    )
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
        """The RL phase (the decision calls, verdict and pairwise as `data.calls` asks, of other
        cases than SFT's), or None without one."""
        if not self.rl.steps:
            return None
        calls = [c for c in self.data.calls if c in ("verdict", "pairwise")] or ["verdict"]
        tasks = self.data.model_copy(update={"calls": calls, "seed": self.data.seed + 1})
        settings = self.rl.model_dump()
        rl = RLStage.model_validate(
            {**settings, "type": "rl", "name": "rl", "tasks": tasks, "save_every": self.save_every,
             "keep_last": self.keep_last}
        )  # fmt: skip
        return rl.model_copy(update={"name": f"{self.name}/rl", "init_from": None})


class EvalStage(CheckpointlessStage):
    """Score checkpoints on held-out tasks of every (domain, effort) cell; writes
    RUN_DIR/eval.json and prints the table. An experts stage's checkpoints are each
    scored on their own cell; any other checkpoint on every cell."""

    type: Literal["eval"]
    checkpoints: list[str] = Field(min_length=1, description="Earlier stages to score (`model`: the base model).")
    experts: str | None = Field(
        default=None,
        description=(
            "The experts stage whose domains and effort budgets define the cells; none: the pipeline's "
            "only experts stage."
        ),
    )
    domains: dict[Domain, TaskSource] | None = Field(
        default=None,
        description=(
            "Held-out tasks per domain; none: the experts stage's sources with their seeds moved by `seed_offset`."
        ),
    )
    seed_offset: int = Field(
        default=100_003, description="Added to every task seed of the experts' sources to draw held-out tasks."
    )
    tasks_per_cell: int = Field(default=32, ge=1, le=100_000, description="Tasks scored per cell.")
    temperature: float = Field(default=0.0, ge=0, description="Sampling temperature; 0 is greedy.")
    on_overlap: Literal["fail", "drop"] = Field(
        default="fail",
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
        name = self.experts or next(n for n, s in earlier.items() if isinstance(s, ExpertsStage))
        grm = earlier[name].reward.grm
        if grm is not None and grm.method == "pairwise":
            raise ValueError(
                f"{where}: the experts stage '{name}' judges open-ended tasks pairwise (reward.grm.method: pairwise), "
                "comparing the responses to one task with each other; the eval writes one response per task, which "
                "that judge cannot score. Give the experts stage reward.grm.method: rubric to evaluate its cells"
            )
