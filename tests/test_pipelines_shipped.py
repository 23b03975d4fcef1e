"""The pipelines shipped in pipelines/ (they validate and dry-run here, through the CLI),
and `${VAR}` / `${VAR:-default}` expansion in pipeline files."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posttrain.config.files import ConfigError, dump_config, expand_env, load_pipeline

PIPELINES = Path(__file__).parent.parent / "pipelines"
SHIPPED = sorted(p.name for p in PIPELINES.glob("*.yaml"))
CLUSTER_VARS = ("POSTTRAIN_MODEL_DIR", "POSTTRAIN_JUDGE_DIR", "RAY_ADDRESS", "POSTTRAIN_NODES", "POSTTRAIN_NODE_CPUS")

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
        }
    ],
}


def write(tmp_path: Path, data: dict | str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def without_cluster_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in CLUSTER_VARS}


def cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "posttrain.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env or without_cluster_env(),
        cwd=PIPELINES.parent,
    )


# ---------------------------------------------------------------- ${VAR} expansion


def test_env_set_default_and_unset():
    env = {"MODEL": "/models/m", "EMPTY": ""}
    raw = {
        "model": {"name": "${MODEL}"},
        "a": "${NOPE:-fallback}",
        "b": "${MODEL:-unused}/x",
        "c": "${EMPTY:-was empty}",
        "d": ["x-${MODEL}-y", 3, None],
        "${MODEL}": "key kept",
    }
    out = expand_env(raw, "p.yaml", environ=env)
    assert out == {
        "model": {"name": "/models/m"},
        "a": "fallback",
        "b": "/models/m/x",
        "c": "was empty",
        "d": ["x-/models/m-y", 3, None],
        "${MODEL}": "key kept",
    }
    assert expand_env({"e": "${EMPTY}"}, "p.yaml", environ=env) == {"e": ""}  # set but empty: shell rules


def test_env_missing_is_one_line_naming_the_key():
    with pytest.raises(ConfigError) as err:
        expand_env(
            {"stages": [{"x": 1}, {"domains": {"coding": {"path": "${DATA_DIR}/c.jsonl"}}}]}, "p.yaml", environ={}
        )
    assert str(err.value) == (
        "p.yaml: stages[1].domains.coding.path: environment variable DATA_DIR is not set "
        "(set it, or give a default: ${DATA_DIR:-DEFAULT})"
    )
    for bad in ("${}", "${1X}", "${A B}", "cost ${5", "${A:default}"):
        with pytest.raises(ConfigError, match=r"^p\.yaml: k: bad environment reference") as err:
            expand_env({"k": bad}, "p.yaml", environ={"A": "1"})
        assert "\n" not in str(err.value)


def test_env_escape_is_literal_and_survives_the_resolved_config(tmp_path):
    data = {
        **GOOD,
        "name": "${POSTTRAIN_TEST_NAME:-from-default}",
        "stages": [{**GOOD["stages"][0], "data": {**GOOD["stages"][0]["data"], "prompt_suffix": " costs $${price}"}}],
    }
    config = load_pipeline(write(tmp_path, data), ["trainer.workers=1"], environ={})
    assert config.name == "from-default" and config.stages[0].data.prompt_suffix == " costs ${price}"
    resolved = tmp_path / "config.resolved.yaml"
    resolved.write_text(dump_config(config))  # what a run folder holds, and what --resume reads
    assert load_pipeline(resolved) == config


def test_env_numbers_from_strings(tmp_path):
    data = {**GOOD, "trainer": {"workers": "${POSTTRAIN_TEST_WORKERS}", "zero_stage": "${POSTTRAIN_TEST_NONE:-3}"}}
    config = load_pipeline(write(tmp_path, data), environ={"POSTTRAIN_TEST_WORKERS": "3"})
    assert config.trainer.workers == 3 and config.trainer.zero_stage == 3


def test_cli_missing_env_exits_2_with_one_line(tmp_path):
    path = write(tmp_path, "name: t\nmodel:\n  name: ${POSTTRAIN_MODEL_DIR}\nstages: []\n")
    proc = cli("validate", str(path))
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr.strip() == f"{path}: model.name: environment variable POSTTRAIN_MODEL_DIR is not set "
        "(set it, or give a default: ${POSTTRAIN_MODEL_DIR:-DEFAULT})"
    )


# ---------------------------------------------------------------- shipped pipelines


@pytest.mark.parametrize("name", SHIPPED)
def test_first_comment_line_is_the_command(name):
    first = (PIPELINES / name).read_text().splitlines()[0]
    assert first.startswith("# ") and f"posttrain run pipelines/{name}" in first, first


@pytest.mark.parametrize("name", ["smollm2.yaml", "cluster-8gpu.yaml"])
def test_validate_and_dry_run(name):
    checked = cli("validate", f"pipelines/{name}")
    assert checked.returncode == 0, checked.stderr
    resolved = yaml.safe_load(checked.stdout)
    types = [s["type"] for s in resolved["stages"]]
    # smollm2: synthesis and SFT on it first (stage 1 of the recipe), then the rest
    assert types[-4:] == ["sft", "experts", "mopd", "eval"] and types[:-4] in ([], ["synthesis", "sft"])
    assert resolved["stages"][-1]["domains"]["coding"]["split"] == "humaneval"
    assert resolved["model"]["name"] == "smollm2-135m-instruct"
    if name == "cluster-8gpu.yaml":  # no cluster to read; its dry run onto the cluster it declares (a minute
        assert resolved["ray"]["address"] == ""  # and more: every training prompt listed) is test_gpupath's
        return
    plan = cli("run", "--dry-run", f"pipelines/{name}")
    assert plan.returncode == 0, plan.stderr
    assert "stage experts (experts): 9 jobs" in plan.stdout and "stage mopd (mopd)" in plan.stdout
    # no cluster named: a local Ray, nothing started
    assert "local Ray (started by `posttrain run`)" in plan.stdout and "slot 0: node local" in plan.stdout


def test_cluster_template_takes_model_and_cluster_from_the_environment(tmp_path):
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    env = {**without_cluster_env(), "POSTTRAIN_MODEL_DIR": str(model), "RAY_ADDRESS": "auto"}
    config = load_pipeline(PIPELINES / "cluster-8gpu.yaml", environ=env)
    assert config.model.name == str(model) and config.ray.address == "auto"
    assert config.trainer.zero_stage == 3 and config.trainer.num_gpus == 1 and config.rollout.num_gpus == 1
    assert config.stages[1].reward.grm.judge.model == "smollm2-135m-instruct"
    env["POSTTRAIN_MODEL_DIR"] = str(tmp_path / "absent")
    with pytest.raises(ConfigError, match="model.name: model path does not exist: .*absent"):
        load_pipeline(PIPELINES / "cluster-8gpu.yaml", environ=env)


def test_cluster_template_puts_one_slot_on_each_8_gpu_node():
    from posttrain.runtime.slots import plan, slot_bundles

    config = load_pipeline(PIPELINES / "cluster-8gpu.yaml", environ=without_cluster_env())
    assert sum(b.get("GPU", 0) for b in slot_bundles(config)) == 8
    nodes = [{"node": n, "resources": {"CPU": 64, "GPU": 8}} for n in ("head", "w1", "w2")]
    assert [p["node"] for p in plan(config, nodes, 3)] == ["head", "w1", "w2"]
    assert [p["node"] for p in plan(config, nodes[:1] + [{"node": "cpu", "resources": {"CPU": 64}}], 2)] == [
        "head",
        None,
    ]


# ---------------------------------------------------------------- one node of 8 GPUs


def gpu_lines(stdout: str) -> dict[str, str]:
    """Each stage's GPU line of a dry run, by stage name."""
    out, stage = {}, None
    for line in stdout.splitlines():
        if line.startswith("stage ") and "(" in line:
            stage = line.split()[1]
        elif line.strip().startswith("GPUs: ") and stage:
            out[stage] = line.strip()
    return out


