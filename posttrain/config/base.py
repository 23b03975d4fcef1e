"""Shared pieces of the config schemas: the strict base model and model-name checks."""

from __future__ import annotations

import re
from pathlib import Path

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
