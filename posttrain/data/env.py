"""Your own tool environments (`type: env`): the interface, and the tasks they give.

An environment is a class named `package.module:Class` in the pipeline (README, Your own
tool environments). Subclass `ToolEnv` (or write the same methods):

    class KVStore(ToolEnv):
        tools = [{"type": "function", "function": {"name": "kv_set", "description": "...",
                  "parameters": {"type": "object", "properties": {"key": {...}, "value": {...}}}}}]

        def tasks(self, seed, size, part):   # -> [{"prompt": str} | {"messages": [...]}, "id"?,
            ...                              #     "answer"?, "data"? (any JSON), "gold"? (calls)]
        def reset(self, task):               # -> the episode's state: a JSON object
            ...
        def step(self, state, name, arguments):   # run one tool call on `state` (change it in
            ...                                   # place); -> reply text, or (reply, done)
        def reward(self, state, task, final):     # -> float, (float, reason) or {score, reason}
            ...

The state is plain JSON, kept in the partial-rollout queue and in checkpoints, so an
episode goes on across iterations and resumes; `step` must depend only on (state, call).
The environment runs in worker processes (`rollout/env_workers.py`): a call that raises, runs past
`timeout_s` or returns something else ends its episode, flagged, and the run goes on.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import sys
from typing import Any

from posttrain.config import EnvTasks
from posttrain.data.chat import format_call
from posttrain.data.tools import check_tools
from posttrain.types import Message, Task


class ToolEnv:
    """The interface of an environment; subclasses set `tools` and override the methods."""

    tools: list[dict] = []

    def tasks(self, seed: int, size: int, part: str) -> list[dict]:
        raise NotImplementedError("an environment gives its tasks: tasks(seed, size, part) -> [dict]")

    def reset(self, task: dict) -> dict:
        return {}

    def step(self, state: dict, name: str, arguments: dict) -> str | tuple[str, bool]:
        raise NotImplementedError("an environment runs tool calls: step(state, name, arguments) -> str")

    def reward(self, state: dict, task: dict, final: str | None) -> float | tuple[float, str] | dict:
        raise NotImplementedError("an environment scores episodes: reward(state, task, final) -> float")


def load_env(spec: str, args: dict[str, Any]):
    """An instance of `package.module:Class` with `args`; modules are found on the path and in
    the directory the command runs from (as `python -m` would)."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    module, _, name = spec.partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cls(**args)


def episode_task(task: Task) -> dict:
    """What reset and reward see of a task: its id, prompt messages, answer and data."""
    return {
        "id": task.task_id,
        "messages": [{"role": m.role, "content": m.content} for m in task.messages],
        "answer": task.answer,
        "data": task.entry.get("data"),
    }


def _messages(row: dict, system_prompt: str | None) -> tuple[Message, ...]:
    if isinstance(row.get("messages"), list) and row["messages"]:
        return tuple(Message(m["role"], m["content"]) for m in row["messages"])
    if isinstance(row.get("prompt"), str) and row["prompt"].strip():
        system = (Message("system", system_prompt),) if system_prompt else ()
        return system + (Message("user", row["prompt"]),)
    raise ValueError("a task needs a non-empty `prompt` or a `messages` list")


def env_tasks(source: EnvTasks) -> list[Task]:
    """The environment's tasks (verifier `env`): each entry carries what a worker needs to
    run its episodes (the class, its args, the tools, limits) and the gold episode if any."""
    env = load_env(source.env, source.args)
    tools = check_tools(getattr(env, "tools", None))
    rows = env.tasks(source.seed, source.size, source.part)
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{source.env}.tasks() gave no tasks (a non-empty list of dicts is needed)")
    out = []
    for i, row in enumerate(rows[: source.size]):
        if not isinstance(row, dict):
            raise ValueError(f"{source.env}.tasks()[{i}] is a {type(row).__name__}, not a dict")
        try:
            messages = _messages(row, source.system_prompt)
            json.dumps(row.get("data"))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{source.env}.tasks()[{i}]: {exc}") from None
        answer = None if row.get("answer") is None else str(row["answer"])
        entry = {
            "env": source.env,
            "args": source.args,
            "tools": tools,
            "data": row.get("data"),
            "max_turns": source.max_turns,
            "timeout_s": source.timeout_s,
            "workers": source.workers,
            "score": source.verifier,
        }
        task = Task(
            task_id=str(row.get("id", f"{source.env}/{source.seed}/{i}")),
            family=source.env.rpartition(":")[2],
            messages=messages,
            answer=answer,
            entry=entry,
            verifier="env",
        )
        if row.get("gold"):
            entry["gold"] = gold_turns(env, task, row["gold"], answer)
        out.append(task)
    random.Random(source.seed).shuffle(out)
    return out


def gold_turns(env, task: Task, calls: list[dict], answer: str | None) -> list[list[str]]:
    """The gold episode as [role, content] turns (for SFT): each call in the tools-v1 /
    Hermes syntax, the environment's real reply, then the final answer."""
    state = env.reset(episode_task(task))
    turns = []
    for call in calls:
        turns.append(["assistant", format_call(call["name"], call.get("arguments", {}))])
        reply = env.step(state, call["name"], call.get("arguments", {}))
        turns.append(["tool", reply[0] if isinstance(reply, tuple) else str(reply)])
    turns.append(["assistant", answer if answer is not None else "done"])
    return turns
