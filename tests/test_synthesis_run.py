"""The synthesis stage on the real stack: a tiny teacher served by a vLLM engine actor writes
trajectories for agent and arithmetic tasks, the run is killed with SIGKILL mid-stage and
resumed without writing any task twice, the SFT stage trains on the kept set, and a review
decision changes that set."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import yaml
from cli_process import start_cli

TASKS = 24
K = 3
PIPELINE = {
    "name": "synth",
    "model": {"name": "tiny"},
    "rollout": {"max_model_len": 192},
    "trainer": {"workers": 1},
    "stages": [
        {
            "name": "synth",
            "type": "synthesis",
            "teacher": {"model": "tiny", "max_model_len": 192},
            "tasks": {
                "type": "mixture",
                "sources": [
                    {
                        "type": "agent",
                        "families": ["calculator", "kv_recall"],
                        "size": TASKS // 2,
                        "max_turns": 3,
                        "system_prompt": "Tools: calculator(expression), kv_get(key).",
                    },
                    {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": TASKS // 2},
                ],
            },
            "candidates": K,
            "max_tokens": 32,
            "chunk": 1,
            "temperature": 1.0,
            # the untrained teacher is never right: keep what is well formed, so the later stages have data
            "verify": {"outcome": {"threshold": 0.0}},
            "review": {"fraction": 0.5},  # of the few that pass (4-8 here), some wait for review, some stay passed
        },
        {
            "name": "sft",
            "type": "sft",
            "data": {"type": "synthesis", "stage": "synth"},
            "steps": 1,
            "batch_size": 4,
            "lr": 1e-4,
        },
    ],
}


def cli(*args):
    return start_cli(*args)


def done_tasks(path):
    """task id -> its rows (raw lines) for tasks with all K rows written."""
    by_task = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            by_task.setdefault(row["task_id"], []).append(line)
    return {t: lines for t, lines in by_task.items() if len(lines) == K}


@pytest.mark.timeout(1200)  # waits up to 500 s for three tasks and 600 s for the resumed run
@pytest.mark.system
def test_killed_synthesis_resumes_without_duplicates_then_sft_and_review(tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PIPELINE))
    run = tmp_path / "run"
    candidates = run / "synthesis" / "synth" / "candidates.jsonl"
    proc = cli("run", str(tmp_path / "p.yaml"), "--run-dir", str(run))
    deadline = time.time() + 500
    while len(done_tasks(candidates)) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = done_tasks(candidates)
    assert 3 <= len(before) < TASKS, f"the kill did not land mid-stage ({len(before)} of {TASKS} tasks done)"

    resumed = cli("run", "--resume", str(run))
    out = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, out[-3000:]
    assert f"resuming: {len(before)} of {TASKS} tasks already synthesized" in out, out[-2000:]

    rows = [json.loads(line) for line in candidates.read_text().splitlines()]
    assert len(rows) == TASKS * K and len({r["id"] for r in rows}) == TASKS * K
    assert Counter(r["task_id"] for r in rows) == Counter({t: K for t in {r["task_id"] for r in rows}})
    assert len({r["task_id"] for r in rows}) == TASKS
    lines = candidates.read_text().splitlines()
    for task, old in before.items():  # what was written before the kill is kept as it was, not redone
        assert all(line in lines for line in old), task
    for r in rows:
        assert set(r["verdicts"]) == {"format", "outcome", "length", "dedup"} and r["template"] == "tools-v1"
        assert r["status"] in ("passed", "rejected", "review")
        assert (r["status"] == "rejected") == any(v["pass"] is not True for v in r["verdicts"].values())
    assert any(r["family"].startswith("agent_") and r["messages"] for r in rows)
    assert any(not r["verdicts"]["format"]["pass"] for r in rows)  # an untrained teacher leaves turns open

    summary = json.loads((run / "run_state.json").read_text())["stages"]["synth"]["summary"]
    assert (
        summary["candidates"] == TASKS * K
        and summary["passed"] + summary["rejected"] + summary["sent_to_review"] == TASKS * K
    )
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = [m for m in metrics if m["stage"] == "synth"][-1]
    assert last["synthesis/candidates"] == TASKS * K and 0 <= last["synthesis/pass_rate/format"] < 1
    assert "synthesis/queue" in last and "synthesis/acceptance" in last
    sft_set = [json.loads(line) for line in (run / "synthesis" / "synth" / "sft.jsonl").read_text().splitlines()]
    assert len(sft_set) == summary["sft_set"] == summary["passed"] > 0
    assert f"[sft] {len(sft_set)} synthesized conversations" in out
    assert (run / "checkpoints" / "sft" / "final" / "config.json").is_file()

    # review: accepting a waiting trajectory adds it to the SFT set, rejecting a passed one removes it
    waiting = [r["id"] for r in rows if r["status"] == "review"]
    passed = [r["id"] for r in rows if r["status"] == "passed"]
    assert waiting, "nothing was sent to review"
    done = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "review", str(run), "--accept", waiting[0], "--reject", passed[0]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    ids = [json.loads(line)["id"] for line in (run / "synthesis" / "synth" / "sft.jsonl").read_text().splitlines()]
    assert waiting[0] in ids and passed[0] not in ids and len(ids) == len(sft_set)
