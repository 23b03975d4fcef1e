"""End to end through the CLI: a short SFT + GRPO pipeline on the tiny model, on real
Ray, vLLM and DeepSpeed (world size 2), and the run folder it leaves."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PIPELINE = {
    "name": "e2e",
    "model": {"name": "tiny"},
    "rollout": {"max_model_len": 320},
    "trainer": {"workers": 2, "zero_stage": 2},
    "stages": [
        {
            "name": "sft",
            "type": "sft",
            "steps": 4,
            "lr": 1e-3,
            "batch_size": 8,
            "data": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}], "size": 50},
        },
        {
            "name": "grpo",
            "type": "rl",
            "steps": 3,
            "lr": 1e-4,
            "prompts_per_step": 4,
            "group_size": 4,
            "max_tokens": 6,
            "save_every": 2,
            "tasks": {
                "type": "mixture",
                "sources": [
                    {
                        "type": "reasoning_gym",
                        "families": [
                            {"name": "basic_arithmetic", "params": {"max_digits": 1}},
                            {"name": "simple_equations"},
                        ],
                        "size": 50,
                        "seed": 5,
                    },
                    {"type": "coding", "size": 20, "seed": 5},
                    {"type": "agent", "size": 10, "seed": 5, "families": ["calculator"], "system_prompt": ""},
                ],
            },
        },
        {
            "name": "grpo_low",
            "type": "rl",
            "init_from": "sft",
            "steps": 1,
            "lr": 1e-4,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_tokens": 4,
            "budget": {"effort": "low"},
            "tasks": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 20, "seed": 6},
        },
        {
            "name": "mopd",
            "type": "mopd",
            "init_from": "sft",
            "steps": 2,
            "lr": 1e-4,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_tokens": 6,
            "save_every": 1,
            "effort_max_tokens": {"low": 4},
            "domains": {"general": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 20}},
            "teachers": [
                {"domain": "general", "effort": "max", "checkpoint": "stage:grpo"},
                {"domain": "general", "effort": "low", "checkpoint": "stage:grpo_low"},
            ],
        },
    ],
}
REQUIRED = ["reward/mean", "response_tokens/mean", "logp/mismatch", "sync/seconds", "throughput/tokens_per_s"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    (root / "p.yaml").write_text(yaml.safe_dump(PIPELINE))
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "run", str(root / "p.yaml"), "--run-dir", str(root / "run")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run"


def test_metrics_have_every_required_field_each_step(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    grpo = [r for r in rows if r["stage"] == "grpo"]
    assert [r["step"] for r in grpo] == [1, 2, 3]
    assert [r["step"] for r in rows if r["stage"] == "sft"] == [1, 2, 3, 4]
    for row in grpo:
        assert all(key in row for key in REQUIRED + ["stage", "step", "time"]), row.keys()
        assert row["logp/mismatch"] < 1e-4
    for row in grpo + [r for r in rows if r["stage"] == "mopd"]:  # RL and MOPD steps log the policy's entropy
        assert 0 < row["policy/entropy"] < math.log(512), row  # at most ln V (the tiny vocabulary)


def test_rewards_came_from_every_verifier(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sources = set()
    for r in rows:
        sources |= {k.split("/")[1] for k in r if k.startswith("reward_source/")}
    # (writing prompts, GRM-scored, need `reward.grm`: without one validate refuses the file,
    # tests/test_validate_refusals.py)
    assert {"reasoning_gym", "code", "agent"} == sources, sources


def test_resolved_config_and_state(run_dir):
    resolved = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    assert resolved["trainer"]["zero_stage"] == 2 and resolved["stages"][1]["algo"]["type"] == "grpo"
    state = json.loads((run_dir / "run_state.json").read_text())
    assert [s["status"] for s in state["stages"].values()] == ["done"] * 4
    assert state["stages"]["grpo"]["init_from"].endswith("sft/final")


def test_checkpoints_load_in_transformers(run_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for folder in (run_dir / "checkpoints/grpo/final", run_dir / "checkpoints/grpo/step_000002"):
        model = AutoModelForCausalLM.from_pretrained(folder)
        tok = AutoTokenizer.from_pretrained(folder)
        ids = tok("Calculate 1 + 2.", return_tensors="pt")["input_ids"]
        assert torch.isfinite(model(ids).logits).all()


def test_checkpoints_hold_what_their_stage_trained(run_dir):
    """A checkpoint is not its starting weights: SFT's moved from the initial model towards its
    data (a lower loss on the stage's own conversations), GRPO's from SFT's wherever a step had
    a group with an advantage (a batch of equal rewards has no gradient)."""
    import numpy as np
    from safetensors.numpy import load_file

    state = json.loads((run_dir / "run_state.json").read_text())
    initial = Path(state["model"])

    def moved(a: Path, b: Path) -> float:
        wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
        assert wa.keys() == wb.keys()
        return max(float(np.abs(wa[k] - wb[k]).max()) for k in wa)

    sft = run_dir / "checkpoints/sft/final"
    assert moved(initial, sft) > 0
    assert sft_loss(sft) < sft_loss(initial) - 0.1, (sft_loss(sft), sft_loss(initial))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for folder, last in ((run_dir / "checkpoints/grpo/step_000002", 2), (run_dir / "checkpoints/grpo/final", 3)):
        learned = any(r["groups/zero_advantage_frac"] < 1 for r in rows if r["stage"] == "grpo" and r["step"] <= last)
        assert (moved(sft, folder) > 0) == learned, folder.name


def sft_loss(folder) -> float:
    """Token-mean NLL of the SFT stage's conversations (its assistant tokens) under a model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.algo.losses import token_logprobs
    from posttrain.config.files import validate_pipeline
    from posttrain.stages.sft import sft_conversations, sft_sequences

    stage = validate_pipeline(PIPELINE).stages[0]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    seqs = sft_sequences(AutoTokenizer.from_pretrained(folder), sft_conversations(stage)[:16], stage.max_len)
    total, tokens = 0.0, 0.0
    with torch.no_grad():
        for s in seqs:
            ids = torch.tensor([s.token_ids])
            logp = token_logprobs(model(input_ids=ids).logits[:, :-1], ids[:, 1:])[0, s.prompt_len - 1 :]
            mask = torch.tensor(s.loss_mask)
            total -= float((logp * mask).sum())
            tokens += float(mask.sum())
    return total / tokens


def test_mopd_stage_distils_the_earlier_stages(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    mopd = [r for r in rows if r["stage"] == "mopd"]
    assert [r["step"] for r in mopd] == [1, 2]
    assert {
        "mopd/reverse_kl/general-max",
        "mopd/reverse_kl/general-low",
        "response_tokens/low",
        "teacher_pool/loads",
    } <= set(mopd[-1])
    for folder in ("final", "step_000001"):
        manifest = json.loads((run_dir / "checkpoints/mopd" / folder / "mopd_manifest.json").read_text())
        assert [t["checkpoint"] for t in manifest["teachers"]] == [
            str((run_dir / "checkpoints" / name / "final").resolve()) for name in ("grpo", "grpo_low")
        ]
