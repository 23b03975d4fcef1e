"""Faults of an RL step's samples: the user's environment, reward function or judge failed.

Each fault is read from the sample's `RewardResult.details["fault"]` (set where it happened:
rewards/user.py, rewards/base.py, the GRM), else from the episode record's error. The step
logs a count per kind (`env/errors`, `env/timeouts`, `reward/raised`, `reward/timeouts`,
`judge/unreadable`, `samples/unscored`: numbers of the step's samples) and prints one
console line naming the first cause and the command that lists the samples.
"""

from __future__ import annotations

from dataclasses import dataclass

from posttrain.types import FAULTS, Fault, RewardResult, Sample

METRIC = {
    "env_error": "env/errors",
    "env_timeout": "env/timeouts",
    "reward_raised": "reward/raised",
    "reward_timeout": "reward/timeouts",
    "judge_unreadable": "judge/unreadable",
    "unscored": "samples/unscored",
}
"""The metric of each fault kind (and of unscored samples), a count of the step's samples."""


def fault_of(result: RewardResult, env: dict | None) -> Fault | None:
    """The sample's fault kind: the reward's own, else the episode's error (an environment
    that raised, hung or could not be built), else None."""
    fault = result.details.get("fault")
    if fault in FAULTS:
        return fault
    if env and env.get("error"):
        return "env_timeout" if env.get("error_kind") == "timeout" else "env_error"
    return None


@dataclass(frozen=True)
class StepFaults:
    """Which of a step's samples faulted, by kind (sample indices), and every reason."""

    total: int
    by_kind: dict[str, list[int]]
    reasons: list[str]

    @classmethod
    def of(cls, samples: list[Sample], rewards: list[RewardResult]) -> StepFaults:
        by_kind: dict[str, list[int]] = {kind: [] for kind in METRIC}
        for i, (sample, result) in enumerate(zip(samples, rewards)):
            fault = fault_of(result, sample.env)
            if fault is not None:
                by_kind[fault].append(i)
            if not result.ok:
                by_kind["unscored"].append(i)
        return cls(len(rewards), by_kind, [r.reason for r in rewards])

    @property
    def faulted(self) -> int:
        """Samples with any fault or unscored (each counted once)."""
        return len({i for indices in self.by_kind.values() for i in indices})

    def metrics(self) -> dict[str, float]:
        counts = {METRIC[kind]: float(len(indices)) for kind, indices in self.by_kind.items()}
        share = self.faulted / self.total if self.total else 0.0
        return counts | {"samples/total": float(self.total), "samples/faulted_frac": share}

    def first(self) -> tuple[str, int] | None:
        """(kind, sample index) of the first fault: a fault kind before plain unscored."""
        for kind in METRIC:
            if self.by_kind[kind]:
                return kind, self.by_kind[kind][0]
        return None

    def line(self, stage: str, step: int, run_dir: str) -> str | None:
        """`[rl] step 3 faults: env/errors 6 of 8, samples/unscored 2 of 8; first: REASON;
        see: posttrain rewards show RUN --stage rl --step 3 --fault env_error`; None: no fault."""
        first = self.first()
        if first is None:
            return None
        kind, index = first
        counts = ", ".join(
            f"{METRIC[k]} {len(indices)} of {self.total}" for k, indices in self.by_kind.items() if indices
        )
        reason = " ".join(self.reasons[index].split())[:160]
        see = f"posttrain rewards show {run_dir} --stage {stage} --step {step} --fault {kind}"
        return f"[{stage}] step {step} faults: {counts}; first ({METRIC[kind]}): {reason}; see: {see}"


def row_faults(row: dict) -> set[str]:
    """The fault kinds of a saved rollout row (rollouts/STAGE.jsonl): its fault, and
    `unscored` when it was not scored; what `rewards show --fault KIND` selects by."""
    details, env = row.get("details") or {}, row.get("env")
    result = RewardResult(0.0, "", "", details if isinstance(details, dict) else {}, bool(row.get("ok", True)))
    fault = fault_of(result, env if isinstance(env, dict) else None)
    kinds: set[str] = {fault} if fault is not None else set()
    return kinds | {"unscored"} if not result.ok else kinds
