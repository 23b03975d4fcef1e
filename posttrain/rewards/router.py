"""Routes each sample to the reward source its task names (`Task.verifier`), scores each
source's share concurrently, and puts the results back in the samples' order.
`reward_router` builds the router of a stage from its config (task sources and `reward`)."""

from __future__ import annotations

import asyncio

from posttrain.config import CodingTasks, EnvTasks, JudgementTasks, UserTasks, VerifiersTasks
from posttrain.rewards.agent_verifier import AgentVerifier
from posttrain.rewards.base import RewardSource, score_safely
from posttrain.rewards.math_verifier import MathVerifier
from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
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
            hint = "; open-ended tasks are scored by the generative reward model" if name == "grm" else ""
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
    """`judge`: the slot's `JudgeSlot`, whose judge engine outlives the stage."""
    limit = stage.reward.answer_timeout_s
    sources = {
        "reasoning_gym": ReasoningGymVerifier(stage.reward.answer_format, limit),
        "math": MathVerifier(stage.reward.answer_format, limit),
        "agent": AgentVerifier(limit),
    }
    leaves = [leaf for _, leaf in stage.task_leaves()]
    coding = [leaf for leaf in leaves if isinstance(leaf, CodingTasks) or getattr(leaf, "verifier", None) == "code"]
    if coding:
        from posttrain.rewards.code import CodeVerifier

        sources["code"] = CodeVerifier(max(c.workers for c in coding))  # each task carries its own timeout_s
    user = [leaf for leaf in leaves if isinstance(leaf, UserTasks) or getattr(leaf, "verifier", None) == "user"]
    if len({u.reward for u in user}) > 1:
        raise ValueError(f"stage {stage.name}: user task sources with different reward functions")
    if user:
        from posttrain.rewards.user import UserReward

        sources["user"] = UserReward(user[0].reward, user[0].reward_timeout_s, answer_timeout_s=limit)
    sources.update(own_sources(leaves))
    if any(isinstance(leaf, JudgementTasks) for leaf in leaves):
        from posttrain.rewards.judgement import JudgementVerifier

        reason_chars = stage.reward.grm.reason_chars if stage.reward.grm is not None else 80
        sources["judgement"] = JudgementVerifier(reason_chars, limit)
    if stage.reward.grm is not None:
        from posttrain.rewards.grm import GRM

        sources["grm"] = GRM(stage.reward.grm, shared=judge)
    return RewardRouter(sources)


def own_sources(leaves: list) -> dict[str, RewardSource]:
    """The reward sources of the user's own environments: `env` (each environment's
    reward, run in its workers) and `verifiers` (a verifiers environment's rubric)."""
    sources: dict[str, RewardSource] = {}
    if any(isinstance(leaf, EnvTasks) for leaf in leaves):
        from posttrain.rewards.env_reward import EnvReward

        sources["env"] = EnvReward()
    vf = [leaf for leaf in leaves if isinstance(leaf, VerifiersTasks)]
    if vf:
        from posttrain.rewards.vf import VerifiersReward

        sources["verifiers"] = VerifiersReward(vf)
    return sources
