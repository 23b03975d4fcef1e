"""Dynamic sampling (`dynamic_sampling`, DAPO's): a step whose groups have no signal draws
more rollout iterations through the partial-rollout queue until it holds prompts_per_step
groups with signal, or `max_draws` were drawn. The draw loop is checked with the engines
and the verifier replaced by a script (every group's rewards known in advance); the real
run (tiny model, vLLM engine, DeepSpeed rank) is killed after a checkpoint and resumed,
and its books are read back by tests/sample_accounting.py."""

import json
import os
import signal
import time

import pytest
import yaml
from cli_process import start_cli
from sample_accounting import assert_accounting_matches_rollouts

from posttrain.config.files import ConfigError, validate_pipeline
from posttrain.types import RewardResult

TASKS = {"type": "reasoning_gym", "families": [{"name": "chain_sum"}], "size": 40, "seed": 3}
STAGE = {
    "name": "grpo",
    "type": "rl",
    "steps": 2,
    "lr": 1e-4,
    "prompts_per_step": 4,
    "group_size": 2,
    "max_tokens": 24,
    "tasks": TASKS,
}
NO_TIMING = {"wall": 0.0, "waited": 0.0, "busy": 0.0, "engines": 1.0, "requeued_by_engine_death": 0.0}


def scripted_run(tmp_path, tiny_dir, signal_groups: set[int], **stage):
    """An RLRun whose engines finish every trajectory of an iteration at once and whose
    verifier gives the groups numbered in `signal_groups` rewards (1, 0, ...) and the
    others all 0: a mock of the engines and the verifier, to isolate the draw loop."""
    from transformers import AutoTokenizer

    from posttrain.runtime.infra import Infra
    from posttrain.stages.rl import RLRun

    class Scripted(RLRun):
        def launch(self, version, budget):
            trajs = self.fill(version, budget)
            for t in trajs:
                t.extend([7, 8], [-0.5, -0.5], version, "stop")
            return trajs

        def land(self, iteration):
            return {**NO_TIMING, "env_s": 0.0}

        def score(self, groups, samples):
            return [
                RewardResult(float(i == 0 and int(g.group_id[1:]) in signal_groups), "scripted", "script")
                for g in groups
                for i, _ in enumerate(g.trajectories)
            ]

    config = validate_pipeline({"model": {"name": "tiny"}, "stages": [{**STAGE, **stage}]})
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    return Scripted(config.stages[0], Infra(config, tmp_path, None, None, None, tokenizer))


