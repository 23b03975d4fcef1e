"""Verifier of agent episodes: success is read from the environment's final state (the
store) and the final answer, as each task's check says. A final turn that states several
final answers that differ (`Answer: -285` then `Answer: -286`) is a hedge and scores 0,
by the answer verifiers' check (`math_verifier.differing_answers`). Each episode's check
(the hedge check reads the whole final turn) runs in the answer-check workers within
`timeout_s` (`rewards/deadline.py`): no final turn stalls the scoring process."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from posttrain.data.builtin_env import EnvState, check_episode, final_line
from posttrain.rewards.deadline import ANSWER_TIMEOUT_S, check_in_workers, slim
from posttrain.rewards.extract import cut_turn
from posttrain.rewards.math_verifier import differing_answers
from posttrain.rewards.user import episode_failed
from posttrain.types import RewardResult, Sample


class AgentVerifier:
    name = "agent"

    def __init__(self, timeout_s: float = ANSWER_TIMEOUT_S):
        self.timeout_s = timeout_s  # per episode, in a worker process

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        """Each episode's `score_one` in a worker process, within `timeout_s`: past it, or
        if the check crashes or raises, the episode scores 0 with the reason."""
        calls = [(replace(slim(s), env=s.env),) for s in samples]  # the check reads the final state
        return await asyncio.to_thread(
            check_in_workers, self, "score_one", calls, self.timeout_s, ("math_verify",), None
        )

    def score_one(self, sample: Sample) -> RewardResult:
        """The episode's check; the final turn is read up to a chat turn token written in it
        (`extract.cut_turn`, as the answer verifiers read), and a task whose `check.tools`
        names tools is credited only for an answer read from their real results."""
        check = sample.task.entry.get("check")
        if not isinstance(check, dict) or not check:
            return RewardResult(0.0, "task has no success check (entry.check)", self.name, ok=False)
        if sample.env is None:
            return RewardResult(0.0, "episode has no environment state", self.name, ok=False)
        if sample.env.get("error"):
            return episode_failed(sample.env, self.name)
        state = EnvState.from_dict(sample.env)
        if state.final is not None:  # read up to a turn token, as every answer verifier reads
            state.final = cut_turn(state.final)
        score, reason, details = check_episode(check, state)
        final = state.final if "answer" in check and state.final else None
        hedged = differing_answers(final, answer=final_line(final)) if final else None
        if hedged:  # two final answers that differ: the answer verifiers' own hedge check
            score, reason = 0.0, hedged
        details["finish_reason"] = sample.completion.finish_reason
        if sample.completion.finish_reason in ("max_turns", "length") and score < 1:
            reason += f" (episode ended: {sample.completion.finish_reason})"
        return RewardResult(score, reason, self.name, details)
