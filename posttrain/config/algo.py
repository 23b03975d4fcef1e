"""Algorithm settings the RL stages share: GRPO advantage and loss, the off-policy
corrections of stale tokens, partial rollouts, dynamic sampling, and effort token budgets with their
schedules (docs/recipe.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from posttrain.config.base import Base


class GRPOConfig(Base):
    """GRPO advantages with the PPO-clip loss (docs/recipe.md, RL objective)."""

    type: Literal["grpo"] = "grpo"
    std_normalize: bool = Field(default=True, description="Divide by the group std; false is Dr.GRPO.")
    eps: float = Field(default=1e-6, gt=0, description="Added to the group std.")
    clip_eps_lo: float = Field(default=0.2, gt=0, lt=1, description="Lower clip: ratio >= 1 - clip_eps_lo.")
    clip_eps_hi: float = Field(default=0.28, gt=0, description="Upper clip: ratio <= 1 + clip_eps_hi.")
    kl_beta: float = Field(default=0.0, ge=0, description="Weight of the k3 KL penalty to the reference model.")
    minibatches: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Optimizer steps per batch (PPO minibatches); the clip acts from the second.",
    )
    epochs: int = Field(default=1, ge=1, le=100, description="Passes over the batch's minibatches (PPO epochs).")
    entropy_coef: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Weight of the entropy bonus, -weight x the policy's mean entropy per trained token (0: "
        "none); with entropy_target, the adaptive weight's start.",
    )
    entropy_target: float | None = Field(
        default=None,
        gt=0,
        description="Adaptive entropy bonus (Skywork-OR1; nats per token): after each step the weight moves by "
        "entropy_coef_step, up if the step's `policy/entropy` was at or below this, down if above, within "
        "[0, entropy_coef_max], and the bonus acts only on a step after one at or below it. None: the fixed "
        "weight entropy_coef on every step.",
    )
    entropy_coef_step: float = Field(
        default=0.005, gt=0, le=1, description="How much the adaptive weight moves per step."
    )
    entropy_coef_max: float = Field(default=1.0, gt=0, le=1, description="The most the adaptive weight reaches.")

    @model_validator(mode="after")
    def _start_within_the_range(self) -> GRPOConfig:
        if self.entropy_target is not None and self.entropy_coef > self.entropy_coef_max:
            raise ValueError(
                f"entropy_coef ({self.entropy_coef}) is the adaptive weight's start: it must be <= "
                f"entropy_coef_max ({self.entropy_coef_max})"
            )
        return self


class TISCorrection(Base):
    """Truncated importance sampling: w = min(pi_old / mu, cap) on stale tokens."""

    type: Literal["tis"] = "tis"
    cap: float = Field(default=2.0, gt=0, description="C, the most a token's weight can be.")
    fresh: bool = Field(
        default=False, description="Correct fresh tokens too: the engine/trainer mismatch of one policy version (bf16)."
    )


class MaskCorrection(Base):
    """w = 0 on stale tokens whose pi_old / mu falls outside [lo, hi], else 1."""

    type: Literal["mask"]
    lo: float = Field(default=0.5, ge=0, description="Lowest ratio kept.")
    hi: float = Field(default=2.0, gt=0, description="Highest ratio kept.")
    fresh: bool = Field(
        default=False, description="Correct fresh tokens too: the engine/trainer mismatch of one policy version (bf16)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> MaskCorrection:
        if self.lo >= self.hi:
            raise ValueError(f"lo ({self.lo}) must be < hi ({self.hi})")
        return self


class ExcludeCorrection(Base):
    """Stale tokens (from an older policy version) are left out of the loss."""

    type: Literal["exclude"]

    @model_validator(mode="before")
    @classmethod
    def _no_fresh(cls, data):
        if isinstance(data, dict) and "fresh" in data:
            raise ValueError("fresh: exclude would drop every fresh token; correct the mismatch with tis or mask")
        return data


Correction = Annotated[TISCorrection | MaskCorrection | ExcludeCorrection, Field(discriminator="type")]


class PartialRolloutConfig(Base):
    """Partial rollouts (docs/recipe.md): an iteration stops once a fraction lambda of its
    trajectories has finished; the rest wait in the queue and continue later."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    lam: float = Field(
        default=1.0,
        gt=0,
        le=1,
        alias="lambda",
        description="Fraction finished that ends an iteration; 1 is synchronous.",
    )
    max_staleness: int = Field(
        default=4, ge=0, description="Most policy versions a trajectory's oldest token may lag before it is dropped."
    )
    correction: Correction = Field(default_factory=TISCorrection, description="Off-policy correction of stale tokens.")


class DynamicSamplingConfig(Base):
    """DAPO's dynamic sampling: a group whose rewards are all equal has zero advantage and
    teaches nothing, so it is set aside (counted as dropped, `zero_signal`) and more rollout
    iterations are drawn through the partial-rollout queue until the step holds
    `prompts_per_step` groups with signal, or `max_draws` extra iterations were drawn."""

    max_draws: int = Field(
        default=4,
        ge=1,
        le=64,
        description=(
            "Most extra rollout iterations per step; at the cap the step trains the groups with signal it has "
            "(`groups/short` says how many it lacked)."
        ),
    )


class AnnealConfig(Base):
    """Budget schedule: from `start` to `end` tokens over `steps` optimizer steps."""

    start: int = Field(ge=1, description="Budget at the first step.")
    end: int = Field(ge=1, description="Budget from step `steps` on.")
    steps: int = Field(ge=1, description="Length of the schedule in optimizer steps.")
    kind: Literal["linear", "step"] = Field(default="linear", description="Straight line or stairs.")
    every: int = Field(default=1, ge=1, description="Stair width in steps (kind: step).")


class BudgetConfig(Base):
    """Token budget of an effort tier: over budget means reward -1 (docs/recipe.md)."""

    effort: Literal["low", "high", "max"] | None = Field(
        default=None, description="Effort tier, stated in the system prompt."
    )
    tokens: int | None = Field(default=None, ge=1, description="Absolute budget per response.")
    multiple: float | None = Field(
        default=None, gt=0, description="Budget as a multiple of the task's reference answer length."
    )
    anneal: AnnealConfig | None = Field(default=None, description="Schedule of the absolute budget; replaces `tokens`.")
    margin: float = Field(default=0.25, ge=0, le=10, description="Generation stops at budget x (1 + margin).")

    @model_validator(mode="after")
    def _one_kind(self) -> BudgetConfig:
        kinds = [k for k in ("tokens", "multiple", "anneal") if getattr(self, k) is not None]
        if len(kinds) > 1:
            raise ValueError(f"give one of tokens, multiple, anneal (got {', '.join(kinds)})")
        return self
