"""`ray.placement: per_stage` on real Ray, vLLM and DeepSpeed, through the CLI: each stage
reserves a placement group of only the roles it uses, sized by its `slot`, and gives it
back when it ends (SFT on one trainer rank and no engine; RL on its engine and two ranks,
from SFT's checkpoint)."""

import json
import re
import subprocess
import sys

import pytest
import yaml

PIPELINE = {
    "name": "per-stage",
    "model": {"name": "tiny"},
    "ray": {"placement": "per_stage"},
    "rollout": {"max_model_len": 256, "num_cpus": 1},
    "trainer": {"workers": 2, "zero_stage": 2, "num_cpus": 1},
    "stages": [
        {
            "name": "sft",
            "type": "sft",
            "slot": {"trainer_workers": 1},
            "steps": 2,
            "lr": 1e-3,
            "batch_size": 4,
            "data": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}], "size": 20},
        },
        {
            "name": "grpo",
            "type": "rl",
            "steps": 1,
            "lr": 1e-4,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_tokens": 4,
            "tasks": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 20, "seed": 5},
        },
    ],
}


@pytest.mark.slow
def test_each_stage_reserves_only_its_roles_and_gives_them_back(tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PIPELINE))
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "run", str(tmp_path / "p.yaml"), "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    granted = dict(re.findall(r"^\[(\w+)\] its own slot: .* = (\{.*?\}) on node", proc.stdout, re.M))
    # Ray's record of each placement group: SFT one trainer rank, no engine; RL its engine and two ranks
    assert granted == {"sft": "{'CPU': 1.0}", "grpo": "{'CPU': 3.0}"}, proc.stdout[-3000:]
    assert "[sft] its own slot: 1 trainer rank x {'CPU': 1.0} = " in proc.stdout  # no engine, no judge
    state = json.loads((tmp_path / "run" / "run_state.json").read_text())
    assert [s["status"] for s in state["stages"].values()] == ["done", "done"]
    assert state["stages"]["grpo"]["init_from"].endswith("checkpoints/sft/final")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("stage") == "grpo" and "sync/seconds" in r for r in rows)  # weights reached its engine
