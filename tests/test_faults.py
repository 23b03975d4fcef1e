"""Faults of a user's own pieces counted where the user looks (issue 56, items 1 and 3): each
failure gets a machine-readable kind where it happens, a step counts the kinds
(records/faults.py) and prints one line naming the first cause, health flags each kind and
stops a run whose faults pass a share, and a judge that is noise is flagged. The real runs
are in test_faults_run.py."""

import asyncio
import io

import pytest

from posttrain.config import GRMConfig, HealthConfig
from posttrain.config.files import validate_pipeline
from posttrain.pipeline import judge_warnings
from posttrain.records.faults import StepFaults, fault_of, row_faults
from posttrain.records.health import HealthMonitor
from posttrain.records.rl_metrics import grm_metrics, grm_spread
from posttrain.records.rollouts import RolloutLog
from posttrain.rewards import debug
from posttrain.rewards.base import score_safely
from posttrain.rewards.grm import GRM
from posttrain.rewards.grm_judge import JudgeReply
from posttrain.rewards.user import as_result, call_verdict, episode_failed, failed_call
from posttrain.rollout.env_workers import Failure
from posttrain.rollout.workers import CallRaised, CallTimeout, WorkerCrashed, WorkerUnavailable
from posttrain.stages.rl import STEP_PHASES, time_remainder
from posttrain.types import Completion, Message, RewardResult, Sample, Task


def sample(task_id="t/1", group=0, text="hello", env=None, verifier="env") -> Sample:
    task = Task(task_id, "shop", (Message("user", "How many items are in stock?"),), verifier=verifier)
    return Sample(task, group, (1,), Completion((2, 3), (0.0, 0.0), text, "stop"), env=env)


# ---------------------------------------------------------------- classification where it happens


def test_each_user_piece_that_fails_gets_its_fault_kind():
    kinds = [
        call_verdict(None, CallTimeout("late"), "user", 5.0),
        call_verdict(None, CallRaised("TypeError", "unhashable type: 'dict'"), "user", 5.0),
        call_verdict(None, WorkerCrashed("killed"), "user", 5.0),
        call_verdict(None, WorkerUnavailable("no spawn"), "user", 5.0),
        as_result({"score": {"value": 1}}, "user"),  # a reward that returned a dict as its score
        as_result(float("nan"), "user"),
        failed_call(Failure("timeout", "timed out after 3s"), "reward", "env"),
        failed_call(Failure("raised", "KeyError: 'x'"), "reward", "env"),
        failed_call(Failure("start", "environment shop failed to start"), "reward", "env"),
        episode_failed({"error": "TypeError: step returned dict", "error_kind": "raised"}, "env"),
        episode_failed({"error": "timed out after 3s", "error_kind": "timeout"}, "env"),
        episode_failed({"error": "ImportError: no module"}, "env"),  # the environment was never built
    ]
    assert [r.details["fault"] for r in kinds] == [
        "reward_timeout",
        "reward_raised",
        "reward_raised",
        "reward_raised",
        "reward_raised",
        "reward_raised",
        "reward_timeout",
        "reward_raised",
        "env_error",
        "env_error",
        "env_timeout",
        "env_error",
    ]
    assert [r.ok for r in kinds[-4:]] == [False, True, True, False]  # built, judged: 0; never built: unscored
    # a good score carries no fault
    assert "fault" not in as_result(0.0, "user").details and "fault" not in as_result((1.0, "ok"), "user").details


class Raising:
    name = "mine"

    async def score(self, samples):
        raise TypeError("'dict' object is not subscriptable")


def test_a_reward_source_that_raises_is_reward_raised_for_each_sample():
    results = asyncio.run(score_safely(Raising(), [sample(), sample()]))
    assert [(r.ok, r.details["fault"]) for r in results] == [(False, "reward_raised")] * 2
    assert results[0].details is not results[1].details  # each sample its own record


class Mute:
    """A judge whose every reply is unreadable (for both methods)."""

    model_id = "mute@test"

    def start(self):
        pass

    def close(self):
        pass

    async def complete(self, calls):
        return [JudgeReply("I cannot say.") for _ in calls]


def judge_of(method: str) -> GRM:
    judge = {"type": "http", "base_url": "http://unused", "model": "m", "api_key_env": None}
    return GRM(GRMConfig(judge=judge, method=method, verdict="binary", retries=0), backend=Mute())


@pytest.mark.parametrize("method", ["rubric", "pairwise"])
def test_a_judge_whose_verdicts_cannot_be_read_is_judge_unreadable(method):
    samples = [sample(text="Wheels hum.", verifier="grm"), sample(text="Bells ring.", verifier="grm")]
    results = asyncio.run(judge_of(method).score(samples))
    assert [(r.ok, r.details["fault"]) for r in results] == [(False, "judge_unreadable")] * 2
    metrics = grm_metrics(results)
    assert metrics["grm/unreadable_frac"] == 1.0 and metrics["grm/unscored"] == 2.0


