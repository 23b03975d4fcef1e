"""Stage schemas of the pipeline YAML (sft, rl, experts, mopd, eval) and the algorithm
settings they share (advantage, loss, partial rollouts, token budgets)."""

from __future__ import annotations

import re
from typing import Annotated, Literal, Union

from pydantic import ConfigDict, Field, field_validator, model_validator

from posttrain.config_base import Base
from posttrain.config_reward import RewardConfig
from posttrain.config_tasks import SFTSource, TaskSource


# ---------------------------------------------------------------- algorithms


class GRPOConfig(Base):
    """GRPO advantages with the PPO-clip loss (RECIPE.md, RL objective)."""

    type: Literal["grpo"] = "grpo"
    std_normalize: bool = Field(True, description="Divide by the group std; false is Dr.GRPO.")
    eps: float = Field(1e-6, gt=0, description="Added to the group std.")
    clip_eps_lo: float = Field(0.2, gt=0, lt=1, description="Lower clip: ratio >= 1 - clip_eps_lo.")
    clip_eps_hi: float = Field(0.28, gt=0, description="Upper clip: ratio <= 1 + clip_eps_hi.")
    kl_beta: float = Field(0.0, ge=0, description="Weight of the k3 KL penalty to the reference model.")


class TISCorrection(Base):
    """Truncated importance sampling: w = min(pi_old / mu, cap) on stale tokens."""

    type: Literal["tis"] = "tis"
    cap: float = Field(2.0, gt=0, description="C, the most a token's weight can be.")


class MaskCorrection(Base):
    """w = 0 on stale tokens whose pi_old / mu falls outside [lo, hi], else 1."""

    type: Literal["mask"]
    lo: float = Field(0.5, ge=0, description="Lowest ratio kept.")
    hi: float = Field(2.0, gt=0, description="Highest ratio kept.")

    @model_validator(mode="after")
    def _ordered(self) -> "MaskCorrection":
        if self.lo >= self.hi:
            raise ValueError(f"lo ({self.lo}) must be < hi ({self.hi})")
        return self


class ExcludeCorrection(Base):
    """Stale tokens (from an older policy version) are left out of the loss."""

    type: Literal["exclude"]


Correction = Annotated[Union[TISCorrection, MaskCorrection, ExcludeCorrection], Field(discriminator="type")]


