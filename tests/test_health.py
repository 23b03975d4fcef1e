"""The RL health checks (posttrain/records/health.py) on step rows built to trip each one,
and to stay quiet on a healthy run: the flags, the values and bounds they carry, the
one-line warnings (once per streak), the `health/...` keys, and the `health:` section of
the pipeline file."""

import io

import pytest

from posttrain.config import HealthConfig
from posttrain.config.files import ConfigError, validate_pipeline
from posttrain.records.health import CHECKS, HealthMonitor, code_test_counts
from posttrain.types import RewardResult


def healthy(step: int) -> dict:
    """A quiet RL step: every watched metric inside its bound."""
    return {
        "reward/mean": 0.1 + 0.001 * step,
        "reward/over_budget_frac": 0.05,
        "response_tokens/mean": 30.0,
        "budget/tokens": 40.0,
        "response/truncated_frac": 0.02,
        "logp/mismatch": 1e-6,
        "policy/entropy": 0.8,
        "train/skipped_nonfinite": 0.0,
        "engine/requeued_by_death": 0.0,
        "queue/depth": 10.0 + (step % 2),
        "staleness/max": 1.0,
        "grm/unscored": 0.0,
        "code/tests_counted": 5.0,
    }


def run(rows: list[dict], config: HealthConfig = HealthConfig(), staleness: int = 2) -> dict[str, list[int]]:
    monitor = HealthMonitor(config, "grpo", staleness, stream=io.StringIO())
    fired: dict[str, list[int]] = {}
    for step, row in enumerate(rows, 1):
        for flag in monitor.check(step, row):
            fired.setdefault(flag.name, []).append(step)
    return fired


def test_a_healthy_run_raises_nothing():
    assert run([healthy(s) for s in range(1, 101)]) == {}


def changed(steps: range, **values) -> list[dict]:
    return [dict(healthy(s), **(values if s in steps else {})) for s in range(1, 41)]


@pytest.mark.parametrize(
    "name, values",
    [
        ("logp_mismatch", {"logp/mismatch": 0.2}),
        ("truncated", {"response/truncated_frac": 0.5}),
        ("over_budget", {"reward/over_budget_frac": 0.4}),
        ("nonfinite", {"train/skipped_nonfinite": 1.0}),
        ("engine_death", {"engine/requeued_by_death": 6.0}),
        ("grm_unscored", {"grm/unscored": 2.0}),
    ],
)
def test_a_bound_crossed_fires_at_those_steps_only(name, values):
    assert run(changed(range(21, 24), **values)) == {name: [21, 22, 23]}


def test_staleness_fires_once_the_cap_holds_for_its_steps():
    assert run(changed(range(21, 26), **{"staleness/max": 2.0})) == {"staleness_cap": [23, 24, 25]}


def test_the_flag_carries_value_bound_and_a_message_naming_the_key():
    monitor = HealthMonitor(HealthConfig(), "experts/coding-high", 2, stream=io.StringIO())
    (flag,) = monitor.check(7, dict(healthy(7), **{"logp/mismatch": 0.31}))
    assert (flag.name, flag.step, flag.value, flag.bound) == ("logp_mismatch", 7, 0.31, 0.05)
    assert flag.message == "logp/mismatch 0.31 > 0.05 (health.logp_mismatch_max)"


def test_entropy_below_its_floor_and_a_fast_fall():
    floor = run(changed(range(30, 41), **{"policy/entropy": 0.01}))
    assert floor["entropy_floor"] == list(range(30, 41))
    # 0.8 -> 0.3 within the window: a fall of more than half, though far above the floor
    fall = run(changed(range(30, 41), **{"policy/entropy": 0.3}))
    assert "entropy_floor" not in fall and fall["entropy_fall"][0] == 30
    # once the window holds only the low values the fall is over
    assert fall["entropy_fall"] == list(range(30, 40))
    # a slow drift over many windows is not a fast fall
    slow = [dict(healthy(s), **{"policy/entropy": 0.8 * 0.99**s}) for s in range(1, 101)]
    assert "entropy_fall" not in run(slow)


def test_a_reward_jump_with_shorter_responses_or_fewer_tests_is_flagged():
    jump = range(21, 41)
    shorter = run(changed(jump, **{"reward/mean": 0.8, "response_tokens/mean": 12.0}))
    # mean of the last 10 steps against the 10 before: 0.3 higher once five steps are in
    assert shorter["reward_hacking"][0] == 25 and 40 not in shorter["reward_hacking"]
    fewer_tests = run(changed(jump, **{"reward/mean": 0.8, "code/tests_counted": 1.0}))
    assert "reward_hacking" in fewer_tests
    # the same jump with the length kept is learning, not a flag
    assert run(changed(jump, **{"reward/mean": 0.8})) == {}
    # a budget that shrinks on schedule with the responses: length per budget token is kept
    annealed = run(changed(jump, **{"reward/mean": 0.8, "response_tokens/mean": 12.0, "budget/tokens": 16.0}))
    assert annealed == {}
    # a jump that comes from fewer responses over budget is the budget being learned
    learned = run([dict(r, **{"reward/over_budget_frac": 0.9}) if i < 20 else r for i, r in enumerate(shorter_rows())])
    assert "reward_hacking" not in learned


def shorter_rows() -> list[dict]:
    return changed(range(21, 41), **{"reward/mean": 0.8, "response_tokens/mean": 12.0})


def test_queue_depth_growing_step_after_step():
    rows = [dict(healthy(s), **{"queue/depth": float(10 + max(0, s - 20) * 3)}) for s in range(1, 41)]
    assert run(rows)["queue_growth"] == list(range(25, 41))  # five rises in a row first at step 25


