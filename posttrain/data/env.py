"""Your own tool environments (`type: env`): the interface, and the tasks they give.

An environment is a class named `package.module:Class` in the pipeline (docs/tasks.md, Your own
tool environment). Subclass `ToolEnv` (or write the same methods):

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

import json
import random
import threading
from typing import Any

from posttrain.config import EnvTasks
from posttrain.data.answers import read_answer
from posttrain.data.chat import format_call
from posttrain.data.imports import load_object
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
    return load_object(spec)(**args)


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


class EnvError(ValueError):
    """Your environment failed in the driver (while its tasks or gold episodes were built):
    one line naming the call and the error; `key` is the source's key at fault, if one is."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


def guarded(what: str, timeout_s: float, function, *args, **kwargs):
    """`function(*args)` in the driver, bounded: an exception or a call past `timeout_s` is an
    EnvError naming `what`. A hung call is left behind in a daemon thread (the command
    stops with the error, and a daemon thread does not hold the process)."""
    box: dict = {}

    def target():
        try:
            box["value"] = function(*args, **kwargs)
        except BaseException as exc:  # the user's code: whatever it raises is reported
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"env {what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise EnvError(f"{what} did not return within timeout_s={timeout_s:g}s")
    if "error" in box:
        exc = box["error"]
        text = str(exc).strip().splitlines()
        raise EnvError(f"{what} raised {type(exc).__name__}" + (f": {text[0]}" if text else ""))
    return box.get("value")


def env_tasks(source: EnvTasks) -> list[Task]:
    """The environment's tasks (verifier `env`): each entry carries what a worker needs to
    run its episodes (the class, its args, the tools, limits) and the gold episode if any."""
    name = source.env.rpartition(":")[2]
    try:
        cls = load_object(source.env)
    except (ImportError, AttributeError) as exc:
        raise EnvError(f"cannot load {source.env}: {exc}", key="env") from None
    try:
        env = guarded(f"{name}({_args(source.args)})", max(source.timeout_s, 60.0), cls, **source.args)
    except EnvError as exc:
        raise EnvError(str(exc), key="args" if "TypeError" in str(exc) else None) from None
    tools = check_tools(getattr(env, "tools", None))
    rows = guarded(f"{name}.tasks()", max(source.timeout_s, 60.0), env.tasks, source.seed, source.size, source.part)
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
        reference = answer
        if answer is not None and source.answer_format:
            try:
                answer = read_answer(answer, source.answer_format, row)
            except ValueError as exc:
                raise ValueError(f"{source.env}.tasks()[{i}]: answer: {exc}") from None
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
        if reference != answer:
            entry["reference"] = reference
        if row.get("gold"):
            calls = _gold_calls(row["gold"], f"{source.env}.tasks()[{i}]")
            entry["gold"] = gold_turns(env, task, calls, answer, source.timeout_s)
            entry["gold_calls"] = calls  # the gold check replays them and scores the final state
        out.append(task)
    random.Random(source.seed).shuffle(out)
    return out


def _args(args: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items())


def _gold_calls(gold, where: str) -> list[dict]:
    """A task's `gold`: a list of {name, arguments} calls."""
    if not isinstance(gold, list) or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("arguments", {}), dict)
        for c in gold
    ):
        raise ValueError(f"{where}: gold must be a list of {{name, arguments}} tool calls")
    try:
        json.dumps(gold)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: gold is not JSON ({exc})") from None
    return gold


def gold_episode(env, task: Task, calls: list[dict], timeout_s: float = 10.0) -> tuple[dict, list[str]]:
    """Run the gold calls in the driver: (the final state, the environment's replies). A
    reset or tool that raises or runs past `timeout_s` is an EnvError naming it and the task."""
    name = type(env).__name__
    where = f"gold episode of task {task.task_id!r}"
    state = guarded(f"{name}.reset ({where})", timeout_s, env.reset, episode_task(task))
    if not isinstance(state, dict):
        raise EnvError(f"{name}.reset ({where}) returned {type(state).__name__}, not a dict")
    replies = []
    for call in calls:
        arguments = call.get("arguments", {})
        what = f"tool {call['name']} ({where})"
        replies.append(step_reply(what, guarded(what, timeout_s, env.step, state, call["name"], arguments)))
    return state, replies


def step_reply(what: str, out) -> str:
    """The reply text of what `step` returned, by the rule the run's workers apply (a reply
    string, or (reply, done)): anything else would end every episode that calls the tool
    with `env_error`, and an SFT stage would train on its `str()`."""
    reply, done = out if isinstance(out, tuple) and len(out) == 2 else (out, False)
    if isinstance(reply, str) and isinstance(done, bool):
        return reply
    got = type(out).__name__ if reply is out else f"({type(reply).__name__}, {type(done).__name__})"
    raise EnvError(f"{what} returned {got}, not a reply string or (reply: str, done: bool)")


def gold_turns(env, task: Task, calls: list[dict], answer: str | None, timeout_s: float = 10.0) -> list[list[str]]:
    """The gold episode as [role, content] turns (for SFT): each call in the tools-v1 /
    Hermes syntax, the environment's real reply, then the final answer."""
    _, replies = gold_episode(env, task, calls, timeout_s)
    turns = []
    for call, reply in zip(calls, replies):
        turns.append(["assistant", format_call(call["name"], call.get("arguments", {}))])
        turns.append(["tool", reply])
    turns.append(["assistant", answer if answer is not None else "done"])
    return turns
