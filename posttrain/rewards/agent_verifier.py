"""Verifier of agent episodes: success is read from the environment's final state (the
store) and the final answer, as each task's check says."""

from __future__ import annotations

from posttrain.data.builtin_env import EnvState, check_episode
from posttrain.types import RewardResult, Sample


class AgentVerifier:
    name = "agent"

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        return [self.score_one(s) for s in samples]

    def score_one(self, sample: Sample) -> RewardResult:
        check = sample.task.entry.get("check")
        if not isinstance(check, dict) or not check:
            return RewardResult(0.0, "task has no success check (entry.check)", self.name, ok=False)
        if sample.env is None:
            return RewardResult(0.0, "episode has no environment state", self.name, ok=False)
        if sample.env.get("error"):
            return RewardResult(0.0, f"environment failed: {sample.env['error']}", self.name, ok=False)
        state = EnvState.from_dict(sample.env)
        score, reason, details = check_episode(check, state)
        details["finish_reason"] = sample.completion.finish_reason
        if sample.completion.finish_reason in ("max_turns", "length") and score < 1:
            reason += f" (episode ended: {sample.completion.finish_reason})"
        return RewardResult(score, reason, self.name, details)
