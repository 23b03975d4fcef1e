"""A real run whose own environment fails (issue 56, item 1): SFT on the gold episodes
teaches the tiny model to call the shop's tool; in RL the tool returns a dict, raises or
hangs, by task. Each step shows it where the user looks: the faults line on the console,
the `env/*` counts and `time/env_s` in metrics.jsonl, the health flags; the faults pass
their share, so the run stops with exit 1 naming the cause, and `rewards show --fault`
lists the samples. The same for a reward function that raises or hangs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}:{FIXTURES}"}
TIMEOUT_S = 3


def posttrain(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "posttrain.cli", *args],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=timeout,
    )


def shop_pipeline() -> dict:
    tasks = {"type": "env", "env": "fault_envs:Shop", "timeout_s": TIMEOUT_S, "max_turns": 2}
    return {
        "name": "faults",
        "seed": 0,
        "model": {"name": "tiny"},
        "rollout": {"engines": 1, "max_model_len": 256, "kv_cache_gib": 0.25},
        "trainer": {"workers": 1},
        "wandb": {"enabled": False},
        "stages": [
            {
                "name": "sft",
                "type": "sft",
                "data": {**tasks, "size": 64},
                "steps": 40,
                "batch_size": 16,
                "lr": 3.0e-3,
                "max_len": 256,
            },
            {
                "name": "rl",
                "type": "rl",
                "tasks": {
                    **tasks,
                    "size": 30,
                    "seed": 1,
                    "args": {"modes": ["dict", "raise", "hang"], "gold": False},
                    "gold_check": False,
                },
                "steps": 6,
                "prompts_per_step": 3,
                "group_size": 2,
                "max_tokens": 48,
                "lr": 1.0e-5,
                "temperature": 0.3,
            },
        ],
    }


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.timeout(1500)
def test_an_environment_that_fails_is_shown_each_step_and_stops_the_run(tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(shop_pipeline()))
    run = tmp_path / "run"
    proc = posttrain("run", str(tmp_path / "p.yaml"), "--run-dir", str(run), timeout=1400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2], out[-4000:]  # stopped after faults_stop_after (2) steps
    for r in rl:
        assert r["env/errors"] > 0 and r["samples/total"] == 6.0, r
        assert r["samples/faulted_frac"] > 0.5 and r["health/faults"] == r["samples/faulted_frac"]
        assert r["health/env_errors"] == r["env/errors"] / 6.0
        assert r["agent/tool_error_frac"] == 1.0  # every call of this shop fails, and is counted as failed
        phases = sum(r.get(k, 0.0) for k in ("time/generate_s", "time/env_s", "time/score_s", "time/train_s"))
        assert r["time/step_s"] == pytest.approx(phases + r["sync/seconds"] + r["time/other_s"])
    # a hung tool is a phase of its own: the step's wait on it is in time/env_s, not left unexplained
    hung = [r for r in rl if r["env/timeouts"] > 0]
    assert hung, rl
    assert all(r["time/env_s"] >= TIMEOUT_S and r["time/other_s"] < r["time/env_s"] for r in hung)

    lines = out.splitlines()
    faults = [line for line in lines if line.startswith("faults: [rl] step ")]
    assert len(faults) == 2, out[-4000:]
    assert faults[0].startswith("faults: [rl] step 1 faults: env/errors ")
    assert "TypeError: step returned dict, not a reply string or (reply, done)" in out
    assert f"see: posttrain rewards show {run} --stage rl --step 1 --fault " in faults[0]
    assert any(line.startswith("warning: [rl] step 1 health/env_errors: env/errors ") for line in lines)
    stops = [line for line in lines if line.startswith("posttrain: ")]
    assert len(stops) == 1, out[-4000:]
    assert stops[0].startswith(
        "posttrain: [rl] stopped at step 2: for 2 steps in a row the environment, reward or judge failed on too many "
        "samples (health/faults: samples/faulted_frac "
    )
    assert "Faults: [rl] step 2 faults: env/errors" in stops[0]
    assert (run / "checkpoints" / "rl" / "step_000002" / "rollout_state.json").is_file()  # nothing lost

    shown = posttrain("rewards", "show", str(run), "--stage", "rl", "--step", "1", "--fault", "env_error", timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"stage rl, step 1: {int(rl[0]['env/errors'])} of 6 samples with fault env_error")
    assert "the environment's call on this episode raised" in shown.stdout


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.timeout(900)
def test_a_reward_function_that_raises_or_hangs_is_shown_each_step_and_stops_the_run(tmp_path):
    rows = [{"id": str(i), "prompt": f"How many items are in shop {i}?"} for i in range(20)]
    (tmp_path / "shops.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = {
        "type": "user",
        "path": str(tmp_path / "shops.jsonl"),
        "reward": "fault_rewards:shaky",
        "reward_timeout_s": 2,
        "gold_check": False,
    }
    stage = {"name": "rl", "type": "rl", "steps": 6, "lr": 1e-4, "prompts_per_step": 4, "group_size": 2}
    config = {
        "name": "shaky",
        "model": {"name": "tiny"},
        "rollout": {"max_model_len": 96, "kv_cache_gib": 0.25},
        "trainer": {"workers": 1},
        "wandb": {"enabled": False},
        "stages": [{**stage, "max_tokens": 4, "tasks": tasks}],
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    proc = posttrain("run", str(tmp_path / "p.yaml"), "--run-dir", str(run), timeout=800)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    rl = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rl if r["stage"] == "rl"] == [1, 2], out[-4000:]
    raised = sum(r["reward/raised"] for r in rl)
    hung = sum(r["reward/timeouts"] for r in rl)
    assert raised > 0 and hung > 0 and raised + hung == 16, rl  # every sample's reward call failed
    assert all(r["health/faults"] == 1.0 and r["samples/unscored"] == 0.0 for r in rl)
    faults = [line for line in out.splitlines() if line.startswith("faults: [rl] step ")]
    assert len(faults) == 2 and all("reward/" in line for line in faults), out[-4000:]
    # the first cause, named: the TypeError of the dict the function now reads, where a step had one
    assert any("TypeError: unsupported operand type(s) for +: 'dict' and 'float'" in line for line in faults)
    step = next(r["step"] for r in rl if r["reward/timeouts"] > 0)
    assert rl[step - 1]["time/score_s"] >= 2.0  # the hung reward is in the scoring phase's time
    args = ("rewards", "show", str(run), "--stage", "rl", "--step", str(step), "--fault", "reward_timeout")
    shown = posttrain(*args, timeout=120)
    assert shown.returncode == 0 and "reason: scored 0: user reward timed out after 2.0s" in shown.stdout, shown
    stop = next(line for line in out.splitlines() if line.startswith("posttrain: "))
    assert stop.startswith("posttrain: [rl] stopped at step 2: for 2 steps in a row the environment, reward or judge")
