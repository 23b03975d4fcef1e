"""The judge stage end to end through the CLI, on real Ray, vLLM and DeepSpeed: a judge is
post-trained (SFT on its calls, then RL on its verdicts, or on pairwise choices) from the
base model, and the next stage's GRM judges with that checkpoint (`model: stage:judge`,
rubric or pairwise), while the policy's line
goes on from the base model; the run is killed in the judge's RL phase and resumed, then killed
in the GRM stage that uses the judge and resumed again."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_process import start_cli

JUDGE = {
    "name": "judge",
    "type": "judge",
    "steps": 3,
    "lr": 1e-3,
    "batch_size": 4,
    "save_every": 1,
    "data": {"type": "judgements", "size": 20, "examples": False},
    "rl": {"steps": 3, "prompts_per_step": 2, "group_size": 2, "max_tokens": 12},
}
POLICY = {
    "name": "grpo",
    "type": "rl",
    "steps": 1,
    "lr": 1e-4,
    "prompts_per_step": 2,
    "group_size": 2,
    "max_tokens": 8,
    "tasks": {"type": "writing", "size": 4},
    "reward": {
        "grm": {
            "judge": {"type": "vllm", "model": "stage:judge", "max_model_len": 512, "kv_cache_gib": 0.1},
            "examples": False,
            "rubric_tokens": 64,
            "verdict_tokens": 32,
            "retries": 0,
        }
    },
}
PIPELINE = {
    "name": "judged",
    "model": {"name": "tiny"},
    "rollout": {"max_model_len": 512},
    "trainer": {"workers": 1},
    "stages": [JUDGE, POLICY],
}


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def check_run(run: Path, rl_steps: int = 3, policy_steps: int = 1) -> None:
    state = json.loads((run / "run_state.json").read_text())
    judge, policy = state["stages"]["judge"], state["stages"]["grpo"]
    assert judge["status"] == policy["status"] == "done"
    assert {p: v["status"] for p, v in judge["phases"].items()} == {"sft": "done", "rl": "done"}
    final = Path(judge["checkpoint"])
    assert final == Path(judge["phases"]["rl"]["checkpoint"]) and (final / "config.json").is_file()
    assert policy["init_from"] == state["model"]  # the policy starts from the base model, not the judge
    steps = {}
    for row in rows(run):
        steps.setdefault(row["stage"], []).append(row["step"])
    assert steps["judge/sft"] == [1, 2, 3] and steps["judge/rl"] == list(range(1, rl_steps + 1))
    assert steps["grpo"] == list(range(1, policy_steps + 1))
    board = [json.loads(line) for line in (run / "scoreboard.jsonl").read_text().splitlines()]
    assert board and all(e["judge_model"].startswith(f"{final}@") for e in board)
    assert all(e["procedure_version"].endswith("/bare") for e in board)


def pairwise(pipeline: dict) -> dict:
    """The same pipeline with a judge trained on pairwise calls and a GRM that judges pairwise."""
    judge, policy = pipeline["stages"]
    judge = {**judge, "data": {**judge["data"], "calls": ["pairwise"]}}
    grm = {**policy["reward"]["grm"], "method": "pairwise"}
    return {**pipeline, "stages": [judge, {**policy, "reward": {"grm": grm}}]}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("method", ["rubric", "pairwise"])
def test_a_judge_stage_trains_a_judge_that_the_next_stage_uses(tmp_path, method):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PIPELINE if method == "rubric" else pairwise(PIPELINE)))
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "run", str(tmp_path / "p.yaml"), "--run-dir", str(run)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_run(run)
    judge_rows = [r for r in rows(run) if r["stage"] == "judge/rl"]
    assert all(0.0 <= r["reward/mean"] <= 1.0 for r in judge_rows)  # agreement with the known verdicts
    board = [json.loads(line) for line in (run / "scoreboard.jsonl").read_text().splitlines()]
    if method == "pairwise":  # each response against the others of its group, in both orders
        assert all(e["procedure_version"].startswith("pairwise-v3/") for e in board)
        judged = [e for e in board if e["status"] == "scored"]
        assert judged and all(e["comparisons"] and -1 <= e["score"] <= 1 for e in judged)
        assert all(len(c["raw"]) >= 2 for e in judged for c in e["comparisons"] if c["by"] == "judge")


def kill_when(proc, run: Path, pattern: str, deadline_s: float = 900) -> str:
    """SIGKILL the run's process group once a checkpoint matching `pattern` is saved; return
    what it printed (start_cli reads it as it goes, so that a full pipe never blocks it)."""
    deadline = time.time() + deadline_s
    while time.time() < deadline and not list(run.glob(pattern)):
        assert proc.poll() is None, proc.output()[-3000:]
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    return proc.communicate()[0]


@pytest.mark.system
@pytest.mark.timeout(1500)
def test_a_judge_stage_and_the_grm_stage_that_uses_it_resume_after_kills(tmp_path):
    # a longer RL phase than the other test's (its steps take about a second), so that the kill lands in it (under
    # 20 steps: the tiny judge's reward is 0 throughout, and 20 such steps in a row stop a run); then the GRM stage
    # is killed after its first step checkpoint and resumed with the trained judge. That judge is
    # a tiny model: its rubrics are unreadable, every GRM sample unscored, and the faults stop
    # (2 such steps in a row by default) would end the 3-step stage; this test is about resuming.
    judge = {**JUDGE, "rl": {**JUDGE["rl"], "steps": 8}}  # the kill comes at its first checkpoint: 7 left
    policy = {**POLICY, "steps": 3, "save_every": 1}
    health = {"faults_stop_after": 10}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({**PIPELINE, "health": health, "stages": [judge, policy]}))
    run = tmp_path / "run"
    kill_when(start_cli("run", str(tmp_path / "p.yaml"), "--run-dir", str(run)), run,
              "checkpoints/judge/rl/step_*/rollout_state.json")  # fmt: skip
    first = kill_when(start_cli("run", "--resume", str(run)), run, "checkpoints/grpo/step_*/rollout_state.json")
    assert "[judge/rl] resuming from" in first, first[-3000:]
    again = start_cli("run", "--resume", str(run))
    out, _ = again.communicate(timeout=900)
    assert again.returncode == 0, out[-3000:]
    assert "[grpo] resuming from" in out and "[judge/" not in out, out[-3000:]  # the judge stage is not run again
    check_run(run, rl_steps=8, policy_steps=3)  # each step logged once: no phase or stage ran twice
    state = json.loads((run / "run_state.json").read_text())["stages"]["judge"]["phases"]
    assert "resumed_from" not in state["sft"] and state["rl"]["resumed_from"]
