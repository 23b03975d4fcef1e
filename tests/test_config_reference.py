"""The config reference and `posttrain config explain` are generated from the schemas: every
field of every schema a pipeline can reach appears, with its real default and bounds."""

import subprocess
import sys

from posttrain.config.algo import GRPOConfig
from posttrain.config.infra import TrainerConfig
from posttrain.config.pipeline import PipelineConfig
from posttrain.config.reference import _children, explain, markdown, merged, pipeline_keys


def _reachable(model, seen=None):
    seen = seen if seen is not None else set()
    if model in seen:
        return seen
    seen.add(model)
    for field in model.model_fields.values():
        for child in _children(field.annotation)[1]:
            _reachable(child, seen)
    return seen


def test_every_field_of_every_reachable_schema_is_documented():
    documented = {(k.owner, k.path.rpartition(".")[2]) for k in pipeline_keys()}
    schemas = _reachable(PipelineConfig)
    assert len(schemas) > 40
    missing = [(m.__name__, f) for m in schemas for f in m.model_fields if (m.__name__, f) not in documented]
    assert not missing
    page = markdown()
    assert all(f"## {m.__name__}" in page for m in schemas)


def test_explain_gives_the_schema_default_and_bounds():
    (key,) = explain("trainer.micro_batch_tokens")
    field = TrainerConfig.model_fields["micro_batch_tokens"]
    assert key.default == repr(field.default) and key.type == "int"
    assert ">= 16" in key.constraints
    (clip,) = merged(explain("stages[3].algo.clip_eps_lo"))  # an index, and one key for every stage type
    assert clip.default == repr(GRPOConfig.model_fields["clip_eps_lo"].default)
    assert set(clip.variant.split("type: ")[1].split("|")) == {"rl", "experts", "mopd"}
    assert explain("no_such_key") == []


def test_config_explain_through_the_cli():
    cli = [sys.executable, "-m", "posttrain.cli", "config", "explain"]
    ok = subprocess.run([*cli, "clip_eps_hi"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "stages[].algo.clip_eps_hi" in ok.stdout and "default: 0.28" in ok.stdout
    bad = subprocess.run([*cli, "clip_eps_hgh"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no pipeline key 'clip_eps_hgh'" in bad.stderr and not bad.stdout
