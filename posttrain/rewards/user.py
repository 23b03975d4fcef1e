"""Rewards for user tasks: a user function `module:function`, or matching the row's answer.

The user function runs in worker processes, never in the driver: one that raises,
returns NaN or something that is not a score, or hangs past its timeout flags its sample
(ok=False, with the reason) and the run goes on; a hung worker is killed and replaced.

A user function takes (response: str, task: dict with id, messages, answer, metadata)
and returns a float, a (float, reason) pair, or {"score": float, "reason": str}.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import multiprocessing

from posttrain.rewards.math_verifier import answer_form, judge, question_of
from posttrain.types import RewardResult, Sample

_FN = None
STARTUP_TIMEOUT_S = 300


def _load(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _init(spec: str) -> None:
    global _FN
    _FN = _load(spec)


def _ready() -> bool:
    return True


def _call(response: str, task: dict):
    return _FN(response, task)


def _task_dict(sample: Sample) -> dict:
    t = sample.task
    return {
        "id": t.task_id,
        "answer": t.answer,
        "metadata": t.entry.get("metadata", {}),
        "messages": [{"role": m.role, "content": m.content} for m in t.messages],
    }


def as_result(value, source: str) -> RewardResult:
    """Turn what a user function returned into a RewardResult, flagging what is not a score."""
    reason = "user reward"
    if isinstance(value, dict):
        value, reason = value.get("score"), str(value.get("reason", reason))
    elif isinstance(value, tuple) and len(value) == 2:
        value, reason = value[0], str(value[1])
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return RewardResult(0.0, f"user reward returned {type(value).__name__}, not a number", source, ok=False)
    if not math.isfinite(value):
        return RewardResult(0.0, f"user reward returned {value}", source, ok=False)
    return RewardResult(float(value), reason, source)


class UserReward:
    name = "user"

    def __init__(self, function: str | None, timeout_s: float = 10.0, workers: int = 1):
        self.function, self.timeout_s, self.workers = function, timeout_s, workers
        self._pool = None
        if function is not None:
            _load(function)  # fail at start-up, not at the first sample

    def _ensure_pool(self):
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            self._pool = ctx.Pool(self.workers, initializer=_init, initargs=(self.function,))
            # a fresh worker imports the user's module first: on a busy machine that alone can
            # outlast `timeout_s`, which is meant for the function's own call
            self._pool.apply_async(_ready).get(timeout=STARTUP_TIMEOUT_S)
        return self._pool

    def _score_with_function(self, samples: list[Sample]) -> list[RewardResult]:
        out = []
        for s in samples:
            pending = self._ensure_pool().apply_async(_call, (s.completion.text, _task_dict(s)))
            try:
                out.append(as_result(pending.get(timeout=self.timeout_s), self.name))
            except multiprocessing.TimeoutError:
                self._pool.terminate()  # the hung call dies with its worker
                self._pool = None
                out.append(RewardResult(0.0, f"user reward timed out after {self.timeout_s}s", self.name, ok=False))
            except Exception as exc:
                out.append(RewardResult(0.0, f"user reward raised {type(exc).__name__}: {exc}", self.name, ok=False))
        return out

    def _match(self, sample: Sample) -> RewardResult:
        """The row's `answer` against the response's final answer, as the `math` verifier does."""
        gold = sample.task.answer
        if gold is None:
            return RewardResult(0.0, "task has no answer and no reward function is set", self.name, ok=False)
        verdict = judge(gold, sample.completion.text, "auto", answer_form(sample), question_of(sample))
        return RewardResult(verdict.score, verdict.reason, self.name, verdict.details)

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        if self.function is None:
            return [self._match(s) for s in samples]
        return await asyncio.to_thread(self._score_with_function, samples)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None
