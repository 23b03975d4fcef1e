"""Rewards for user tasks: a user function `module:function`, or matching the row's answer.

The user function runs in worker processes (`rollout.workers`), never in the driver, and
so does answer matching (`rewards/deadline.py`). What a response makes of its reward call
scores 0 with the reason, never a void: a call that hangs past its timeout (its worker is
killed and replaced), crashes its worker, raises, or returns NaN or something that is not
a score. Only a function that cannot be loaded, or a worker that cannot start, leaves its
samples unscored (ok=False).

A user function takes (response: str, task: dict with id, messages, answer, metadata)
and returns a float, a (float, reason) pair, or {"score": float, "reason": str}.
"""

from __future__ import annotations

import asyncio
import math

from posttrain.data.preflight import load_reward_function
from posttrain.rewards.choice import is_choice, score_choice
from posttrain.rewards.deadline import ANSWER_TIMEOUT_S, check_in_workers, slim
from posttrain.rewards.math_verifier import answer_form, judge, question_of
from posttrain.rollout.workers import CallRaised, CallTimeout, WorkerCrashed, WorkerPool, WorkerUnavailable
from posttrain.types import RewardResult, Sample

_FN = None


def _init(spec: str) -> None:
    global _FN
    _FN = load_reward_function(spec)


def _call(response: str, task: dict):
    return _FN(response, task)


def _task_dict(sample: Sample) -> dict:
    return task_view(sample.task)


def task_view(t) -> dict:
    """What a reward function sees of a task: id, answer, metadata, messages."""
    return {
        "id": t.task_id,
        "answer": t.answer,
        "metadata": t.entry.get("metadata", {}),
        "messages": [{"role": m.role, "content": m.content} for m in t.messages],
    }


def _unpacked(value) -> tuple[object, str]:
    """(score, reason) of a float, a (float, reason) pair or a {score, reason} dict."""
    if isinstance(value, dict):
        return value.get("score"), str(value.get("reason", "user reward"))
    if isinstance(value, tuple) and len(value) == 2:
        return value[0], str(value[1])
    return value, "user reward"


def not_a_score(value) -> str | None:
    """What a reward returned that is not a score (`str, not a number`, `dict with NoneType as
    its score, not a number`, `nan`), or None for a score."""
    score, _ = _unpacked(value)
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        inner = "" if score is value else f" with {type(score).__name__} as its score"
        return f"{type(value).__name__}{inner}, not a number"
    return None if math.isfinite(score) else repr(score)


def as_result(value, source: str) -> RewardResult:
    """Turn what a user function returned into a RewardResult, flagging what is not a score."""
    problem = not_a_score(value)
    if problem is not None:
        return RewardResult(0.0, f"scored 0: user reward returned {problem}", source, {"fault": "reward_raised"})
    score, reason = _unpacked(value)
    return RewardResult(float(score), reason, source)  # type: ignore[arg-type]


def call_verdict(value, error: BaseException | None, source: str, timeout_s: float) -> RewardResult:
    """A user reward call's outcome: its score, else 0 with what went wrong on this response;
    unscored only when no worker could run it."""
    if error is None:
        return as_result(value, source)
    raised = {"fault": "reward_raised"}
    if isinstance(error, CallTimeout):
        reason = f"scored 0: user reward timed out after {timeout_s}s (worker replaced)"
        return RewardResult(0.0, reason, source, {"fault": "reward_timeout"})
    if isinstance(error, CallRaised):
        return RewardResult(0.0, f"scored 0: user reward raised {error}"[:500], source, raised)
    if isinstance(error, WorkerCrashed):
        return RewardResult(0.0, f"scored 0: user reward crashed: {error}", source, raised)
    if isinstance(error, WorkerUnavailable):
        return RewardResult(0.0, f"unscored: user reward workers: {error}", source, raised, ok=False)
    reason = f"unscored: user reward call failed: {type(error).__name__}: {error}"
    return RewardResult(0.0, reason, source, raised, ok=False)


def failed_call(failure, what: str, source: str) -> RewardResult:
    """A reward call that came back without a value: 0 with why when the call itself timed out or
    raised (its worker replaced), unscored only when the environment could not be built."""
    kind = getattr(failure, "kind", "start")
    if kind == "start":
        return RewardResult(0.0, f"unscored: {what} {failure}", source, {"fault": "env_error"}, ok=False)
    fault = "reward_timeout" if kind == "timeout" else "reward_raised"
    return RewardResult(0.0, f"scored 0: {what} {failure}", source, {"call_error": kind, "fault": fault})


def episode_failed(env: dict, source: str) -> RewardResult:
    """An episode the environment ended with an error: 0 with why when one of its calls (on the
    policy's own tool calls or state) timed out or raised; unscored when the environment could
    not be built, or the error's kind is not known (the machinery's failure)."""
    kind = env.get("error_kind", "start")
    fault = "env_timeout" if kind == "timeout" else "env_error"
    if kind == "start":
        return RewardResult(0.0, f"environment failed: {env['error']}", source, {"fault": fault}, ok=False)
    reason = f"scored 0: the environment's call on this episode {'timed out' if kind == 'timeout' else 'raised'}"
    return RewardResult(0.0, f"{reason}: {env['error']}"[:500], source, {"call_error": kind, "fault": fault})


class UserReward:
    name = "user"

    def __init__(
        self, function: str | None, timeout_s: float = 10.0, workers: int = 1, answer_timeout_s=ANSWER_TIMEOUT_S
    ):
        self.function, self.timeout_s, self.workers = function, timeout_s, workers
        self.answer_timeout_s = answer_timeout_s  # matching the answer, per sample
        self._pool: WorkerPool | None = None
        if function is not None:
            load_reward_function(function)  # fail at start-up, not at the first sample

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pool": None}  # a worker matching answers needs no pool of its own

    def _score_with_function(self, samples: list[Sample]) -> list[RewardResult]:
        if self._pool is None:
            self._pool = WorkerPool(self.workers, _init, (self.function,))
        calls = [(s.completion.text, _task_dict(s)) for s in samples]
        outcomes = self._pool.map(_call, calls, self.timeout_s)
        return [call_verdict(value, error, self.name, self.timeout_s) for value, error in outcomes]

    def _match(self, sample: Sample) -> RewardResult:
        """The row's `answer` against the response's final answer, as the `math` verifier does."""
        gold = sample.task.answer
        if gold is None:
            return RewardResult(0.0, "task has no answer and no reward function is set", self.name, ok=False)
        if is_choice(sample):
            return score_choice(sample, self.name)
        verdict = judge(gold, sample.completion.text, "auto", answer_form(sample), question_of(sample))
        return RewardResult(verdict.score, verdict.reason, self.name, verdict.details)

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        if self.function is None:
            calls = [(slim(s),) for s in samples]
            return await asyncio.to_thread(check_in_workers, self, "_match", calls, self.answer_timeout_s)
        return await asyncio.to_thread(self._score_with_function, samples)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
