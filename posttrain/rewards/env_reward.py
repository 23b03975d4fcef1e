"""Reward of your own environments' episodes: the environment's `reward(state, task, final)`
run in its worker processes (`rollout/env_workers.py`), or, with `verifier: math`, the final answer
against the task's answer. A reward call that raises, hangs past the timeout or returns no
number scores 0 with the reason, as a user reward function's does: the episode's state is
the policy's doing, so no state can void its verdict. Unscored (left out of training, and
counted per step) only what judged nothing: an episode the environment itself failed, or
an environment that could not be built."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from posttrain.data.env import episode_task
from posttrain.rewards.deadline import check_in_workers, slim
from posttrain.rewards.math_verifier import MathVerifier
from posttrain.rewards.user import as_result, episode_failed, failed_call
from posttrain.rollout.env_workers import close_all, episode_reward, workers_for
from posttrain.types import RewardResult, Sample


class EnvReward:
    name = "env"

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        return await asyncio.to_thread(self._score, samples)

    def _score(self, samples: list[Sample]) -> list[RewardResult]:
        out: list[RewardResult | None] = [None] * len(samples)
        asks: dict[tuple, list[int]] = {}
        for i, s in enumerate(samples):
            env = s.env or {}
            if env.get("error"):
                out[i] = self._noted(episode_failed(env, self.name), s)
            elif s.task.entry.get("score") == "math":
                out[i] = self._math(s)
            else:
                asks.setdefault((s.task.entry["env"], repr(s.task.entry["args"])), []).append(i)
        for indices in asks.values():
            entry = samples[indices[0]].task.entry
            jobs = [
                (episode_task(samples[i].task), (samples[i].env or {}).get("state"), _final(samples[i]))
                for i in indices
            ]
            for i, (ok, value) in zip(indices, workers_for(entry).run(episode_reward, jobs, entry["timeout_s"])):
                result = as_result(value, self.name) if ok else failed_call(value, "reward", self.name)
                out[i] = self._noted(result, samples[i])
        return out  # type: ignore[return-value]

    def _math(self, sample: Sample) -> RewardResult:
        """The math verifier on the episode's final answer (the last turn without a tool call)."""
        final = _final(sample)
        if final is None:
            return self._noted(RewardResult(0.0, "no final answer", self.name), sample)
        answered = replace(sample, completion=replace(sample.completion, text=final))
        verifier = MathVerifier()  # in a worker, within its time limit (`rewards/deadline.py`)
        (result,) = check_in_workers(verifier, "score_one", [(slim(answered),)], verifier.timeout_s)
        return self._noted(replace(result, source=self.name), sample)

    def _noted(self, result: RewardResult, sample: Sample) -> RewardResult:
        env = sample.env or {}
        details = {**result.details, "turns": env.get("turns"), "calls": len(env.get("calls", []))}
        details["finish_reason"] = sample.completion.finish_reason
        reason = result.reason
        if sample.completion.finish_reason in ("max_turns", "length") and result.ok:
            reason += f" (episode ended: {sample.completion.finish_reason})"
        return RewardResult(result.score, reason, result.source, details, result.ok)

    def close(self) -> None:
        close_all()


def _state(sample: Sample) -> dict | None:
    return (sample.env or {}).get("state")


def _final(sample: Sample) -> str | None:
    return (sample.env or {}).get("final")
