"""The GRM's config outside a pipeline run (`rewards try`, `rewards audit`):
read from the file `--reward` names (a `grm` mapping, a `reward:` mapping or a pipeline),
or the default small vLLM judge where none is named."""

from __future__ import annotations

from pydantic import ValidationError

from posttrain.config import GRMConfig, RewardConfig, RLStage
from posttrain.config.files import ConfigError, format_validation_error, read_yaml, validate_pipeline

DEFAULT_JUDGE = {"type": "vllm", "model": "smollm2-135m-instruct"}


def load_grm_config(path: str | None) -> GRMConfig:
    """A GRM config from a YAML file holding a `grm` mapping, a whole `reward:` mapping
    (`{grm: ...}`), or a pipeline (its first RL stage with a GRM); none: the default judge."""
    if path is None:
        return GRMConfig(judge=DEFAULT_JUDGE)
    raw = read_yaml(path)
    if "stages" in raw:
        config = validate_pipeline(raw, str(path))
        found = [s.reward.grm for s in config.stages if isinstance(s, RLStage) and s.reward.grm is not None]
        if not found:
            raise ConfigError(f"{path}: no RL stage has reward.grm")
        return found[0]
    try:
        grm = RewardConfig.model_validate(raw).grm if "grm" in raw else GRMConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(path), exc)) from None
    if grm is None:
        raise ConfigError(f"{path}: grm is empty")
    return grm
