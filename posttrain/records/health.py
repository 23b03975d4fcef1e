"""RL health checks: the failure modes RL runs meet, read from each step's metrics row.

`HealthMonitor.check` takes a step's row (keeping the little history the trend checks
need) and returns the flags that fire, against the thresholds of the pipeline's `health:`
section; `step` also prints each flag as a one-line warning when it starts firing and
returns the `health/...` keys the RL driver logs. The dashboard's Health view reads those
keys, and reruns the monitor over the metrics of runs that logged none.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from dataclasses import dataclass

from posttrain.config import HealthConfig
from posttrain.types import RewardResult


@dataclass(frozen=True)
class Check:
    """One health check: what it watches and what it means."""

    name: str
    metric: str
    title: str
    meaning: str


CHECKS = {
    c.name: c
    for c in (
        Check("logp_mismatch", "logp/mismatch", "logp mismatch", "engine and trainer disagree on the sampled tokens"),
        Check("entropy_floor", "policy/entropy", "entropy below its floor", "entropy collapse"),
        Check("entropy_fall", "policy/entropy", "entropy falling fast", "entropy collapse"),
        Check(
            "truncated",
            "response/truncated_frac",
            "responses cut short",
            "responses cut at max_tokens, or earlier at rollout.max_model_len (prompt + response)",
        ),
        Check("over_budget", "reward/over_budget_frac", "responses over budget", "responses over the token budget"),
        Check("reward_hacking", "reward/mean", "reward jump, length or tests drop", "a sign of reward hacking"),
        Check("nonfinite", "train/skipped_nonfinite", "non-finite steps skipped", "a NaN/inf loss skipped the step"),
        Check("engine_death", "engine/requeued_by_death", "engine deaths", "an engine died; trajectories requeued"),
        Check("queue_growth", "queue/depth", "queue depth growing", "unfinished trajectories pile up"),
        Check("staleness_cap", "staleness/max", "staleness at its cap", "trajectories stay at max_staleness"),
        Check("grm_unscored", "grm/unscored", "unscored GRM samples", "GRM samples without a score"),
        Check(
            "zero_advantage",
            "groups/zero_advantage_frac",
            "every group has zero advantage",
            "no sample is better than another: the step trains on nothing",
        ),
        Check(
            "constant_reward",
            "reward/std",
            "reward constant",
            "every scored sample got the same reward: it carries no signal (gold answers? answer_format?)",
        ),
        Check("unscored", "samples/unscored_frac", "unscored samples", "samples no verifier could score"),
        Check("dropped", "samples/dropped_frac", "dropped samples", "samples of the step left out of training"),
        Check("env_errors", "env/errors", "environment errors", "your environment raised or returned the wrong type"),
        Check("env_timeouts", "env/timeouts", "environment timeouts", "a call of your environment hung past timeout_s"),
        Check("reward_raised", "reward/raised", "reward raised", "your reward raised or returned no number"),
        Check("reward_timeouts", "reward/timeouts", "reward timeouts", "your reward function hung past its timeout"),
        Check("judge_unreadable", "judge/unreadable", "judge unreadable", "the judge's verdicts could not be read"),
        Check(
            "faults",
            "samples/faulted_frac",
            "faulted samples",
            "samples whose environment, reward or judge failed, or that no verifier scored",
        ),
        Check(
            "grm_orders_agree",
            "grm/orders_agree",
            "judge orders disagree",
            "the pairwise judge's verdict follows the position, not the responses",
        ),
        Check(
            "grm_spread",
            "grm/group_std",
            "judge scores do not spread",
            "the GRM scores a group's responses almost alike: its advantages are noise",
        ),
    )
}
FAULT_CHECKS = {  # the checks on a fault kind's count, as a share of the step's samples
    "env_errors": "env/errors",
    "env_timeouts": "env/timeouts",
    "reward_raised": "reward/raised",
    "reward_timeouts": "reward/timeouts",
    "judge_unreadable": "judge/unreadable",
}
STOP_NOW = ("faults",)  # stop after `faults_stop_after` steps in a row, not `stop_after`
JUDGE_CHECKS = ("grm_orders_agree", "grm_spread")
WATCHED = sorted(
    {c.metric for c in CHECKS.values()}
    | {"response_tokens/mean", "response_tokens/max", "budget/tokens", "code/tests_counted", "reward/mean"}
    | {"samples/scored", "samples/total"}
)


SIGNAL_CHECKS = ("zero_advantage", "constant_reward")  # read the outcome reward's signal


@dataclass(frozen=True)
class HealthFlag:
    """A check that fired at a step: the value it measured and the bound it crossed."""

    name: str
    step: int
    value: float
    bound: float
    message: str


def threshold(name: str, config: HealthConfig, max_staleness: int | None = None) -> str:
    """The rule of a check as the pipeline file sets it, for the warning and the dashboard."""
    c = config
    return {
        "logp_mismatch": f"> {c.logp_mismatch_max} (health.logp_mismatch_max)",
        "entropy_floor": f"< {c.entropy_min} (health.entropy_min)",
        "entropy_fall": f"< (1 - {c.entropy_fall}) x its peak of the last {c.window} steps (health.entropy_fall)",
        "truncated": f"> {c.truncated_frac_max} (health.truncated_frac_max)",
        "over_budget": f"> {c.over_budget_frac_max} (health.over_budget_frac_max)",
        "reward_hacking": (
            f"rise >= {c.hack_reward_jump} over {c.window} steps while length per budget token or tests counted "
            f"fall >= {c.hack_length_drop:.0%} (health.hack_reward_jump, hack_length_drop)"
        ),
        "nonfinite": "> 0 (health.nonfinite)",
        "engine_death": "> 0 (health.engine_deaths)",
        "queue_growth": f"rose at each of {c.queue_growth_steps} steps in a row (health.queue_growth_steps)",
        "staleness_cap": (
            f">= {c.staleness_cap_frac} x partial.max_staleness {max_staleness} for {c.staleness_cap_steps} steps "
            "in a row (health.staleness_cap_frac, staleness_cap_steps)"
        ),
        "grm_unscored": f"> {c.grm_unscored_max} per step (health.grm_unscored_max)",
        "zero_advantage": "= 1: every group (health.zero_advantage)",
        "constant_reward": "= 0 over the step's scored samples (health.constant_reward)",
        "unscored": f"> {c.unscored_frac_max} (health.unscored_frac_max)",
        "dropped": f"> {c.dropped_frac_max} (health.dropped_frac_max)",
        **{f: f"share of the step's samples > {c.fault_frac_max} (health.fault_frac_max)" for f in FAULT_CHECKS},
        "faults": f"> {c.faulted_frac_max} (health.faulted_frac_max)",
        "grm_orders_agree": f"< {c.grm_orders_agree_min} (health.grm_orders_agree_min)",
        "grm_spread": f"< {c.grm_spread_min} (health.grm_spread_min)",
    }[name]


def enabled(name: str, config: HealthConfig, max_staleness: int | None = None) -> bool:
    c = config
    return (
        c.enabled
        and {
            "logp_mismatch": c.logp_mismatch_max is not None,
            "entropy_floor": c.entropy_min is not None,
            "entropy_fall": c.entropy_fall is not None,
            "truncated": c.truncated_frac_max is not None,
            "over_budget": c.over_budget_frac_max is not None,
            "reward_hacking": c.hack_reward_jump is not None,
            "nonfinite": c.nonfinite,
            "engine_death": c.engine_deaths,
            "queue_growth": c.queue_growth_steps is not None,
            "staleness_cap": c.staleness_cap_frac is not None and bool(max_staleness),
            "grm_unscored": c.grm_unscored_max is not None,
            "zero_advantage": c.zero_advantage,
            "constant_reward": c.constant_reward,
            "unscored": c.unscored_frac_max is not None,
            "dropped": c.dropped_frac_max is not None,
            **{f: c.fault_frac_max is not None for f in FAULT_CHECKS},
            "faults": c.faulted_frac_max is not None,
            "grm_orders_agree": c.grm_orders_agree_min is not None,
            "grm_spread": c.grm_spread_min is not None,
        }[name]
    )


def _value(row: dict, key: str) -> float | None:
    """A metric as a float; metrics.jsonl writes a non-finite float as a string ("nan")."""
    value = row.get(key)
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return sum(kept) / len(kept) if kept else None


def _above(value: float | None, bound: float | None) -> tuple[float, float] | None:
    """(value, bound) when the value is over the bound (never when the check's bound is off)."""
    return (value, bound) if value is not None and bound is not None and value > bound else None


def _mean_of(rows: list[dict], key: str) -> float | None:
    return _mean([r[key] for r in rows])


def _per_budget(rows: list[dict]) -> float | None:
    """Mean response length per budget token (tokens alone where no budget is logged): a
    budget that shrinks on schedule does not read as responses getting shorter."""
    return _mean(
        [r["response_tokens/mean"] / (r["budget/tokens"] or 1.0) for r in rows if r["response_tokens/mean"] is not None]
    )


def _fall(before: float | None, after: float | None) -> float:
    """Relative fall from `before` to `after`; 0 when it cannot be measured."""
    return 1.0 - after / before if before and after is not None and before > 0 else 0.0


class HealthMonitor:
    """Checks one stage's (or expert job's) steps in order; keeps the history it needs."""

    def __init__(
        self,
        config: HealthConfig,
        stage: str,
        max_staleness: int | None = None,
        stream=None,
        outcome: bool = True,
        lengths: tuple[int, int] | None = None,
    ):
        """`outcome`: the reward drives the advantage (false for MOPD with alpha 0, whose
        signal is the teachers': the reward-signal checks and the stop are off). `lengths`:
        the stage's (max_tokens, rollout.max_model_len), for the truncation flag to name the
        limit that cut the responses."""
        self.config, self.stage, self.max_staleness = config, stage, max_staleness
        self.lengths = lengths
        self.stream, self.outcome = stream, outcome
        self.streak = 0  # steps in a row with a `stop_on` check firing
        self.streak_flags: dict[str, HealthFlag] = {}
        self.fault_streak = 0  # ... the same for the fault checks (`faults_stop_after`)
        self.fault_flags: dict[str, HealthFlag] = {}
        self.last_step = 0
        self.history: deque[dict] = deque(maxlen=2 * config.window)
        self.rises = 0
        self.last_depth: float | None = None
        self.at_cap = 0  # steps in a row with staleness at its cap
        self.firing: set[str] = set()

    # ------------------------------------------------------------ the checks

    def check(self, step: int, row: dict) -> list[HealthFlag]:
        """The flags this step's row raises, in CHECKS order."""
        v = {key: _value(row, key) for key in WATCHED}
        found = []
        for name, check in CHECKS.items():
            if name in SIGNAL_CHECKS and not self.outcome:
                continue
            if enabled(name, self.config, self.max_staleness):
                fired = getattr(self, f"_{name}")(v)
                if fired is not None:
                    value, bound, *detail = fired
                    rule = threshold(name, self.config, self.max_staleness)
                    message = f"{check.metric} {value:.4g} {rule}" + (f": {detail[0]}" if detail else "")
                    found.append(HealthFlag(name, step, value, bound, message))
        self.history.append(v)
        return found

    def _logp_mismatch(self, v):
        return _above(v["logp/mismatch"], self.config.logp_mismatch_max)

    def _entropy_floor(self, v):
        value, bound = v["policy/entropy"], self.config.entropy_min
        return (value, bound) if value is not None and bound is not None and value < bound else None

    def _entropy_fall(self, v):
        value, fall = v["policy/entropy"], self.config.entropy_fall
        recent = [h["policy/entropy"] for h in list(self.history)[-self.config.window :]]
        peak = max((e for e in recent if e is not None and math.isfinite(e)), default=None)
        if value is None or peak is None or fall is None or value >= (1 - fall) * peak:
            return None
        return value, (1 - fall) * peak, f"fell from {peak:.4g} within {len(recent)} steps"

    def _truncated(self, v):
        fired = _above(v["response/truncated_frac"], self.config.truncated_frac_max)
        return fired if fired is None else (*fired, self._cut_by(v["response_tokens/max"], v.get("budget/tokens")))

    def _cut_by(self, longest: float | None, budget: float | None = None) -> str:
        """Which limit cut the responses: a token budget (the effort's design), else, where
        none reached max_tokens, the context (prompt + response at rollout.max_model_len),
        where raising max_tokens does nothing."""
        if self.lengths is None or longest is None:
            return "responses stop at max_tokens or at rollout.max_model_len (prompt + response), whichever comes first"
        max_tokens, max_model_len = self.lengths
        if budget and budget < max_tokens and longest >= budget:
            return (
                f"the longest response ({longest:.0f} tokens) reached its token budget (mean {budget:.0f}, below "
                f"max_tokens {max_tokens}): the budget cut them, as the stage's `budget` sets (over it: reward -1)"
            )
        if longest < max_tokens:
            return (
                f"no response reached max_tokens {max_tokens} (the longest: {longest:.0f}): they were cut at "
                f"rollout.max_model_len {max_model_len} (prompt + response) or a token budget; raise "
                "rollout.max_model_len or shorten the prompts, not max_tokens"
            )
        return f"responses reached max_tokens {max_tokens}: raise it (prompt + max_tokens within {max_model_len})"

    def _over_budget(self, v):
        return _above(v["reward/over_budget_frac"], self.config.over_budget_frac_max)

    def _reward_hacking(self, v):
        c, w, jump = self.config, self.config.window, self.config.hack_reward_jump
        if jump is None or len(self.history) < 2 * w - 1:
            return None
        rows = list(self.history)[-(2 * w - 1) :] + [v]
        before, after = rows[:w], rows[w:]
        r0, r1 = _mean_of(before, "reward/mean"), _mean_of(after, "reward/mean")
        if r0 is None or r1 is None or r1 - r0 < jump:
            return None
        # a reward that rose because fewer responses went over budget is the budget being learned
        learned = (_mean_of(before, "reward/over_budget_frac") or 0.0) - (
            _mean_of(after, "reward/over_budget_frac") or 0.0
        )
        if learned >= jump / 2:
            return None
        length = _fall(_per_budget(before), _per_budget(after))
        tests = _fall(_mean_of(before, "code/tests_counted"), _mean_of(after, "code/tests_counted"))
        if max(length, tests) < c.hack_length_drop:
            return None
        what = f"length per budget token fell {length:.0%}" if length >= tests else f"tests counted fell {tests:.0%}"
        return r1 - r0, jump, f"rose from {r0:.3g} to {r1:.3g} over {w} steps while {what}"

    def _nonfinite(self, v):
        value = v["train/skipped_nonfinite"]
        return (value, 0.0, "the step was skipped for a NaN/inf loss") if value else None

    def _engine_death(self, v):
        value = v["engine/requeued_by_death"]
        return (value, 0.0, "an engine died and its trajectories were requeued") if value else None

    def _queue_growth(self, v):
        depth, steps = v["queue/depth"], self.config.queue_growth_steps
        if depth is None or steps is None:
            return None
        self.rises = self.rises + 1 if self.last_depth is not None and depth > self.last_depth else 0
        self.last_depth = depth
        return (depth, float(steps)) if self.rises >= steps else None

    def _staleness_cap(self, v):
        """At the cap for `staleness_cap_steps` steps in a row: with partial rollouts some
        trajectories reach the cap now and then, which is what the cap is for; a cap reached
        step after step means the queue cannot keep up and samples are about to be dropped."""
        frac, cap = self.config.staleness_cap_frac, self.max_staleness
        if frac is None or not cap:
            return None
        value, bound = v["staleness/max"], frac * cap
        self.at_cap = self.at_cap + 1 if value is not None and value >= bound else 0
        return (value, bound) if self.at_cap >= self.config.staleness_cap_steps else None

    def _grm_unscored(self, v):
        return _above(v["grm/unscored"], self.config.grm_unscored_max)

    def _zero_advantage(self, v):
        value = v["groups/zero_advantage_frac"]
        if value is None or value < 1.0:
            return None
        return value, 1.0, "no group had a sample better than another"

    def _constant_reward(self, v):
        std, scored = v["reward/std"], v["samples/scored"]
        if std is None or std > 1e-9 or scored is not None and scored < 2:
            return None
        mean = v["reward/mean"]
        return (std, 0.0, f"every scored sample got {mean:.4g}") if mean is not None else (std, 0.0)

    def _unscored(self, v):
        return _above(v["samples/unscored_frac"], self.config.unscored_frac_max)

    def _dropped(self, v):
        return _above(v["samples/dropped_frac"], self.config.dropped_frac_max)

    def _fault_share(self, v, metric: str):
        count, total, bound = v[metric], v["samples/total"], self.config.fault_frac_max
        if not count or not total or bound is None:
            return None
        share = count / total
        return (share, bound, f"{count:g} of {total:g} samples") if share > bound else None

    def _env_errors(self, v):
        return self._fault_share(v, "env/errors")

    def _env_timeouts(self, v):
        return self._fault_share(v, "env/timeouts")

    def _reward_raised(self, v):
        return self._fault_share(v, "reward/raised")

    def _reward_timeouts(self, v):
        return self._fault_share(v, "reward/timeouts")

    def _judge_unreadable(self, v):
        return self._fault_share(v, "judge/unreadable")

    def _faults(self, v):
        return _above(v["samples/faulted_frac"], self.config.faulted_frac_max)

    def _grm_orders_agree(self, v):
        value, bound = v["grm/orders_agree"], self.config.grm_orders_agree_min
        fires = value is not None and bound is not None and value < bound  # a NaN never fires
        return (value, bound, "a judge at chance or worse") if fires else None

    def _grm_spread(self, v):
        value, bound = v["grm/group_std"], self.config.grm_spread_min
        fires = value is not None and bound is not None and value < bound  # a NaN never fires
        return (value, bound, "mean std of GRM scores within a group") if fires else None

    # ------------------------------------------------------------ the driver's hook

    def step(self, step: int, row: dict) -> dict[str, float]:
        """Check the step's row, warn about flags that start firing, return the keys to log:
        `health/flags` (how many fired) and `health/NAME` (the value measured) for each."""
        if not self.config.enabled:
            return {}
        flags = self.check(step, row)
        for flag in flags:
            if flag.name not in self.firing:
                self.warn(flag)
        self.firing = {f.name for f in flags}
        stopping = [f for f in flags if f.name in self.config.stop_on] if self.outcome else []
        slow = [f for f in stopping if f.name not in STOP_NOW]
        self.streak = self.streak + 1 if slow else 0
        self.streak_flags = {f.name: f for f in slow}
        fast = [f for f in stopping if f.name in STOP_NOW]
        self.fault_streak = self.fault_streak + 1 if fast else 0
        self.fault_flags = {f.name: f for f in fast}
        self.last_step = step
        return {"health/flags": float(len(flags)), **{f"health/{f.name}": f.value for f in flags}}

    def stop_reason(self) -> str | None:
        """Why the run must stop: a `stop_on` check fired at `stop_after` steps in a row (a
        fault check: at `faults_stop_after`)."""
        if not self.config.enabled:
            return None
        if self.fault_streak >= self.config.faults_stop_after:
            fired = "; ".join(f"health/{f.name}: {f.message}" for f in self.fault_flags.values())
            return (
                f"[{self.stage}] stopped at step {self.last_step}: for {self.fault_streak} steps in a row the "
                f"environment, reward or judge failed on too many samples ({fired}); fix the cause named in the "
                "faults line above, or change health.faulted_frac_max / health.faults_stop_after / health.stop_on"
            )
        if self.streak < self.config.stop_after:
            return None
        fired = "; ".join(f"health/{f.name}: {f.message}" for f in self.streak_flags.values())
        if set(self.streak_flags) <= set(SIGNAL_CHECKS):
            why = "its reward carried no signal, so nothing was learned"
            advice = "check the reference answers (`posttrain validate` scores them), the verifier and the prompts"
        elif set(self.streak_flags) <= set(SIGNAL_CHECKS) | set(JUDGE_CHECKS):
            why = "its judge's verdicts carried no signal (position bias, or scores that do not spread)"
            advice = "train the judge first (pipelines/judge.yaml) or point reward.grm.judge at a larger model"
        else:
            why = f"health.stop_on checks fired ({', '.join(self.streak_flags)})"
            advice = "see the flags above"
        return (
            f"[{self.stage}] stopped at step {self.last_step}: for {self.streak} steps in a row {why} ({fired}); "
            f"{advice}, or change health.stop_on / health.stop_after"
        )

    def warn(self, flag: HealthFlag) -> None:
        stream = self.stream or sys.stderr
        clear = "\r\033[K" if stream.isatty() else ""  # the live progress line is rewritten in place
        stream.write(f"{clear}warning: [{self.stage}] step {flag.step} health/{flag.name}: {flag.message}\n")
        stream.flush()


def code_test_counts(rewards: list[RewardResult]) -> dict[str, float]:
    """`code/tests_counted`: mean number of unit tests the sandbox counted per coding sample
    (0 when a program's run reported none): a count that falls while reward rises is how a
    program that skips its tests shows up."""
    coding = [r for r in rewards if r.source == "code"]
    if not coding:
        return {}
    return {"code/tests_counted": sum(float(r.details.get("total", 0)) for r in coding) / len(coding)}
