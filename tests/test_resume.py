"""A run killed with SIGKILL mid-RL resumes from its newest checkpoint with its
partial-rollout queue, its data position and its optimizer state; finished stages are
not rerun, and the sample accounting stays whole across the restart."""

import json
import os
import signal
import time

import pytest
import yaml
from cli_process import start_cli

PIPELINE = {
    "name": "resume",
    "model": {"name": "tiny"},
    "rollout": {"max_model_len": 96},
    "trainer": {"workers": 2},
    "stages": [
        {
            "name": "sft",
            "type": "sft",
            "steps": 4,
            "lr": 1e-3,
            "batch_size": 8,
            "save_every": 2,
            "data": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}], "size": 40},
        },
        {
            "name": "grpo",
            "type": "rl",
            "steps": 40,
            "lr": 1e-4,
            "prompts_per_step": 4,
            "group_size": 2,
            "max_tokens": 24,
            "save_every": 2,
            # budgets of 1..3x the answer length make responses end at different lengths, so
            # lambda = 0.5 leaves cut trajectories in the queue at every checkpoint
            "budget": {"multiple": 2.0, "margin": 0.5},
            "partial": {"lambda": 0.5, "max_staleness": 8},
            "tasks": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}], "size": 40, "seed": 3},
        },
    ],
}


def cli(*args, **kw):
    return start_cli(*args, **kw)


@pytest.mark.timeout(1100)  # waits up to 400 s for the checkpoint and 600 s for the resumed run
def test_sigkill_then_resume_carries_the_queue(tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PIPELINE))
    run = tmp_path / "run"
    proc = cli("run", str(tmp_path / "p.yaml"), "--run-dir", str(run))
    marker = run / "checkpoints" / "grpo" / "step_000004" / "rollout_state.json"
    deadline = time.time() + 400
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert marker.exists(), proc.communicate()[0][-3000:] if proc.poll() is not None else "timed out"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    saved = {
        int(p.name.split("_")[1]): json.loads((p / "rollout_state.json").read_text())
        for p in (run / "checkpoints" / "grpo").glob("step_*")
    }
    newest = max(saved)
    queue = json.loads(saved[newest]["queue"])
    assert any(t["finish_reason"] is None for g in queue["groups"] for t in g["trajectories"]), (
        "no cut trajectory saved"
    )

    resumed = cli("run", "--resume", str(run))
    out = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, out[-3000:]
    assert f"resuming from {run}/checkpoints/grpo/step_{newest:06d}" in out

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    sft_steps = [r["step"] for r in rows if r["stage"] == "sft"]
    assert sft_steps == [1, 2, 3, 4]  # the finished SFT stage was not rerun
    grpo = [r for r in rows if r["stage"] == "grpo"]
    assert [r["step"] for r in grpo] == list(range(1, 41))
    first_after = grpo[newest]  # step newest + 1
    assert first_after["samples/drawn"] > queue["drawn"]  # counters continue from the saved queue
    for r in grpo:
        assert r["samples/drawn"] == r["samples/trained"] + r["samples/queued"] + r["samples/dropped"]
    saved = [json.loads(line) for line in (run / "rollouts" / "grpo.jsonl").read_text().splitlines()]
    ids = [r["sample"] for r in saved]
    assert sorted({r["step"] for r in saved}) == list(range(1, 41)) and len(ids) == len(set(ids))  # redone, not doubled
    replaced = run / "rollouts" / "grpo.replaced.jsonl"
    assert not replaced.exists() or all(json.loads(line)["step"] > newest for line in replaced.read_text().splitlines())
    state = json.loads((run / "run_state.json").read_text())
    assert state["stages"]["grpo"]["status"] == "done" and state["stages"]["grpo"]["resumed_from"]
