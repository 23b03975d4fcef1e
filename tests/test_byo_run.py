"""Bring your own, end to end through `posttrain run` on the real stack (tiny model, vLLM
engine, DeepSpeed rank): a model named by a hub id and datasets from a `save_to_disk`
folder and from the local HF cache under a hub id (streamed, killed and resumed at the
same row); the example tool environment, killed while an episode waits in the queue and
resumed with that episode going on."""

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import yaml
from cli_process import start_cli
from sample_accounting import AFTER_SCORING, assert_accounting_matches_rollouts
from test_hf_tasks import cached_dataset, hub_cache

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.system]


def cli(*args, env=None):
    return start_cli(*args, env={"PYTHONPATH": str(ROOT), **(env or {})}, cwd=ROOT)


def wait_for(proc, ready, seconds: float):
    """Poll `ready()` until it returns something, the run ends or time is up."""
    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None:
        found = ready()
        if found:
            return found
        time.sleep(0.5)
    out = proc.communicate()[0] if proc.poll() is not None else "timed out"
    raise AssertionError(f"never ready: {out[-3000:]}")


def kill(proc) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def rollouts(run: Path, stage: str) -> list[dict]:
    return [json.loads(line) for line in (run / "rollouts" / f"{stage}.jsonl").read_text().splitlines()]


@pytest.mark.timeout(1900)  # waits up to 900 s for the checkpoint and 900 s for the resumed run
def test_hub_model_and_datasets_trained_streamed_killed_and_resumed(tmp_path, tiny_dir):
    import datasets

    from posttrain.config import HFTasks
    from posttrain.data.hf import StreamSampler

    home = tmp_path / "hf"
    shutil.copytree(tiny_dir, hub_cache(home, "acme/tiny-chat", "models"), dirs_exist_ok=True)
    rows = [{"question": f"What is {i} plus {i + 1}?", "solution": str(2 * i + 1), "uid": f"s{i}"} for i in range(300)]
    cached_dataset(home, "acme/sums", rows)
    saved = tmp_path / "sft-data"
    datasets.Dataset.from_list(rows[:64]).save_to_disk(str(saved))
    streamed = {
        "type": "hf",
        "path": "acme/sums",
        "prompt_key": "question",
        "answer_key": "solution",
        "id_key": "uid",
        "verifier": "user",
        "streaming": True,
        "shuffle_buffer": 16,
    }
    pipeline = {
        "name": "byo",
        "model": {"name": "acme/tiny-chat"},
        "rollout": {"max_model_len": 96, "kv_cache_gib": 0.25},
        "trainer": {"workers": 1},
        "stages": [
            {
                "name": "sft",
                "type": "sft",
                "steps": 2,
                "lr": 1e-3,
                "batch_size": 8,
                "data": {"type": "hf", "path": str(saved), "prompt_key": "question", "answer_key": "solution"},
            },
            {
                "name": "rl",
                "type": "rl",
                "steps": 12,  # an idle machine runs a step in about a second: steps left after the kill
                "lr": 1e-4,
                "prompts_per_step": 4,
                "group_size": 2,
                "max_tokens": 12,
                "save_every": 1,
                "partial": {"lambda": 0.5, "max_staleness": 8},
                "tasks": streamed,
            },
        ],
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(pipeline))
    run = tmp_path / "run"
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    proc = cli("run", str(tmp_path / "p.yaml"), "--run-dir", str(run), env=env)
    marker = run / "checkpoints" / "rl" / "step_000002" / "rollout_state.json"
    wait_for(proc, marker.exists, 900)
    kill(proc)
    done = (run / "checkpoints" / "rl").glob("step_*/rollout_state.json")  # complete checkpoints
    newest = max(int(p.parent.name.split("_")[1]) for p in done)
    assert newest < 12, "the stage ended before the kill"
    state = json.loads((run / "checkpoints" / "rl" / f"step_{newest:06d}" / "rollout_state.json").read_text())
    position = state["sampler_position"]
    assert isinstance(position, dict) and position["drawn"] > 0  # the stream's own resume point

    resumed = cli("run", "--resume", str(run), env=env)
    out = resumed.communicate(timeout=900)[0]
    assert resumed.returncode == 0, out[-3000:]
    assert f"resuming from {run}/checkpoints/rl/step_{newest:06d}" in out
    run_state = json.loads((run / "run_state.json").read_text())
    assert run_state["model"] == str(hub_cache(home, "acme/tiny-chat", "models"))  # the hub id, from the cache
    final = run / "checkpoints" / "rl" / "final"
    assert (final / "model.safetensors").is_file() and (final / "tokenizer_config.json").is_file()
    # every group drew the next row of the stream, in the sampler's order, the rows after the
    # kill continuing from the saved position instead of the stream's start (which would
    # train rows twice) or from further on (which would skip rows)
    steps = assert_accounting_matches_rollouts(run, "rl", group_size=2)
    assert [r["step"] for r in steps] == list(range(1, 13))
    snapshot = hub_cache(home, "acme/sums")  # the same files this process reads without the run's HF_HOME
    source = HFTasks(**{**streamed, "path": str(snapshot)})
    groups_drawn = int(steps[-1]["samples/drawn"]) // 2  # one stream row per group
    order = {t.task_id: i for i, t in enumerate(StreamSampler(source, seed=0).draw(groups_drawn))}
    saved = rollouts(run, "rl")
    groups = {(r["step"], r["group"]): r["task_id"] for r in saved}
    assert len(set(groups.values())) == len(groups), "a row was drawn twice"
    assert set(groups.values()) <= set(order), "a row from outside the sampler's first draws"
    # the groups drawn but never saved are those still queued or dropped unscored at the end
    last = steps[-1]
    unscored = last["samples/dropped"] - sum(last.get(key, 0.0) for key in AFTER_SCORING)
    unsaved = int(last["samples/queued"] + unscored) // 2
    assert len(groups) == groups_drawn - unsaved, (len(groups), groups_drawn, unsaved)
    for step in sorted({s for s, _ in groups}):  # a step trains its finished groups oldest first
        ranks = [order[task] for (s, _), task in sorted(groups.items()) if s == step]
        assert ranks == sorted(ranks), (step, ranks)