def test_staleness_is_judged_against_the_stages_own_cap():
    rows = changed(range(21, 24), **{"staleness/max": 2.0})
    assert run(rows, staleness=4) == {}
    now_and_then = changed(range(21, 31, 2), **{"staleness/max": 2.0})  # at the cap every other step
    assert run(now_and_then) == {}
    assert run(rows, HealthConfig(staleness_cap_steps=1)) == {"staleness_cap": [21, 22, 23]}
    assert run(rows, staleness=0) == {}  # a synchronous stage has no cap to reach


def test_thresholds_turn_checks_off_and_on():
    rows = changed(range(21, 24), **{"logp/mismatch": 0.2})
    assert run(rows, HealthConfig(logp_mismatch_max=None)) == {}
    assert run(rows, HealthConfig(enabled=False)) == {}
    tiny = run([healthy(s) for s in range(1, 6)], HealthConfig(logp_mismatch_max=1e-9))
    assert tiny == {"logp_mismatch": [1, 2, 3, 4, 5]}


def test_missing_metrics_and_nan_strings_never_fire_or_crash():
    rows = [{"reward/mean": "nan", "logp/mismatch": "nan"}, {}, {"policy/entropy": None}]
    assert run(rows) == {}
    assert run([{"logp/mismatch": "inf"}]) == {"logp_mismatch": [1]}


def test_the_driver_hook_warns_once_per_streak_and_returns_the_keys():
    out = io.StringIO()
    monitor = HealthMonitor(HealthConfig(), "experts/coding-high", 2, stream=out)
    logged = [monitor.step(s, r) for s, r in enumerate(changed(range(3, 6), **{"logp/mismatch": 0.2}), 1)]
    assert logged[0] == {"health/flags": 0.0}
    assert logged[3] == {"health/flags": 1.0, "health/logp_mismatch": 0.2}
    assert out.getvalue().splitlines() == [
        "warning: [experts/coding-high] step 3 health/logp_mismatch: logp/mismatch 0.2 > 0.05 "
        "(health.logp_mismatch_max)"
    ]
    assert HealthMonitor(HealthConfig(enabled=False), "x", 2).step(1, healthy(1)) == {}


def test_every_check_is_described():
    assert set(CHECKS) == {
        "logp_mismatch",
        "entropy_floor",
        "entropy_fall",
        "truncated",
        "over_budget",
        "reward_hacking",
        "nonfinite",
        "engine_death",
        "queue_growth",
        "staleness_cap",
        "grm_unscored",
        "zero_advantage",
        "constant_reward",
        "unscored",
        "dropped",
        "env_errors",
        "env_timeouts",
        "reward_raised",
        "reward_timeouts",
        "judge_unreadable",
        "faults",
        "grm_orders_agree",
        "grm_spread",
    }


def test_tests_counted_per_coding_sample():
    results = [
        RewardResult(1.0, "5/5 tests passed", "code", {"passed": 5, "total": 5}),
        RewardResult(1.0, "all tests passed", "code", {"status": "passed"}),  # a program that printed no count
        RewardResult(0.5, "rubric", "grm", {}),
    ]
    assert code_test_counts(results) == {"code/tests_counted": 2.5}
    assert code_test_counts(results[2:]) == {}


def test_the_health_section_of_a_pipeline_file():
    base = {
        "model": {"name": "tiny"},
        "stages": [
            {
                "name": "s",
                "type": "sft",
                "steps": 1,
                "lr": 1e-3,
                "data": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}]},
            }
        ],
    }
    assert validate_pipeline(base).health == HealthConfig()
    config = validate_pipeline({**base, "health": {"logp_mismatch_max": 0.01, "entropy_min": None}})
    assert config.health.logp_mismatch_max == 0.01 and config.health.entropy_min is None
    with pytest.raises(ConfigError, match=r"^p.yaml: health.window: must be >= 2"):
        validate_pipeline({**base, "health": {"window": 1}}, source="p.yaml")
    with pytest.raises(ConfigError, match=r"^p.yaml: health.mismatch: unknown key"):
        validate_pipeline({**base, "health": {"mismatch": 0.1}}, source="p.yaml")


def test_the_truncation_flag_names_the_limit_that_cut_the_responses():
    """Issue 56: a 266-token tool prompt with max_tokens 384 under max_model_len 512 was cut
    at max_model_len, and the flag said to raise max_tokens, which did nothing."""
    row = {"response/truncated_frac": 0.97, "response_tokens/max": 246.0}
    out = io.StringIO()
    HealthMonitor(HealthConfig(), "rl", 2, stream=out, lengths=(384, 512)).step(1, row)
    assert "no response reached max_tokens 384 (the longest: 246)" in out.getvalue()
    assert "raise rollout.max_model_len or shorten the prompts, not max_tokens" in out.getvalue()
    out = io.StringIO()
    HealthMonitor(HealthConfig(), "rl", 2, stream=out, lengths=(384, 512)).step(1, {**row, "response_tokens/max": 384})
    assert "responses reached max_tokens 384: raise it" in out.getvalue()
    # an effort's token budget below max_tokens cut them: that is the budget's design, not a limit to raise
    out = io.StringIO()
    budgeted = {**row, "response_tokens/max": 38.0, "budget/tokens": 30.0}
    HealthMonitor(HealthConfig(), "rl", 2, stream=out, lengths=(96, 256)).step(1, budgeted)
    assert "reached its token budget (mean 30, below max_tokens 96)" in out.getvalue()
    assert "raise rollout.max_model_len" not in out.getvalue()
