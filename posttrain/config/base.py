"""Shared pieces of the config schemas: the strict base model and model-name checks."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

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