def waiting_episode(run: Path):
    """The newest RL checkpoint whose queue holds an environment episode that has run a tool
    and waits for its next turn: (step, trajectory, task id)."""
    for folder in sorted((run / "checkpoints" / "rl").glob("step_*"), reverse=True):
        state_file = folder / "rollout_state.json"
        if not state_file.exists():
            continue
        queue = json.loads(json.loads(state_file.read_text())["queue"])
        for group in queue["groups"]:
            for traj in group["trajectories"]:
                env = traj.get("env") or {}
                if traj["finish_reason"] is None and env.get("calls") and not env.get("done"):
                    return int(folder.name.split("_")[1]), traj, group["task"]["task_id"]
    return None


def queued_episodes(run: Path, task_id: str):
    """(step, trajectory) for every queued trajectory of task_id in every RL checkpoint."""
    for folder in sorted((run / "checkpoints" / "rl").glob("step_*")):
        state_file = folder / "rollout_state.json"
        if state_file.exists():
            queue = json.loads(json.loads(state_file.read_text())["queue"])
            for group in queue["groups"]:
                if group["task"]["task_id"] == task_id:
                    for traj in group["trajectories"]:
                        yield int(folder.name.split("_")[1]), traj


@pytest.mark.timeout(3100)  # waits up to 1500 s for a queued episode and 1500 s for the resumed run
def test_example_environment_killed_with_an_episode_in_the_queue_and_resumed(tmp_path):
    from transformers import AutoTokenizer

    run = tmp_path / "run"
    overrides = ["-o", "stages[0].steps=40", "-o", "stages[1].steps=12", "-o", "stages[1].partial.lambda=0.25"]
    overrides += ["-o", "stages[1].partial.max_staleness=12"]
    overrides += ["-o", "stages[0].data.args={kinds: [recall]}", "-o", "stages[1].tasks.args={kinds: [recall]}"]
    proc = cli("run", "examples/kv_env.yaml", "--run-dir", str(run), *overrides)
    step, traj, task_id = wait_for(proc, lambda: waiting_episode(run), 1500)
    kill(proc)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(r["stage"] == "rl" and r.get("agent/tool_calls_mean", 0) > 0 for r in metrics)

    resumed = cli("run", "--resume", str(run))
    out = resumed.communicate(timeout=1500)[0]
    assert resumed.returncode == 0, out[-3000:]
    assert "resuming from" in out
    tokenizer = AutoTokenizer.from_pretrained(run / "checkpoints" / "rl" / "final")
    prefix = tokenizer.decode(traj["response_ids"], skip_special_tokens=True)
    # the episode went on after the resume: either it finished (a logged rollout that starts
    # with what it had written) or a later checkpoint's queue holds it with more tokens; a
    # partial-rollout episode need not finish before the stage ends
    later = [r for r in rollouts(run, "rl") if r["step"] > step and r["task_id"] == task_id]
    finished = [
        r for r in later if r["response"].startswith(prefix) and len(r["env"]["calls"]) >= len(traj["env"]["calls"])
    ]
    waiting = [
        t
        for s, t in queued_episodes(run, task_id)
        if s > step
        and t["response_ids"][: len(traj["response_ids"])] == traj["response_ids"]
        and len(t["response_ids"]) > len(traj["response_ids"])
    ]
    went_on = [(r["env"]["calls"]) for r in finished] + [t["env"]["calls"] for t in waiting]
    assert went_on, f"the episode of {task_id} cut at step {step} did not go on after the resume"
    assert went_on[0][: len(traj["env"]["calls"])] == traj["env"]["calls"]
    assert all(r["source"] == "env" for r in rollouts(run, "rl"))
