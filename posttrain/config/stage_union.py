"""The pipeline YAML's `stages` item type: every registered stage schema, told apart by
`type`. The built-in schemas are registered here; others with
`posttrain.config.pipeline.register_stage_schema`."""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field

from posttrain.config.recipe_stages import EvalStage, ExpertsStage, JudgeStage, MOPDStage
from posttrain.config.stages import RLStage, SFTStage, StageSchema, SynthesisStage

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
