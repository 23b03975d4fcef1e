"""Shared pieces of the config schemas: the strict base model and model-name checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar, get_args

from pydantic import BaseModel, ConfigDict

BUILTIN_MODELS = ("tiny", "smollm2-135m-instruct")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hub_id(name: str) -> bool:
    """`org/name` that is not a local path: resolved through the Hugging Face cache."""
    return bool(HUB_ID.fullmatch(name)) and not Path(name).expanduser().exists()


def model_name(name: str) -> str:
    """A built-in model name, a hub id (`org/name`, resolved when the run starts), or a
    local folder that holds a config.json."""
    if name in BUILTIN_MODELS or is_hub_id(name):
        return name
    folder = Path(name).expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"model path does not exist: {name} (or give a hub id `org/name`, or one of: {', '.join(BUILTIN_MODELS)})"
        )
    if not (folder / "config.json").is_file():
        raise ValueError(f"model folder has no config.json: {name}")
    return name


class Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceSchema(Base):
    """What every task source (and SFT data) schema answers about itself, as class facts and
    pure methods, so that the code that opens sources asks the source instead of its type.
    How a source's tasks are built, checked and held out is in the task-source table
    (`posttrain/data/registry.py`)."""

    holds_tasks: ClassVar[bool] = True
    """It holds tasks that are drawn and scored; False: conversation data for SFT."""

    @classmethod
    def type_name(cls) -> str:
        """The `type:` of this schema in the pipeline YAML (its `type` literal)."""
        return get_args(cls.model_fields["type"].annotation)[0]

    def parts(self) -> dict[str, SourceSchema]:
        """Its leaf sources by the key path below it: itself (`""`), or a mixture's sources
        (`.sources[K]`)."""
        return {"": self}
