"""The synthesis stage's parts: the teacher model that writes trajectories, the checks
each trajectory passes (format, outcome, length, dedup) and the human review queue."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from posttrain.config.base import Base, model_name


class TeacherModel(Base):
    """The model that writes the candidate trajectories, on vLLM engine actors of its own
    (it may differ from the pipeline's model)."""

    model: str = Field(description="`tiny`, `smollm2-135m-instruct`, or a local Hugging Face model folder.")
    dtype: Literal["float32", "bfloat16"] = Field(default="float32", description="Engine dtype.")
    engines: int = Field(default=1, ge=1, le=1024, description="Engine actors; tasks are spread across them.")
    max_model_len: int = Field(
        default=512, ge=16, le=1_048_576, description="Longest prompt + trajectory an engine holds."
    )
    kv_cache_gib: float = Field(default=1.0, gt=0, le=1024, description="KV cache size on CPU.")
    num_cpus: float = Field(
        default=0, ge=0, description="Ray CPUs per engine; 0: it runs while the trainer ranks wait."
    )
    num_gpus: float = Field(default=0, ge=0, description="Ray GPUs per engine.")
    seed: int = Field(default=0, description="Engine sampling seed.")

    @field_validator("model")
    @classmethod
    def _known_or_folder(cls, name: str) -> str:
        return model_name(name)


class FormatCheck(Base):
    """The trajectory reads back through the serialization template, every assistant turn
    is closed, every tool call is well formed (known tool, its arguments), and the last
    turn is an answer, not a call."""

    enabled: bool = Field(default=True, description="Run this check.")


class OutcomeCheck(Base):
    """The task's verifier (or the GRM, for tasks without one) scores the trajectory."""

    enabled: bool = Field(default=True, description="Run this check.")
    threshold: float = Field(
        default=1.0, ge=-1, le=1, description="Lowest verifier score that passes (verifiers score 0..1)."
    )
    grm_threshold: float = Field(
        default=0.5, ge=-1, le=1, description="Lowest GRM score that passes (GRM scores -1..1)."
    )


class LengthCheck(Base):
    """Length limits on the assistant tokens of the trajectory (in the pipeline model's tokens)."""

    enabled: bool = Field(default=True, description="Run this check.")
    min_tokens: int = Field(default=1, ge=0, description="Fewest assistant tokens.")
    max_tokens: int = Field(default=512, ge=1, description="Most assistant tokens.")


class DedupCheck(Base):
    """A trajectory whose assistant turns (whitespace and case folded) repeat an earlier
    kept one of the same task is rejected."""

    enabled: bool = Field(default=True, description="Run this check.")
    across_tasks: bool = Field(
        default=False, description="Compare with kept trajectories of every task, not only the same task's."
    )


class VerifyConfig(Base):
    """Verification stages, run in this order; each records its verdict per trajectory."""

    format: FormatCheck = Field(default_factory=FormatCheck)
    outcome: OutcomeCheck = Field(default_factory=OutcomeCheck)
    length: LengthCheck = Field(default_factory=LengthCheck)
    dedup: DedupCheck = Field(default_factory=DedupCheck)


class ReviewConfig(Base):
    """Which trajectories wait for a person (`posttrain review RUN_DIR`)."""

    fraction: float = Field(
        default=0.0, ge=0, le=1, description="Random share of the passing trajectories sent to review."
    )
    near_threshold: float = Field(
        default=0.0,
        ge=0,
        le=2,
        description=(
            "Trajectories whose outcome score differs from the threshold by more than 0 and at most "
            "this (either side) go to review, if every other check passed."
        ),
    )
    wait: bool = Field(
        default=False,
        description=(
            "Stop the pipeline after this stage while the queue is not empty (review, then `posttrain "
            "run --resume`); false: pending ones are left out of the SFT set."
        ),
    )
    seed: int = Field(default=0, description="Seed of the random share.")
