"""The interface every reward source implements, rule or model:

    async def score(samples) -> list[RewardResult]

A source that raises on one sample must not lose the batch: `score_safely` turns the
exception into a flagged result (ok=False) with the error as its reason.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from posttrain.types import RewardResult, Sample

RAISED = {"fault": "reward_raised"}  # the source itself failed: a fault the step counts (records/faults.py)


class RewardSource(Protocol):
    name: str

    async def score(self, samples: list[Sample]) -> list[RewardResult]: ...


async def score_safely(source: RewardSource, samples: list[Sample]) -> list[RewardResult]:
    try:
        results = await source.score(samples)
    except Exception as exc:  # a verifier bug flags the batch's samples; the run goes on
        reason = f"reward source {source.name} raised {type(exc).__name__}: {exc}"
        return [RewardResult(0.0, reason, source.name, dict(RAISED), ok=False) for _ in samples]
    if len(results) != len(samples):
        return [
            RewardResult(
                0.0,
                f"reward source {source.name} returned {len(results)} results for {len(samples)} samples",
                source.name,
                dict(RAISED),
                ok=False,
            )
            for _ in samples
        ]
    return results


def score_sync(source: RewardSource, samples: list[Sample]) -> list[RewardResult]:
    return asyncio.run(score_safely(source, samples))
