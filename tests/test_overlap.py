"""Generation overlapped with training (`rollout.overlap`) on the real stack: tiny models,
real vLLM engine actors and DeepSpeed ranks pinned to cores of their own. Staleness stays
within `max_staleness` and the sample accounting is whole at every step; a driver killed
with SIGKILL and resumed trains the batch that was generated during the killed run's last
checkpointed step; an engine killed while an overlapped iteration is in flight loses no
sample."""

import json
import os
import signal
import threading
import time
from collections import Counter

import pytest
import ray
import yaml
from cli_process import start_cli
from sample_accounting import assert_accounting_matches_rollouts

pytestmark = [pytest.mark.slow, pytest.mark.system]

TASKS = {"type": "reasoning_gym", "families": [{"name": "chain_sum"}], "size": 40, "seed": 3}
STEPS = 10
PIPELINE = {
    "name": "overlap",
    "model": {"name": "tiny"},
    "rollout": {"max_model_len": 96, "overlap": True, "cores": [0]},
    "trainer": {"workers": 1, "cores": [1]},
    "stages": [
        {
            "name": "grpo",
            "type": "rl",
            "steps": STEPS,
            "lr": 1e-4,
            "prompts_per_step": 4,
            "group_size": 2,
            "max_tokens": 24,
            "save_every": 2,
            # budgets of 1..3x the answer length end responses at different lengths; with
            # lambda 0.75, 2 of 8 trajectories are cut per iteration, so at least 2 of its
            # 4 groups are complete and wait in the queue (the overlapped batch) at each checkpoint
            "budget": {"multiple": 2.0, "margin": 0.5},
            "partial": {"lambda": 0.75, "max_staleness": 2},
            "tasks": TASKS,
        }
    ],
}


def cli(*args):
    return start_cli(*args)


def check_rows(grpo: list[dict]) -> None:
    for r in grpo:
        assert r["staleness/max"] <= 2, r
        if r["step"] >= 2:  # trained on a batch generated while the previous one trained
            assert r["staleness/max"] >= 1 and r["offpolicy/token_frac"] > 0, r
        # each step but the last sent the next iteration off before training
        assert (r["time/overlap_hidden_s"] > 0) == (r["step"] < STEPS), r


@pytest.mark.timeout(1600)  # waits up to 600 s for the checkpoint and 900 s for the resumed run
def test_overlap_bounds_staleness_and_resume_keeps_the_generated_batch(tmp_path):
    # an adaptive entropy bonus whose target every entropy is under: its weight rises 0.004 a step, to 0.02
    bonus = {"entropy_target": 100.0, "entropy_coef_step": 0.004, "entropy_coef_max": 0.02}
    pipeline = {**PIPELINE, "stages": [{**PIPELINE["stages"][0], "algo": bonus}]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(pipeline))
    run = tmp_path / "run"
    proc = cli("run", str(tmp_path / "p.yaml"), "--run-dir", str(run))
    marker = run / "checkpoints" / "grpo" / "step_000004" / "rollout_state.json"
    deadline = time.time() + 600
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert marker.exists(), proc.communicate()[0][-3000:] if proc.poll() is not None else "timed out"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    newest = max(int(p.name.split("_")[1]) for p in (run / "checkpoints" / "grpo").glob("step_*"))
    saved = json.loads((run / "checkpoints" / "grpo" / f"step_{newest:06d}" / "rollout_state.json").read_text())
    queue = json.loads(saved["queue"])
    generated = [g for g in queue["groups"] if all(t["finish_reason"] for t in g["trajectories"])]
    assert len(generated) >= 2, "the overlapped batch was not in the checkpoint"
    for g in generated:  # finished by the iteration that ran during the checkpointed step's training
        versions = [v for t in g["trajectories"] for v in t["token_versions"]]
        assert max(versions) == saved["version"] - 1 and min(versions) >= saved["version"] - 1 - 2, versions

    resumed = cli("run", "--resume", str(run))
    out = resumed.communicate(timeout=900)[0]
    assert resumed.returncode == 0, out[-3000:]
    assert f"resuming from {run}/checkpoints/grpo/step_{newest:06d}" in out

    grpo = assert_accounting_matches_rollouts(run, "grpo", group_size=2)
    assert [r["step"] for r in grpo] == list(range(1, STEPS + 1))
    check_rows(grpo)
    assert grpo[newest]["samples/drawn"] > queue["drawn"]  # counters continue from the saved queue
    assert saved["entropy"]["coef"] == pytest.approx(min(0.02, 0.004 * newest))  # and the bonus's weight:
    weights = [r["loss/entropy_coef"] for r in grpo]
    assert weights == pytest.approx([min(0.02, 0.004 * (step - 1)) for step in range(1, STEPS + 1)])
    assert all(r["train/zero_gradient_frac"] == 0 for r in grpo)  # its entropy is every sequence's

    # the batch generated before the kill is the first one trained after the resume, as it was
    samples = [json.loads(line) for line in (run / "rollouts" / "grpo.jsonl").read_text().splitlines()]
    first = Counter((s["task_id"], s["response_tokens"]) for s in samples if s["step"] == newest + 1)
    kept = Counter((g["task"]["task_id"], sum(t["action_mask"])) for g in generated for t in g["trajectories"])
    assert not kept - first, (kept, first)


