"""Reward of `verifiers` tasks: in a worker process, the task is rebuilt from its data, a
trace holds the prompt and the response (one sampled assistant turn), and the task's own
`score` runs its `@vf.reward` functions; the reward is their weighted sum (`trace.reward`),
the reason each one's score. A reward function that raises or runs past `timeout_s` scores
the sample 0 with the reason (its worker replaced); one that leaves no score, or a taskset
that cannot be built, leaves the sample unscored. Rewards that need a runtime (a container) are skipped
by verifiers itself, with the rest scored."""

from __future__ import annotations

import asyncio
import json

from posttrain.rewards.user import failed_call
from posttrain.rollout.env_workers import EnvWorkers
from posttrain.types import RewardResult, Sample

_TASKSET = None


def _init(taskset_id: str, args_json: str) -> None:
    global _TASKSET
    from posttrain.data.vf import load_taskset

    _TASKSET = load_taskset(taskset_id, json.loads(args_json))


def _score(data: dict, messages: list[dict], response: str) -> dict:
    import verifiers.v1 as vf
    from verifiers.v1 import types as vt
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import Trace, TraceTask

    task_cls = type(_TASKSET).task_type()
    task = task_cls(task_cls.data_type().model_validate(data), _TASKSET.config.task)
    kinds = {"system": vt.SystemMessage, "user": vt.UserMessage, "assistant": vt.AssistantMessage}
    nodes = [
        MessageNode(parent=i - 1 if i else None, message=kinds[m["role"]](content=m["content"]))
        for i, m in enumerate(messages)
    ]
    nodes.append(MessageNode(parent=len(nodes) - 1, message=vt.AssistantMessage(content=response), sampled=True))
    trace = Trace(
        task=TraceTask(type=task_cls.__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig(), name="posttrain", trainable=True),
        nodes=nodes,
    )
    asyncio.run(task.score(trace))
    scores = {name: None if r is None else [r.score, r.weight] for name, r in trace.rewards.items()}
    return {"reward": trace.reward, "scores": scores}


class VerifiersReward:
    name = "verifiers"

    def __init__(self, leaves: list):
        self.leaves = leaves
        self._pools: dict[tuple, EnvWorkers] = {}

    def _pool(self, entry: dict) -> EnvWorkers:
        key = (entry["taskset"], json.dumps(entry["args"], sort_keys=True))
        if key not in self._pools:
            self._pools[key] = EnvWorkers(entry["taskset"], entry["args"], entry.get("workers", 1), init=_init)
        return self._pools[key]

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        return await asyncio.to_thread(self._score, samples)

    def _score(self, samples: list[Sample]) -> list[RewardResult]:
        out: list[RewardResult | None] = [None] * len(samples)
        by_taskset: dict[tuple, list[int]] = {}
        for i, s in enumerate(samples):
            by_taskset.setdefault((s.task.entry["taskset"], json.dumps(s.task.entry["args"])), []).append(i)
        for indices in by_taskset.values():
            entry = samples[indices[0]].task.entry
            jobs = [
                (
                    samples[i].task.entry["data"],
                    [{"role": m.role, "content": m.content} for m in samples[i].task.messages],
                    samples[i].completion.text,
                )
                for i in indices
            ]
            for i, (ok, value) in zip(indices, self._pool(entry).run(_score, jobs, entry["timeout_s"])):
                out[i] = as_result(ok, value)
        return out  # type: ignore[return-value]

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()


def as_result(ok: bool, value) -> RewardResult:
    if not ok:
        return failed_call(value, "verifiers reward", "verifiers")
    unscored = [name for name, r in value["scores"].items() if r is None]
    if unscored or not value["scores"]:
        reason = f"verifiers left {', '.join(unscored) or 'every reward'} unscored"
        return RewardResult(0.0, reason, "verifiers", {"scores": value["scores"]}, ok=False)
    parts = [
        f"{name}={score:g}" + (f" (x{weight:g})" if weight != 1 else "")
        for name, (score, weight) in value["scores"].items()
    ]
    return RewardResult(float(value["reward"]), ", ".join(parts), "verifiers", {"scores": value["scores"]})
