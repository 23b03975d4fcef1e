"""The partial-rollout queue (docs/recipe.md, Partial rollout; Kimi k1.5).

It lives in the driver, outside the engines, so it survives an engine restart, and it is
plain data, so it is saved with every checkpoint. Units are trajectories (one sampled
response each); a group is the G trajectories of one prompt, trained together once all
of them have finished.

Accounting invariant, checked every step: drawn = trained + queued + dropped, where
`queued` counts every trajectory of every group not yet trained or dropped (unfinished
ones waiting to continue, and finished ones waiting for their group).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field

from posttrain.types import Message, Task


@dataclass
class Trajectory:
    """One sampled response, grown over iterations. In a multi-turn (agent) episode the
    response also holds the environment's tool messages: `action_mask` is 1 on the
    model's own tokens and 0 on those, and `max_tokens` limits the model's tokens."""

    traj_id: str
    group_id: str
    prompt_ids: tuple[int, ...]
    max_tokens: int
    response_ids: list[int] = field(default_factory=list)
    logp_behaviour: list[float] = field(default_factory=list)
    token_versions: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # None while unfinished
    env: dict | None = None  # environment state of an agent episode (JSON)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def model_tokens(self) -> int:
        return sum(self.action_mask)

    def last_turn(self) -> list[int]:
        """The model's tokens since the last environment message."""
        start = len(self.action_mask)
        while start > 0 and self.action_mask[start - 1]:
            start -= 1
        return self.response_ids[start:]

    def oldest_version(self, default: int) -> int:
        return min((v for v, m in zip(self.token_versions, self.action_mask) if m), default=default)

    def extend(self, token_ids, logprobs, version: int, finish_reason: str | None) -> None:
        self.response_ids += list(token_ids)
        self.logp_behaviour += list(logprobs)
        self.token_versions += [version] * len(token_ids)
        self.action_mask += [1] * len(token_ids)
        if finish_reason is not None or self.model_tokens >= self.max_tokens:
            self.finish_reason = finish_reason or "length"

    def add_observation(self, token_ids, version: int) -> None:
        """Tokens the environment wrote (a tool message): in the context, not in the loss."""
        self.response_ids += list(token_ids)
        self.logp_behaviour += [0.0] * len(token_ids)
        self.token_versions += [version] * len(token_ids)
        self.action_mask += [0] * len(token_ids)
        self.finish_reason = None


@dataclass
class Group:
    group_id: str
    task: Task
    budget: int | None
    trajectories: list[Trajectory]

    @property
    def complete(self) -> bool:
        return all(t.finished for t in self.trajectories)


class AccountingError(RuntimeError):
    """drawn != trained + queued + dropped: a sample was lost or counted twice."""


class PartialRolloutQueue:
    def __init__(self, max_staleness: int):
        self.max_staleness = max_staleness
        self.groups: dict[str, Group] = {}
        self.drawn = 0
        self.trained = 0
        self.dropped: Counter[str] = Counter()
        self._next_group = 0

    # ------------------------------------------------------------ filling an iteration

    def add_group(
        self, task: Task, prompt_ids: tuple[int, ...], size: int, max_tokens: int, budget: int | None, version: int
    ) -> list[Trajectory]:
        gid = f"g{self._next_group}"
        self._next_group += 1
        trajs = [Trajectory(f"{gid}.{i}", gid, tuple(prompt_ids), max_tokens) for i in range(size)]
        self.groups[gid] = Group(gid, task, budget, trajs)
        self.drawn += size
        return trajs

    def reject(self, size: int, reason: str) -> None:
        """A group drawn but never started (e.g. its prompt does not fit): counted as dropped."""
        self.drawn += size
        self.dropped[reason] += size

    def unfinished(self, version: int, limit: int) -> list[Trajectory]:
        """Unfinished trajectories, oldest group first, up to `limit`. Groups holding a
        trajectory older than max_staleness are dropped first (counted, never silent)."""
        self.drop_stale(version)
        out: list[Trajectory] = []
        for group in self.groups.values():  # dicts keep insertion order: oldest first
            for traj in group.trajectories:
                if not traj.finished and len(out) < limit:
                    out.append(traj)
        return out

    def drop_stale(self, version: int) -> int:
        stale = [
            g
            for g in self.groups.values()
            if any(version - t.oldest_version(version) > self.max_staleness for t in g.trajectories)
        ]
        for group in stale:
            self.drop(group.group_id, "stale")
        return len(stale)

    def drop(self, group_id: str, reason: str, count: int | None = None) -> None:
        group = self.groups.pop(group_id)
        self.dropped[reason] += len(group.trajectories) if count is None else count

    # ------------------------------------------------------------ taking finished groups

    def pop_complete(self, version: int) -> list[Group]:
        """Groups whose every trajectory has finished, removed from the queue (oldest first)."""
        self.drop_stale(version)
        ready = [g for g in self.groups.values() if g.complete]
        for group in ready:
            del self.groups[group.group_id]
        return ready

    def mark_trained(self, count: int) -> None:
        self.trained += count

    # ------------------------------------------------------------ accounting and state

    @property
    def queued(self) -> int:
        return sum(len(g.trajectories) for g in self.groups.values())

    def check(self, in_flight: int = 0) -> dict[str, float]:
        """Assert the invariant; `in_flight` counts trajectories popped but not yet trained
        or dropped (between pop_complete and mark_trained)."""
        dropped = sum(self.dropped.values())
        if self.drawn != self.trained + self.queued + dropped + in_flight:
            raise AccountingError(
                f"drawn {self.drawn} != trained {self.trained} + queued {self.queued} + "
                f"dropped {dropped} + in flight {in_flight}"
            )
        return {
            "samples/drawn": float(self.drawn),
            "samples/trained": float(self.trained),
            "samples/queued": float(self.queued),
            "samples/dropped": float(dropped),
            **{f"samples/dropped/{k}": float(v) for k, v in self.dropped.items()},
        }

    def task_of(self, traj: Trajectory) -> Task:
        return self.groups[traj.group_id].task

    def to_json(self) -> str:
        return json.dumps(
            {
                "max_staleness": self.max_staleness,
                "drawn": self.drawn,
                "trained": self.trained,
                "dropped": dict(self.dropped),
                "next_group": self._next_group,
                "groups": [{**asdict(g), "task": _task_dict(g.task)} for g in self.groups.values()],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> PartialRolloutQueue:
        data = json.loads(text)
        queue = cls(data["max_staleness"])
        queue.drawn, queue.trained, queue._next_group = data["drawn"], data["trained"], data["next_group"]
        queue.dropped = Counter(data["dropped"])
        for g in data["groups"]:
            trajs = [
                Trajectory(**{"action_mask": [1] * len(t["response_ids"]), **t, "prompt_ids": tuple(t["prompt_ids"])})
                for t in g["trajectories"]
            ]
            queue.groups[g["group_id"]] = Group(g["group_id"], _task_from(g["task"]), g["budget"], trajs)
        return queue


def _task_dict(task: Task) -> dict:
    return {
        "task_id": task.task_id,
        "family": task.family,
        "answer": task.answer,
        "entry": task.entry,
        "verifier": task.verifier,
        "messages": [{"role": m.role, "content": m.content} for m in task.messages],
    }


def _task_from(data: dict) -> Task:
    return Task(
        task_id=data["task_id"],
        family=data["family"],
        answer=data["answer"],
        entry=data["entry"],
        verifier=data.get("verifier", "reasoning_gym"),
        messages=tuple(Message(m["role"], m["content"]) for m in data["messages"]),
    )
