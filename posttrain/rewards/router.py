"""Routes each sample to the reward source its task names (`Task.verifier`), scores each
source's share concurrently, and puts the results back in the samples' order.
`reward_router` builds the router of a stage from its config (task sources and `reward`)."""

from __future__ import annotations

import asyncio

from posttrain.rewards.base import RewardSource, score_safely
from posttrain.rewards.registry import get_verifier, stage_sources
from posttrain.types import RewardResult, Sample


class RewardRouter:
    name = "router"

    def __init__(self, sources: dict[str, RewardSource]):
        self.sources = sources

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        by_source: dict[str, list[int]] = {}
        for i, s in enumerate(samples):
            by_source.setdefault(s.task.verifier, []).append(i)
        results: list[RewardResult | None] = [None] * len(samples)
        names = list(by_source)
        scored = await asyncio.gather(*(self._score(name, [samples[i] for i in by_source[name]]) for name in names))
        for name, batch in zip(names, scored):
            for i, result in zip(by_source[name], batch):
                results[i] = result
        return results  # type: ignore[return-value]

    async def _score(self, name: str, samples: list[Sample]) -> list[RewardResult]:
        source = self.sources.get(name)
        if source is None:
            hint = entry.missing if (entry := get_verifier(name)) is not None else ""
            return [
                RewardResult(0.0, f"unscored: no reward source {name!r} configured{hint}", name, ok=False)
                for _ in samples
            ]
        return await score_safely(source, samples)

    def start(self) -> None:
        """Start what takes time to load (a judge engine) while rollouts begin."""
        for source in self.sources.values():
            if hasattr(source, "start"):
                source.start()

    def close(self) -> None:
        """Stop what the sources started (judge actors, sandbox pools)."""
        for source in self.sources.values():
            if hasattr(source, "close"):
                source.close()


def reward_router(stage, judge=None) -> RewardRouter:
    """The router of a stage: a reward source per verifier its tasks need, as the verifier
    table builds them (`rewards/registry.py`). `judge`: the slot's `JudgeSlot`, whose judge
    engine outlives the stage."""
    return RewardRouter(stage_sources(stage, judge))