# ---------------------------------------------------------------- the step's counts and its line


def step_results():
    samples = [
        sample(env={"error": "TypeError: step returned dict, not a reply string", "error_kind": "raised"}),
        sample(env={"error": "timed out after 3s", "error_kind": "timeout"}),
        sample(env={"final": "7"}),
        sample(env={"final": "8"}),
        sample(verifier="grm"),
    ]
    rewards = [
        episode_failed(samples[0].env, "env"),
        # a verifier of its own that never set a fault: the episode record's error still counts
        RewardResult(0.0, "no score: the episode failed", "math"),
        RewardResult(1.0, "echoed 7", "env"),
        call_verdict(None, CallRaised("KeyError", "'stock'"), "env", 3.0),
        RewardResult(0.0, "unscored: no reward source 'grm' configured", "grm", ok=False),
    ]
    return samples, rewards


def test_a_step_counts_each_fault_kind_and_names_the_first_cause():
    samples, rewards = step_results()
    assert fault_of(rewards[1], samples[1].env) == "env_timeout"
    found = StepFaults.of(samples, rewards)
    assert found.metrics() == {
        "env/errors": 1.0,
        "env/timeouts": 1.0,
        "reward/raised": 1.0,
        "reward/timeouts": 0.0,
        "judge/unreadable": 0.0,
        "samples/unscored": 1.0,
        "samples/total": 5.0,
        "samples/faulted_frac": 0.8,
    }
    line = found.line("rl", 3, "runs/shop")
    assert "\n" not in line
    assert line.startswith(
        "[rl] step 3 faults: env/errors 1 of 5, env/timeouts 1 of 5, reward/raised 1 of 5, samples/unscored 1 of 5; "
        "first (env/errors): scored 0: the environment's call on this episode raised: TypeError: step returned dict"
    )
    assert line.endswith("; see: posttrain rewards show runs/shop --stage rl --step 3 --fault env_error")
    assert StepFaults.of(samples[2:4], [rewards[2], RewardResult(0.0, "wrong", "env")]).line("rl", 1, "r") is None


def test_rewards_show_lists_the_samples_of_a_fault(tmp_path, capsys):
    samples, rewards = step_results()
    RolloutLog(tmp_path, "rl").write(3, samples, rewards, [None] * len(samples))
    debug.show(tmp_path, "rl", 3, fault="env_timeout")
    out = capsys.readouterr().out
    assert out.startswith("stage rl, step 3: 1 of 5 samples with fault env_timeout\n")
    assert "no score: the episode failed" in out and "echoed 7" not in out
    rows = [r for r in debug.load_rows(tmp_path, "rl")[1]]
    assert [sorted(row_faults(r)) for r in rows] == [
        ["env_error"],
        ["env_timeout"],
        [],
        ["reward_raised"],
        ["unscored"],
    ]
    with pytest.raises(debug.DebugError, match="not a fault kind"):
        debug.show(tmp_path, "rl", 3, fault="boom")
    with pytest.raises(debug.DebugError, match="no sample with fault judge_unreadable at step 3"):
        debug.show(tmp_path, "rl", 3, fault="judge_unreadable")


# ---------------------------------------------------------------- health: flags and the stop


def fault_row(errors=0.0, timeouts=0.0, raised=0.0, unscored=0.0, total=8.0) -> dict:
    faulted = min(total, errors + timeouts + raised + unscored)
    return {
        "env/errors": errors,
        "env/timeouts": timeouts,
        "reward/raised": raised,
        "reward/timeouts": 0.0,
        "judge/unreadable": 0.0,
        "samples/unscored": unscored,
        "samples/total": total,
        "samples/faulted_frac": faulted / total,
        "samples/unscored_frac": unscored / total,
        "reward/std": 0.3,
        "samples/scored": total - unscored,
        "groups/zero_advantage_frac": 0.0,
    }


def test_each_fault_kind_is_flagged_with_its_share():
    out = io.StringIO()
    monitor = HealthMonitor(HealthConfig(), "rl", 2, stream=out)
    logged = monitor.step(1, fault_row(errors=1.0, timeouts=2.0))
    assert logged == {"health/flags": 2.0, "health/env_errors": 0.125, "health/env_timeouts": 0.25}
    assert out.getvalue().splitlines() == [
        "warning: [rl] step 1 health/env_errors: env/errors 0.125 share of the step's samples > 0.0 "
        "(health.fault_frac_max): 1 of 8 samples",
        "warning: [rl] step 1 health/env_timeouts: env/timeouts 0.25 share of the step's samples > 0.0 "
        "(health.fault_frac_max): 2 of 8 samples",
    ]
    assert monitor.stop_reason() is None  # a few faults warn; the run goes on
    assert monitor.step(2, fault_row()) == {"health/flags": 0.0}
    quiet = HealthMonitor(HealthConfig(fault_frac_max=0.5), "rl", 2, stream=io.StringIO())
    assert quiet.step(1, fault_row(raised=3.0)) == {"health/flags": 0.0}


