"""Config parsing and the one-line errors of `posttrain run` on broken files."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posttrain.config.files import ConfigError, load_pipeline, parse_override

GOOD = {
    "name": "t",
    "model": {"name": "tiny"},
    "stages": [
        {
            "name": "sft",
            "type": "sft",
            "steps": 2,
            "lr": 1e-3,
            "data": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 4},
        },
        {
            "name": "grpo",
            "type": "rl",
            "steps": 2,
            "lr": 1e-4,
            "tasks": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 4},
        },
    ],
}


def write(tmp_path: Path, data, name="p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def broken(**changes):
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    for dotted, value in changes.items():
        node = data
        parts = dotted.split(".")
        for p in parts[:-1]:
            node = node[int(p)] if p.isdigit() else node[p]
        node[parts[-1]] = value
    return data


def test_good_config_loads_with_defaults(tmp_path):
    config = load_pipeline(write(tmp_path, GOOD))
    assert config.trainer.zero_stage == 2 and config.stages[1].algo.type == "grpo"
    assert config.stages[1].group_size == 8


@pytest.mark.parametrize(
    "data, expected",
    [
        (broken(**{"stages.1.lr": -1}), "p.yaml: stages[1].lr: must be > 0"),
        (broken(**{"stages.1.lr": "fast"}), "p.yaml: stages[1].lr: "),
        (broken(**{"stages.0.colour": 1}), "p.yaml: stages[0].colour: unknown key"),
        (broken(**{"trainer": {"zero_stage": 5}}), "p.yaml: trainer.zero_stage: must be <= 3"),
        (broken(**{"stages.1.type": "ppo"}), "p.yaml: stages[1]: unknown type 'ppo'"),
        (broken(**{"stages.1.init_from": "nope"}), "stages[1] (grpo).init_from: 'nope' names no earlier stage"),
        (
            broken(**{"model": {"name": "/no/such/folder"}}),
            "p.yaml: model.name: model path does not exist: /no/such/folder",
        ),
        (broken(**{"stages.1.group_size": 1}), "p.yaml: stages[1].group_size: must be >= 2"),
        (broken(**{"stages": []}), "p.yaml: stages: must have at least 1 item(s)"),
        ("a: [1, 2\n", "p.yaml: invalid YAML: line 2"),
        ("", "p.yaml: file is empty"),
        ("- 1\n- 2\n", "p.yaml: top level must be a mapping"),
        (b"\xff\xfe\x00garbage", "p.yaml: not UTF-8"),
    ],
)
def test_errors_name_file_key_and_problem(tmp_path, data, expected):
    path = tmp_path / "p.yaml"
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    message = str(info.value)
    assert expected in message
    assert "\n" not in message


def renamed(path: str, new: str):
    """GOOD with the key at `path` (dotted) renamed to `new`: a typo of the key."""
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    *parents, old = path.split(".")
    node = data
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    node[new] = node.pop(old)
    return data


@pytest.mark.parametrize(
    "data, expected",
    [
        # a typo of a required key: pydantic reports the missing key first; the typo is what to fix
        (renamed("stages.1.steps", "step"), "p.yaml: stages[1].step: unknown key; did you mean 'steps'?"),
        (renamed("stages.0.lr", "lrate"), "p.yaml: stages[0].lrate: unknown key; did you mean 'lr'?"),
        (
            renamed("stages.1.tasks.families", "familes"),
            "stages[1].tasks.familes: unknown key; did you mean 'families'?",
        ),
        (renamed("model.name", "nmae"), "p.yaml: model.nmae: unknown key; did you mean 'name'?"),
        # a typo of the key that picks the variant
        (renamed("stages.1.type", "typ"), "p.yaml: stages[1]: needs a `type:` key; did you mean 'type' for 'typ'?"),
        (
            renamed("stages.1.tasks.type", "tpye"),
            "stages[1].tasks: needs a `type:` key; did you mean 'type' for 'tpye'?",
        ),
    ],
)
def test_a_misspelt_required_key_gets_a_did_you_mean(tmp_path, data, expected):
    with pytest.raises(ConfigError) as info:
        load_pipeline(write(tmp_path, data))
    assert str(info.value).endswith(expected), str(info.value)


def test_overrides(tmp_path):
    config = load_pipeline(write(tmp_path, GOOD), ["stages[1].steps=7", "trainer.workers=1", "stages.0.lr=0.5"])
    assert config.stages[1].steps == 7 and config.trainer.workers == 1 and config.stages[0].lr == 0.5
    assert parse_override("a.b[2].c=x") == (["a", "b", 2, "c"], "x")
    with pytest.raises(ConfigError, match="no item 9"):
        load_pipeline(write(tmp_path, GOOD), ["stages[9]=1"])
    with pytest.raises(ConfigError, match="stages\\[1\\].steps: must be >= 1"):
        load_pipeline(write(tmp_path, GOOD), ["stages[1].steps=0"])


@pytest.mark.parametrize(
    "data, key",
    [
        (broken(**{"stages.1.lr": 0}), "stages[1].lr: must be > 0"),
        (broken(**{"stages.1.tasks.families": [{"name": "no_such_family"}]}), "stages[1].tasks.families[0]:"),
        ("stages: [oops\n", "invalid YAML"),
    ],
)
def test_cli_prints_one_line_and_exits_2(tmp_path, data, key):
    path = write(tmp_path, data)
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "run", str(path), "--run-dir", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(str(path)) and key in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


def test_config_imports_no_heavy_library():
    code = (
        "import sys, posttrain.config, posttrain.config.files, posttrain.config.jobs, posttrain.types, posttrain.cli; "
        "heavy = [m for m in ('torch', 'ray', 'vllm', 'deepspeed', 'transformers') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_existing_run_folder_is_moved_aside_not_overwritten(tmp_path):
    from posttrain.records.run_state import claim_run_dir

    run = tmp_path / "run"
    assert claim_run_dir(run) is None and run.is_dir()
    (run / "metrics.jsonl").write_text("{}\n")
    moved = claim_run_dir(run)
    assert moved is not None and (moved / "metrics.jsonl").read_text() == "{}\n"
    assert run.is_dir() and not any(run.iterdir())
    (run / "x").write_text("1")
    second = claim_run_dir(run)
    assert second != moved and (second / "x").exists() and (moved / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    "budget, message",
    [
        ({"tokens": 10, "multiple": 2.0}, "give one of tokens, multiple, anneal"),
        ({"tokens": 64}, "needs max_tokens above it"),
        ({"anneal": {"start": 100, "end": 10, "steps": 5}}, "needs max_tokens above it"),
        ({"effort": "medium"}, "stages[1].budget.effort: must be one of"),
    ],
)
def test_budget_errors(tmp_path, budget, message):
    data = broken(**{"stages.1.budget": budget, "stages.1.max_tokens": 64})
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_pipeline(write(tmp_path, data))


def test_partial_lambda_key_round_trips(tmp_path):
    from posttrain.config.files import dump_config, validate_pipeline

    config = load_pipeline(
        write(tmp_path, broken(**{"stages.1.partial": {"lambda": 0.5, "correction": {"type": "mask"}}}))
    )
    assert config.stages[1].partial.lam == 0.5
    again = validate_pipeline(yaml.safe_load(dump_config(config)))
    assert again == config and "lambda: 0.5" in dump_config(config)
    with pytest.raises(ConfigError, match=r"stages\[1\]\.partial\.lambda: must be <= 1"):
        load_pipeline(write(tmp_path, broken(**{"stages.1.partial": {"lambda": 1.5}})))