class PartialRolloutConfig(Base):
    """Partial rollouts (RECIPE.md): an iteration stops once a fraction lambda of its
    trajectories has finished; the rest wait in the queue and continue later."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    lam: float = Field(1.0, gt=0, le=1, alias="lambda", description="Fraction finished that ends an iteration; 1 is synchronous.")
    max_staleness: int = Field(4, ge=0, description="Most policy versions a trajectory's oldest token may lag before it is dropped.")
    correction: Correction = Field(default_factory=TISCorrection, description="Off-policy correction of stale tokens.")


class AnnealConfig(Base):
    """Budget schedule: from `start` to `end` tokens over `steps` optimizer steps."""

    start: int = Field(ge=1, description="Budget at the first step.")
    end: int = Field(ge=1, description="Budget from step `steps` on.")
    steps: int = Field(ge=1, description="Length of the schedule in optimizer steps.")
    kind: Literal["linear", "step"] = Field("linear", description="Straight line or stairs.")
    every: int = Field(1, ge=1, description="Stair width in steps (kind: step).")


class BudgetConfig(Base):
    """Token budget of an effort tier: over budget means reward -1 (RECIPE.md)."""

    effort: Literal["low", "high", "max"] | None = Field(None, description="Effort tier, stated in the system prompt.")
    tokens: int | None = Field(None, ge=1, description="Absolute budget per response.")
    multiple: float | None = Field(None, gt=0, description="Budget as a multiple of the task's reference answer length.")
    anneal: AnnealConfig | None = Field(None, description="Schedule of the absolute budget; replaces `tokens`.")
    margin: float = Field(0.25, ge=0, le=10, description="Generation stops at budget x (1 + margin).")

    @model_validator(mode="after")
    def _one_kind(self) -> "BudgetConfig":
        kinds = [k for k in ("tokens", "multiple", "anneal") if getattr(self, k) is not None]
        if len(kinds) > 1:
            raise ValueError(f"give one of tokens, multiple, anneal (got {', '.join(kinds)})")
        return self


# ---------------------------------------------------------------- stages


class StageBase(Base):
    name: str = Field(description="Stage name; checkpoints go to RUN_DIR/checkpoints/NAME.")
    init_from: str | None = Field(None, description="Earlier stage whose final checkpoint starts this one; `model`: the base model; none: the previous stage, or the model for the first stage.")
    lr: float = Field(gt=0, le=1, description="Peak learning rate.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    steps: int = Field(ge=1, le=10_000_000, description="Optimizer steps.")
    save_every: int = Field(0, ge=0, description="Checkpoint every N steps; 0: only at the end.")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
            raise ValueError("must be letters, digits, '_', '.', '-' (at most 64)")
        if name == "model":
            raise ValueError("'model' is reserved (init_from: model means the base model)")
        return name


class SFTStage(StageBase):
    """Supervised fine-tuning on chat data: next-token loss on assistant tokens."""

    type: Literal["sft"]
    data: SFTSource = Field(description="Where the chat data comes from.")
    batch_size: int = Field(32, ge=1, description="Conversations per optimizer step, over all ranks.")
    max_len: int = Field(512, ge=8, description="Conversations are cut to this many tokens.")


class RolloutStage(StageBase):
    """What every stage that samples from the policy shares (RL and MOPD)."""

    algo: GRPOConfig = Field(default_factory=GRPOConfig, description="Advantage and loss.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Answer extraction.")
    prompts_per_step: int = Field(16, ge=1, description="Prompts drawn per step.")
    group_size: int = Field(8, ge=2, description="Samples per prompt (G).")
    max_tokens: int = Field(64, ge=1, description="Most tokens generated per response.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling.")
    partial: PartialRolloutConfig = Field(default_factory=PartialRolloutConfig, description="Partial-rollout queue.")
    budget: BudgetConfig = Field(default_factory=BudgetConfig, description="Token budget and effort tier.")


class RLStage(RolloutStage):
    """RL with verifiable rewards: generate -> score -> advantage -> train -> sync."""

    type: Literal["rl"]
    tasks: TaskSource = Field(description="Prompts and how they are scored.")

    @model_validator(mode="after")
    def _budget_fits(self) -> "RLStage":
        b = self.budget
        largest = b.tokens or (max(b.anneal.start, b.anneal.end) if b.anneal else None)
        if largest is not None and largest >= self.max_tokens:
            raise ValueError(f"budget of {largest} tokens needs max_tokens above it (is {self.max_tokens}): "
                             "an over-budget response could never be generated")
        return self


Effort = Literal["low", "high", "max"]
DOMAIN_NAME = r"[a-z][a-z0-9_]{0,31}"


class TeacherSpec(Base):
    """One teacher of MOPD: the expert checkpoint of a (domain, effort) cell."""

    domain: str = Field(description="Domain; its tasks come from the stage's `domains`.")
    effort: Effort = Field(description="Effort tier, stated in the system prompt of its prompts.")
    checkpoint: str = Field(description="The expert's model folder, or `stage:NAME` for the final checkpoint of an earlier stage of the pipeline.")

    @property
    def teacher_id(self) -> str:
        return f"{self.domain}-{self.effort}"


class TeacherPoolConfig(Base):
    """Inference-only teacher workers (Ray actors) that score the student's tokens; at most
    `memory_gib` of them are resident, the least recently used is unloaded first."""

    backend: Literal["hf", "vllm"] = Field("hf", description="hf: a forward pass in transformers; vllm: a prompt-logprobs pass in a vLLM engine.")
    memory_gib: float = Field(4.0, gt=0, le=100_000, description="Memory budget of the resident teachers, all together.")
    overhead_gib: float = Field(0.5, ge=0, le=1024, description="Memory a teacher worker takes besides its weights (runtime, activations; vllm: plus its KV cache).")
    num_cpus: float = Field(0, ge=0, description="Ray CPUs reserved per teacher worker (they run between rollouts).")
    num_gpus: float = Field(0, ge=0, description="Ray GPUs reserved per teacher worker.")
    micro_batch_tokens: int = Field(4096, ge=16, description="Most tokens (padded) per forward pass of the hf backend.")


class MOPDStage(RolloutStage):
    """Multi-teacher on-policy distillation (RECIPE.md, MOPD): the student samples prompts
    of every (domain, effort) cell and each token is rewarded by its cell's teacher:
    A_t = sg[log pi_T - log pi_student] + alpha * A_outcome."""

    type: Literal["mopd"]
    domains: dict[str, TaskSource] = Field(min_length=1, description="Task source of each domain.")
    teachers: list[TeacherSpec] = Field(min_length=1, description="One teacher per (domain, effort) cell.")
    effort_max_tokens: dict[Effort, int] = Field(default_factory=dict, description="Most tokens per response of each effort; missing: max_tokens.")
    alpha: float = Field(0.0, ge=0, le=100, description="Weight of the outcome (verifier) advantage added to the teacher's.")
    teacher_pool: TeacherPoolConfig = Field(default_factory=TeacherPoolConfig, description="Where teachers run.")

    @field_validator("domains")
    @classmethod
    def _domain_names(cls, domains: dict) -> dict:
        for name in domains:
            if not re.fullmatch(DOMAIN_NAME, name):
                raise ValueError(f"domain name {name!r} must be lowercase letters, digits and '_'")
        return domains

    @model_validator(mode="after")
    def _cells(self) -> "MOPDStage":
        seen = set()
        for i, t in enumerate(self.teachers):
            if t.domain not in self.domains:
                raise ValueError(f"teachers[{i}]: unknown domain {t.domain!r} (domains: {', '.join(self.domains)})")
            if t.teacher_id in seen:
                raise ValueError(f"teachers[{i}]: a second teacher for cell {t.teacher_id}")
            seen.add(t.teacher_id)
        if self.temperature != 1.0:
            raise ValueError("temperature must be 1.0: the reverse KL to the teacher needs samples from the "
                             "student's own distribution")
        if any(v < 1 for v in self.effort_max_tokens.values()):
            raise ValueError("effort_max_tokens must be >= 1")
        return self


Stage = Annotated[Union[SFTStage, RLStage, MOPDStage], Field(discriminator="type")]