def test_a_step_draws_until_it_holds_its_groups_with_signal(tmp_path, tiny_dir):
    from posttrain.stages.rl import sample_shares

    # groups are numbered as drawn, 4 an iteration: 1 has signal in the first, 5, 6 in the
    # second, 8 in the third; the third draw is never needed beyond that
    run = scripted_run(tmp_path, tiny_dir, {1, 5, 6, 8, 9}, dynamic_sampling={"max_draws": 5})
    drawn, ahead = run.collect(version=0, budget=None)
    assert ahead is None and drawn.draws == 2
    assert [g.group_id for g in drawn.groups] == [f"g{i}" for i in range(12)]
    assert [s.group_id for s in drawn.samples] == [i // 2 for i in range(24)]  # one index per group in the step
    seqs, stats = run.batch(drawn.groups, drawn.rewards, version=0)
    run.queue.mark_trained(len(seqs))
    books = run.queue.check()  # drawn = trained + queued + dropped
    assert len(seqs) == 5 * 2 and books["samples/dropped/zero_signal"] == 7 * 2
    assert stats["groups/zero_advantage_frac"] == pytest.approx(7 / 12)  # of every group drawn
    # set aside by design, not lost: the health check of dropped samples does not fire on them
    assert sample_shares(drawn.rewards, run.queue, (0, 0))["samples/dropped_frac"] == 0.0
    assert run.resampled(drawn) == {
        "groups/resampled": 7.0,
        "groups/draws": 2.0,
        "groups/with_signal": 5.0,
        "groups/short": 0.0,
    }


def test_the_cap_ends_the_draws_and_the_step_says_so(tmp_path, tiny_dir, capsys):
    run = scripted_run(tmp_path, tiny_dir, {2}, dynamic_sampling={"max_draws": 3})
    run.step = 1
    drawn, _ = run.collect(version=0, budget=None)
    assert drawn.draws == 3 and len(drawn.groups) == 16
    seqs, _ = run.batch(drawn.groups, drawn.rewards, version=0)
    run.queue.mark_trained(len(seqs))
    assert len(seqs) == 2 and run.queue.check()["samples/dropped/zero_signal"] == 30
    assert run.resampled(drawn)["groups/short"] == 3.0
    assert "step 1 trains 1 of 4 groups with signal after 3 extra draws" in capsys.readouterr().err


def test_without_the_key_every_group_is_trained(tmp_path, tiny_dir):
    run = scripted_run(tmp_path, tiny_dir, {2})
    drawn, _ = run.collect(version=0, budget=None)
    seqs, _ = run.batch(drawn.groups, drawn.rewards, version=0)
    assert drawn.draws == 0 and len(seqs) == 8 and "zero_signal" not in run.queue.dropped
    assert run.resampled(drawn) == {}


def test_the_key_is_bounded_and_refused_on_mopd():
    with pytest.raises(ConfigError, match="dynamic_sampling.max_draws: must be >= 1"):
        validate_pipeline({"model": {"name": "tiny"}, "stages": [{**STAGE, "dynamic_sampling": {"max_draws": 0}}]})
    mopd = {
        "name": "mopd",
        "type": "mopd",
        "steps": 1,
        "lr": 1e-5,
        "domains": {"general": TASKS},
        "teachers": [{"domain": "general", "effort": "max", "checkpoint": "tiny"}],
        "dynamic_sampling": {},
    }
    with pytest.raises(ConfigError, match="dynamic_sampling does not apply to MOPD"):
        validate_pipeline({"model": {"name": "tiny"}, "stages": [mopd]})


def test_every_expert_job_carries_the_key():
    from posttrain.config.jobs import expert_jobs

    experts = {
        "name": "experts",
        "type": "experts",
        "steps": 1,
        "lr": 1e-5,
        "max_tokens": 48,
        "domains": {"general": TASKS},
        "efforts": {"max": {"tokens": 32}, "low": {"tokens": 16}},
        "dynamic_sampling": {"max_draws": 2},
    }
    stage = validate_pipeline({"model": {"name": "tiny"}, "stages": [experts]}).stages[0]
    assert {job.stage.dynamic_sampling.max_draws for job in expert_jobs(stage).values()} == {2}


PIPELINE = {
    "name": "dynsample",
    "model": {"name": "tiny"},
    "rollout": {"max_model_len": 96},
    "trainer": {"workers": 1},
    "stages": [
        {
            **STAGE,
            "steps": 4,
            "group_size": 4,
            "save_every": 2,
            # budgets of 1..3x the answer length end responses at different lengths, some
            # over budget (-1) and some not (0): some groups have signal, most not; lambda
            # 0.5 leaves cut trajectories in the queue, which the extra draws go through
            "budget": {"multiple": 2.0, "margin": 0.5},
            "partial": {"lambda": 0.5, "max_staleness": 8},
            "dynamic_sampling": {"max_draws": 3},
        }
    ],
}


@pytest.mark.timeout(600)
@pytest.mark.system
def test_a_run_killed_and_resumed_keeps_its_books(tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PIPELINE))
    run = tmp_path / "run"
    proc = start_cli("run", str(tmp_path / "p.yaml"), "--run-dir", str(run))
    marker = run / "checkpoints" / "grpo" / "step_000002" / "rollout_state.json"
    deadline = time.time() + 300
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert marker.exists(), proc.communicate()[0][-3000:] if proc.poll() is not None else "timed out"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = json.loads(marker.read_text())
    queue = json.loads(saved["queue"])

    resumed = start_cli("run", "--resume", str(run))
    out = resumed.communicate(timeout=280)[0]
    assert resumed.returncode == 0, out[-3000:]
    assert "resuming from" in out

    rows = assert_accounting_matches_rollouts(run, "grpo", group_size=4)
    assert [r["step"] for r in rows] == list(range(1, 5))
    for r in rows:  # each step holds its 4 groups with signal, or drew up to the cap
        assert r["groups/with_signal"] >= 4 or r["groups/draws"] == 3, r
        assert r["groups/short"] == max(0.0, 4 - r["groups/with_signal"]), r
        assert r["samples/trained"] >= 0 and r["groups/draws"] <= 3
    assert any(r["groups/draws"] > 0 for r in rows), "no step drew more"
    assert sum(r["groups/resampled"] for r in rows) > 0
    last = rows[-1]
    assert 0 < last["samples/dropped/zero_signal"] <= 4 * sum(r["groups/resampled"] for r in rows)
    assert rows[2]["samples/drawn"] > queue["drawn"]  # step 3 continued from the saved queue's counters
    # start-up by phase, in the first step's row of each process (the resumed one's too)
    phases = ("preflight", "ray", "slot", "data", "trainers", "engines", "first_push")
    for r in (rows[0], rows[2]):
        took = [r[f"startup/{p}_s"] for p in phases]
        assert all(t >= 0 for t in took) and sum(took) <= r["startup/total_s"], r
    assert not any(k.startswith("startup/") for k in rows[1]) and not any(k.startswith("startup/") for k in rows[3])
    samples = [json.loads(line) for line in (run / "rollouts" / "grpo.jsonl").read_text().splitlines()]
    ids = [s["sample"] for s in samples]
    assert len(ids) == len(set(ids))  # nothing saved twice across the kill
