"""A run killed with SIGKILL mid-RL resumes from its newest checkpoint with its
partial-rollout queue, its data position and its optimizer state; finished stages are
not rerun, and the sample accounting stays whole across the restart (checked against the
saved rollouts, tests/sample_accounting.py)."""

import json
import os
import signal
import time

import pytest
import yaml
from cli_process import start_cli
from sample_accounting import assert_accounting_matches_rollouts

# 12 steps after the kill at step 4's checkpoint (an idle machine runs a step in about a second;
# the kill lands within a step of the checkpoint): enough to resume, redo and checkpoint again.
STEPS = 16
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
            "steps": STEPS,
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
@pytest.mark.system
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
    assert [r["step"] for r in grpo] == list(range(1, STEPS + 1))
    first_after = grpo[newest]  # step newest + 1
    assert first_after["samples/drawn"] > queue["drawn"]  # counters continue from the saved queue
    assert_accounting_matches_rollouts(run, "grpo", group_size=2)
    saved = [json.loads(line) for line in (run / "rollouts" / "grpo.jsonl").read_text().splitlines()]
    ids = [r["sample"] for r in saved]
    # redone, not doubled
    assert sorted({r["step"] for r in saved}) == list(range(1, STEPS + 1)) and len(ids) == len(set(ids))
    replaced = run / "rollouts" / "grpo.replaced.jsonl"
    assert not replaced.exists() or all(json.loads(line)["step"] > newest for line in replaced.read_text().splitlines())
    state = json.loads((run / "run_state.json").read_text())
    assert state["stages"]["grpo"]["status"] == "done" and state["stages"]["grpo"]["resumed_from"]

    # The data position came back: every checkpoint, before the kill and after the resume, has
    # drawn one task per group the queue counts (a sampler restarted at 0 would be behind).
    checkpoints = sorted((run / "checkpoints" / "grpo").glob("step_*"))
    after = [c for c in checkpoints if int(c.name.split("_")[1]) > newest]
    assert after, "no checkpoint written after the resume"
    for folder in checkpoints:
        saved_state = json.loads((folder / "rollout_state.json").read_text())
        drawn = json.loads(saved_state["queue"])["drawn"]
        assert saved_state["sampler_position"] * PIPELINE["stages"][1]["group_size"] == drawn, (folder.name, drawn)
    # The optimizer state came back: at a checkpoint after the resume, the engine's step count
    # and AdamW's own (its bias correction) count every optimizer step of the stage, those
    # before the kill included (one per step that trained: minibatches and epochs are 1).
    stepped = [r["step"] for r in grpo if not (r["train/skipped_empty"] or r["train/skipped_nonfinite"])]
    for folder in (run / "checkpoints" / "grpo" / f"step_{newest:06d}", after[0]):
        expected = sum(s <= int(folder.name.split("_")[1]) for s in stepped)
        assert optimizer_steps(folder) == {"engine": expected, "adamw": expected}, folder.name


def optimizer_steps(checkpoint) -> dict[str, int]:
    """DeepSpeed's global step count and AdamW's per-parameter `step`, from a checkpoint."""
    import torch

    state_dir = checkpoint / "deepspeed" / "state"
    engine = torch.load(state_dir / "mp_rank_00_model_states.pt", map_location="cpu", weights_only=False)
    [optim_file] = sorted(state_dir.glob("*zero_pp_rank_0_*optim_states.pt"))
    optim = torch.load(optim_file, map_location="cpu", weights_only=False)
    steps = {int(s) for s in _values_named("step", optim["optimizer_state_dict"]["base_optimizer_state"])}
    assert len(steps) == 1, steps  # every parameter group stepped together
    return {"engine": int(engine["global_steps"]), "adamw": steps.pop()}


def _values_named(key: str, tree):
    if isinstance(tree, dict):
        for k, v in tree.items():
            if k == key and not isinstance(v, (dict, list, tuple)):
                yield v
            else:
                yield from _values_named(key, v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _values_named(key, v)