def test_the_recipe_fits_one_8_gpu_node_with_every_gpu_in_use_in_every_stage():
    env = {**without_cluster_env(), "POSTTRAIN_NODES": "1"}
    checked = cli("validate", "pipelines/node-8gpu.yaml", env=env)
    assert checked.returncode == 0, checked.stderr
    plan = cli("run", "--dry-run", "pipelines/node-8gpu.yaml", env=env)
    assert plan.returncode == 0, plan.stderr
    lines = gpu_lines(plan.stdout)
    assert list(lines) == ["sft", "experts", "mopd", "eval"], plan.stdout
    for stage, line in lines.items():
        assert line.startswith("GPUs: 8 of 8 in use (") and line.endswith("; 0 idle"), (stage, line)
        roles = dict(part.rsplit(" ", 1) for part in line.split("(", 1)[1].split(")")[0].split(", "))
        assert sum(float(n) for n in roles.values()) == 8, (stage, roles)
    assert "engines" not in lines["sft"] and "judge" not in lines["sft"]  # SFT: trainer ranks alone
    assert "teachers 2" in lines["mopd"] and "judge" not in lines["mopd"]


def test_the_cluster_template_shows_the_gpus_slot_0_holds_idle_through_sft():
    from posttrain.config.resources import declared_nodes, stage_gpus

    config = load_pipeline(PIPELINES / "cluster-8gpu.yaml", environ=without_cluster_env())
    sft = stage_gpus(config, config.stages[0], declared_nodes(config.ray))
    assert sft.used == {"trainer ranks": 4} and sft.held_idle == {"engines": 3, "judge": 1} and sft.idle == 20


def test_a_stage_slot_larger_than_any_node_is_refused_in_one_line(tmp_path):
    data = expand_env(yaml.safe_load((PIPELINES / "node-8gpu.yaml").read_text()), "node-8gpu.yaml", environ={})
    data["stages"][0]["slot"] = {"trainer_workers": 9}
    checked = cli("validate", str(write(tmp_path, data)))
    assert checked.returncode == 2
    assert len(checked.stderr.strip().splitlines()) == 1, checked.stderr
    assert "stages[0] (sft): its slot (ray.placement: per_stage)" in checked.stderr
    assert "{CPU: 36, GPU: 9} (9 trainer ranks" in checked.stderr
    assert "stages[0].slot.engines or .trainer_workers" in checked.stderr


def test_a_stage_slot_needs_per_stage_placement(tmp_path):
    data = {**GOOD, "stages": [{**GOOD["stages"][0], "slot": {"trainer_workers": 2}}]}
    checked = cli("validate", str(write(tmp_path, data)))
    assert checked.returncode == 2 and "stages[0].slot: " in checked.stderr
    assert "need ray.placement: per_stage" in checked.stderr