def test_an_engine_killed_mid_overlap_loses_no_sample(ray_session, tiny_dir, tmp_path):
    from transformers import AutoTokenizer

    from posttrain.config.files import validate_pipeline
    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import Infra, engine_pool
    from posttrain.stages.rl import RLRun, train_and_save
    from posttrain.train.group import TrainerGroup

    stage = {
        **PIPELINE["stages"][0],
        "steps": 4,
        "prompts_per_step": 4,  # 2 groups per engine: enough for a death to requeue a whole engine's share
        "group_size": 4,
        "max_tokens": 160,  # the tiny model rarely stops: long generations, killed mid-way
        "budget": {},
        "partial": {"lambda": 1.0, "max_staleness": 2},
        "save_every": 0,
    }
    config = validate_pipeline(
        {
            **PIPELINE,
            "model": {"name": str(tiny_dir)},
            "rollout": {"engines": 2, "max_model_len": 256, "overlap": True, "cores": [0]},
            "stages": [stage],
        }
    )
    pool = engine_pool(config, tiny_dir)
    trainers = TrainerGroup(config.trainer, config.seed)
    pool.on_restart = lambda engine: trainers.sync_weights([engine])
    infra = Infra(config, tmp_path, trainers, pool, MetricsLog(tmp_path), AutoTokenizer.from_pretrained(tiny_dir))
    infra.live_progress = False

    class KillsAnEngine(RLRun):
        """Kills engine 1 shortly after step 2's overlapped iteration was sent off."""

        killed = None

        def launch_ahead(self, version):
            iteration = super().launch_ahead(version)
            if iteration is not None and self.step == 1:
                self.killed = threading.Timer(0.3, ray.kill, [self.infra.pool.engines[1]])
                self.killed.start()
            return iteration

    run = KillsAnEngine(config.stages[0], infra)
    try:
        assert [ray.get(e.info.remote())["cores"] for e in pool.engines] == [[0], [0]]
        train_and_save(run, tiny_dir)
        run.killed.join()
        assert pool.restarts == 1
        infra.metrics.close()
        rows = assert_accounting_matches_rollouts(tmp_path, stage["name"], group_size=4)
        assert [r["step"] for r in rows] == [1, 2, 3, 4]
        assert rows[1]["engine/requeued_by_death"] == 8  # engine 1's half of step 2's overlapped iteration
        for r in rows:
            assert r["samples/dropped"] == 0 and r["staleness/max"] <= 2, r
        # the requeued trajectories started again and their groups trained: nothing waits at the end
        assert rows[-1]["samples/queued"] == 0 and rows[-1]["samples/trained"] == rows[-1]["samples/drawn"]
    finally:
        pool.shutdown()
        trainers.shutdown()