@pytest.mark.parametrize(
    "row", [fault_row(errors=6.0), fault_row(raised=5.0), fault_row(unscored=8.0)], ids=["env", "reward", "unscored"]
)
def test_faults_over_the_share_stop_the_run_by_default(row):
    monitor = HealthMonitor(HealthConfig(), "rl", 2, stream=io.StringIO())
    monitor.step(1, row)
    assert monitor.stop_reason() is None  # one step is not yet a streak (faults_stop_after 2)
    monitor.step(2, row)
    reason = monitor.stop_reason()
    assert reason.startswith(
        "[rl] stopped at step 2: for 2 steps in a row the environment, reward or judge failed on too many samples "
        f"(health/faults: samples/faulted_frac {row['samples/faulted_frac']:.4g} > 0.5 (health.faulted_frac_max)"
    )
    # a healthy step in between resets the streak; stop_on without `faults` never stops on it
    monitor.step(3, fault_row())
    monitor.step(4, row)
    assert monitor.stop_reason() is None
    never = HealthMonitor(HealthConfig(stop_on=["zero_advantage"]), "rl", 2, stream=io.StringIO())
    for step in range(1, 5):
        never.step(step, row)
    assert never.stop_reason() is None
    assert "faults" in HealthConfig().stop_on


def test_a_judge_that_is_noise_is_flagged_and_stopped_after_its_steps():
    row = dict(fault_row(), **{"grm/orders_agree": 0.0, "grm/group_std": 0.002})
    monitor = HealthMonitor(HealthConfig(stop_after=3), "rl", 2, stream=io.StringIO())
    logged = [monitor.step(s, row) for s in (1, 2, 3)]
    assert logged[0] == {"health/flags": 2.0, "health/grm_orders_agree": 0.0, "health/grm_spread": 0.002}
    reason = monitor.stop_reason()
    assert reason.startswith("[rl] stopped at step 3: for 3 steps in a row its judge's verdicts carried no signal")
    assert "health/grm_orders_agree: grm/orders_agree 0 < 0.5 (health.grm_orders_agree_min)" in reason
    assert "pipelines/judge.yaml" in reason
    good = dict(fault_row(), **{"grm/orders_agree": 0.9, "grm/group_std": 0.2})
    assert HealthMonitor(HealthConfig(), "rl", 2, stream=io.StringIO()).step(1, good) == {"health/flags": 0.0}


def test_the_spread_of_grm_scores_within_groups():
    def scored(score):
        return RewardResult(score, "rubric", "grm", {"status": "scored"})

    samples = [sample(group=g, verifier="grm") for g in (0, 0, 1, 1, 2)]
    rewards = [scored(0.5), scored(0.504), scored(0.2), scored(0.8), scored(0.9)]  # group 2: one sample, no spread
    assert grm_spread(samples, rewards) == {"grm/group_std": pytest.approx((0.002 + 0.3) / 2)}
    assert grm_spread(samples[:1], rewards[:1]) == {}


# ---------------------------------------------------------------- step time and validate


def test_the_step_time_not_in_a_phase_is_the_remainder():
    row = {"time/step_s": 70.0, "time/generate_s": 1.8, "time/env_s": 66.0, "time/score_s": 1.4, "time/train_s": 0.3}
    assert time_remainder(row)["time/other_s"] == pytest.approx(0.5)
    assert "time/env_s" in STEP_PHASES  # a wait on a tool is a phase


def test_validate_warns_about_an_untrained_small_judge():
    def pipeline(model: str):
        rl = {
            "name": "rl",
            "type": "rl",
            "steps": 1,
            "lr": 1e-5,
            "tasks": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}]},
            "reward": {"grm": {"judge": {"type": "vllm", "model": model}, "method": "pairwise"}},
        }
        judge = {"name": "judge", "type": "judge", "data": {"type": "judgements", "size": 10}, "steps": 1, "lr": 1e-4}
        stages = [rl] if model != "stage:judge" else [judge, rl]
        return validate_pipeline({"model": {"name": "tiny"}, "stages": stages})

    (line,) = judge_warnings(pipeline("smollm2-135m-instruct"), "p.yaml")
    assert line.startswith(
        "p.yaml: warning: stages[0].reward.grm.judge.model smollm2-135m-instruct is an untrained small judge"
    )
    assert "0.49 of held-out pairs" in line and "docs/grm.md" in line
    assert judge_warnings(pipeline("stage:judge"), "p.yaml") == []
