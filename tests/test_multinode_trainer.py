"""A trainer group across nodes, on a real 2-node Ray cluster started on this machine (the
same `LocalCluster` as the cluster tests, a head and one worker of 2 CPUs each): two ranks
of 2 CPUs each cannot share a node, so with `trainer.span_nodes` Ray places them on both
and they train over gloo, meeting at rank 0's node address. The driver is `posttrain run`
connected to the cluster's address. Without `span_nodes` the same slot is refused before
anything starts, naming the key."""

import math
from pathlib import Path

import pytest
import yaml
from ray_cluster import LocalCluster, cli

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = {
    "name": "spread",
    "model": {"name": "tiny"},
    "trainer": {"workers": 2, "num_cpus": 2, "zero_stage": 2, "span_nodes": True},
    "stages": [
        {
            "name": "sft",
            "type": "sft",
            "steps": 4,
            "lr": 3e-3,
            "batch_size": 8,
            "data": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}], "size": 32},
        }
    ],
}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_trainer_ranks_on_two_nodes_train_together(tmp_path):
    local = LocalCluster({"head": (2, {}), "node_a": (2, {})}, env={"PYTHONPATH": str(ROOT)})
    try:
        local.start()
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(PIPELINE))
        env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": local.token()}
        run = cli(
            "run",
            str(tmp_path / "p.yaml"),
            "--run-dir",
            str(tmp_path / "run"),
            "-o",
            f"ray.address=127.0.0.1:{local.gcs_port}",
            env=env,
            timeout=800,
        )
    finally:
        local.stop()
    logs = run.stdout + run.stderr
    assert run.returncode == 0, logs[-3000:]
    said = next(line for line in logs.splitlines() if "[trainer] 2 ranks on 2 nodes" in line)
    nodes = {local.node_name(part.split(" on ")[1]) for part in said.split(": ", 1)[1].split(", ")}
    assert nodes == {"head", "node_a"}, said
    losses = [float(line.split(" loss ")[1].split()[0]) for line in logs.splitlines() if "[sft] step" in line]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses), logs[-2000:]
    assert losses[-1] < losses[0], losses  # it learns: both ranks' gradients averaged across the nodes
    assert (tmp_path / "run" / "checkpoints" / "sft" / "final" / "config.json").is_file()


def test_a_slot_larger_than_a_node_needs_span_nodes(tmp_path):
    declared = {**PIPELINE, "ray": {"nodes": 2, "node_cpus": 2}}
    (tmp_path / "spread.yaml").write_text(yaml.safe_dump(declared))
    placed = cli("validate", str(tmp_path / "spread.yaml"), timeout=120)
    assert placed.returncode == 0, placed.stderr[-2000:]
    one = {**declared, "trainer": {**PIPELINE["trainer"], "span_nodes": False}}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(one))
    refused = cli("validate", str(tmp_path / "one.yaml"), timeout=120)
    assert refused.returncode == 2 and "trainer.span_nodes: true" in refused.stderr, refused.stderr
    three = {**declared, "trainer": {**PIPELINE["trainer"], "workers": 3}}  # 6 CPUs on 2 nodes of 2: never
    (tmp_path / "three.yaml").write_text(yaml.safe_dump(three))
    never = cli("validate", str(tmp_path / "three.yaml"), timeout=120)
    assert never.returncode == 2 and "even spread across them" in never.stderr, never.stderr
