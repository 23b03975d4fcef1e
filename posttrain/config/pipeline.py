"""The whole pipeline's schema: the model and stages, with the infrastructure sections
(rollout engines, trainer ranks, Ray, wandb, health) from `infra.py`.

A pipeline YAML parses into `PipelineConfig`. Every model uses `extra="forbid"`, so a
misspelt key is an error; `posttrain.config.files` reads files and turns any problem into
one line naming the file, the key path and the problem. This module imports no heavy
library (torch, ray, vllm, deepspeed); a test checks that.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from posttrain.config.base import Base, model_name
from posttrain.config.infra import HealthConfig, RayConfig, RolloutConfig, TrainerConfig, WandbConfig
from posttrain.config.stage_union import STAGE_SCHEMAS, Stage, add_stage_schema, stage_union
from posttrain.config.stages import RLStage, SFTStage, StageSchema

# ---------------------------------------------------------------- model


class TinyModelConfig(Base):
    """Shape of the `tiny` model built in code (Llama-style, tied embeddings)."""

    layers: int = Field(default=2, ge=1, le=48, description="Transformer blocks.")
    hidden: int = Field(default=128, ge=64, le=8192, description="Hidden size; a multiple of head_dim.")
    heads: int = Field(default=2, ge=1, le=128, description="Attention heads.")
    kv_heads: int = Field(
        default=2, ge=1, le=128, description="Key/value heads (grouped-query attention when < heads)."
    )
    intermediate: int = Field(default=256, ge=1, le=65536, description="MLP inner size.")
    vocab_size: int = Field(
        default=512, ge=300, le=65536, description="Size of the locally trained byte-level BPE vocabulary."
    )
    max_position: int = Field(default=512, ge=64, le=131072, description="Longest sequence the model accepts.")

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyModelConfig:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if (self.hidden // self.heads) % 32:
            raise ValueError("hidden / heads (the head dim) must be a multiple of 32 for vLLM's CPU attention")
        return self


class ModelConfig(Base):
    """Which model the pipeline starts from."""

    name: str = Field(
        description=(
            "`tiny`, `smollm2-135m-instruct`, a hub id (`org/name`, from the local Hugging Face cache or "
            "downloaded), or a local Hugging Face model folder."
        )
    )
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig, description="Shape when name is `tiny`.")
    seed: int = Field(default=0, description="Seed of the tiny model's initial weights.")
    dtype: Literal["float32", "bfloat16"] = Field(
        default="float32", description="Trainer and engine dtype; float32 keeps them in agreement."
    )

    @field_validator("name")
    @classmethod
    def _known_or_folder(cls, name: str) -> str:
        return model_name(name)


# ---------------------------------------------------------------- pipeline


class PipelineConfig(Base):
    """A whole pipeline: a model, the infrastructure, and stages run in order."""

    name: str = Field(default="pipeline", description="Pipeline name.")
    plugins: list[str] = Field(
        default=[],
        description="Your own modules (`my_stage` in the folder you run from, or `path/to/file.py`), imported "
        "before the stages are read: a stage type, verifier or task source they register can be used here.",
    )
    seed: int = Field(default=0, description="Seed of data order and sampling.")
    model: ModelConfig
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    health: HealthConfig = Field(default_factory=HealthConfig, description="RL health checks and their thresholds.")
    stages: list[Stage] = Field(min_length=1, description="Stages, run in order.")

    @model_validator(mode="after")
    def _stage_references(self) -> PipelineConfig:
        seen: dict[str, object] = {}
        for i, stage in enumerate(self.stages):
            where = f"stages[{i}] ({stage.name})"
            if stage.name in seen:
                raise ValueError(f"{where}: duplicate stage name '{stage.name}'")
            stage.check_references(seen, where)
            seen[stage.name] = stage
        return self

    @model_validator(mode="after")
    def _overlap_fits(self) -> PipelineConfig:
        """Overlapped generation trains on batches one policy version old, and the engines and
        trainer ranks must not be pinned to the same cores."""
        shared = set(self.rollout.cores or ()) & set(self.trainer.cores or ())
        if shared:
            raise ValueError(
                f"trainer.cores: cores {sorted(shared)} are also in rollout.cores; engines and trainer ranks "
                "pinned to the same cores take turns on them"
            )
        if self.rollout.overlap:
            for index, stage in enumerate(self.stages):
                partial = getattr(stage, "partial", None)
                if partial is not None and partial.max_staleness < 1:
                    raise ValueError(
                        f"stages[{index}].partial.max_staleness: rollout.overlap trains on batches one policy "
                        "version old; max_staleness must be >= 1 (0 would drop every one)"
                    )
        return self

    @model_validator(mode="after")
    def _bf16_needs_zero(self) -> PipelineConfig:
        if self.model.dtype == "bfloat16" and self.trainer.zero_stage == 0:
            raise ValueError(
                "trainer.zero_stage: model.dtype bfloat16 needs zero_stage >= 1: only DeepSpeed's ZeRO optimizers "
                "keep fp32 master weights and accumulate gradients in fp32 (at stage 0 both would be bf16)"
            )
        return self

    @model_validator(mode="after")
    def _stage_slots_need_per_stage(self) -> PipelineConfig:
        if self.ray.placement == "per_stage":
            return self
        for index, stage in enumerate(self.stages):
            if stage.slot.engines is not None or stage.slot.trainer_workers is not None:
                raise ValueError(
                    f"stages[{index}].slot: a stage's own engines and trainer ranks need ray.placement: per_stage "
                    "(with ray.placement: pipeline, slot 0 holds rollout.engines and trainer.workers for every stage)"
                )
        return self

    @model_validator(mode="after")
    def _placeable(self) -> PipelineConfig:
        """On the cluster the file declares (ray.nodes, node_gpus, node_cpus), every slot and
        teacher must fit somewhere: an impossible placement group waits forever, silently."""
        from posttrain.config.resources import declared_nodes, placement_problems

        nodes = declared_nodes(self.ray)
        if nodes is not None:
            problems = placement_problems(self, nodes, whole=self.ray.nodes is not None)
            if problems:
                raise ValueError(f"{problems[0]} (declared cluster: {_declared(self.ray)})")
        return self

    def stage(self, name: str) -> SFTStage | RLStage:
        return next(s for s in self.stages if s.name == name)


def _declared(ray: RayConfig) -> str:
    sizes = (("node_gpus", ray.node_gpus), ("node_cpus", ray.node_cpus))
    size = ", ".join(f"{key}: {value:g}" for key, value in sizes if value is not None)
    return f"ray.nodes: {ray.nodes}, {size}" if ray.nodes else size


def register_stage_schema(schema: type[StageSchema]) -> None:
    """Add a stage type's schema to the pipeline YAML's `stages` union: pipelines validated
    from now on may use its `type:`. The stage registry (`posttrain/stages/registry.py`)
    calls this for each type it registers."""
    add_stage_schema(schema)
    _rebuild_stages()


def unregister_stage_schema(name: str) -> None:
    """Take a registered stage type out of the union again (a test's toy type)."""
    STAGE_SCHEMAS.pop(name)
    _rebuild_stages()


def _rebuild_stages() -> None:
    PipelineConfig.model_fields["stages"].annotation = list[stage_union()]
    PipelineConfig.model_rebuild(force=True)
