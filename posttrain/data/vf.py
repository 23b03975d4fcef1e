"""Tasksets of the `verifiers` library (v0.4, `pip install 'posttrain[verifiers]'`) as a
task source (`type: verifiers`): each task's prompt (and system prompt) becomes the
messages, its `answer` field (if it has one) the reference, and its data rides in the entry
so that a worker can rebuild the task and run its `@vf.reward` functions
(`rewards/vf.py`). Tasks that need a container or tool servers (multi-turn harnesses) are
refused: posttrain runs single-turn verifiers tasks.
"""

from __future__ import annotations

import itertools

from posttrain.config import VerifiersTasks
from posttrain.types import Message, Task


def load_taskset(taskset_id: str, args: dict):
    """The taskset `taskset_id` built with its own config class from `args`."""
    try:
        import verifiers.v1 as vf
        from verifiers.v1.utils.generic import concrete_type
        from verifiers.v1.utils.loaders import taskset_class
    except ImportError as exc:
        raise ImportError(
            f"the verifiers library is not installed ({exc}): pip install 'posttrain[verifiers]'"
        ) from None
    cls = taskset_class(taskset_id)
    config_cls = concrete_type(cls, vf.TasksetConfig) or vf.TasksetConfig
    return cls(config_cls(id=taskset_id, **args))


def _messages(data) -> tuple[Message, ...]:
    from verifiers.v1.types import content_text

    system = (Message("system", data.system_prompt),) if data.system_prompt else ()
    if isinstance(data.prompt, str):
        return system + (Message("user", data.prompt),)
    turns = tuple(Message(m.role, content_text(m.content)) for m in data.prompt or [])
    if not turns:
        raise ValueError("a task without a prompt (the user opens the conversation) cannot be sampled")
    return system + turns


def verifiers_tasks(source: VerifiersTasks) -> list[Task]:
    taskset = load_taskset(source.taskset, source.args)
    task_cls = type(taskset).task_type()
    if task_cls.NEEDS_CONTAINER or type(taskset).toolsets(taskset.config) or task_cls.toolsets(taskset.config.task):
        raise ValueError(
            f"taskset {source.taskset}: its tasks need a container or tool servers (a multi-turn harness); "
            "posttrain runs single-turn verifiers tasks (use `type: env` for your own tools)"
        )
    out = []
    for i, vt in enumerate(itertools.islice(taskset, source.size)):
        answer = getattr(vt.data, "answer", None)
        out.append(
            Task(
                task_id=str(vt.data.id or f"{source.taskset}/{vt.data.idx if vt.data.idx is not None else i}"),
                family=source.taskset,
                messages=_messages(vt.data),
                answer=answer if isinstance(answer, str) else None,
                entry={
                    "taskset": source.taskset,
                    "args": source.args,
                    "data": vt.data.model_dump(mode="json"),
                    "timeout_s": source.timeout_s,
                    "workers": source.workers,
                },
                verifier="verifiers",
            )
        )
    if not out:
        raise ValueError(f"taskset {source.taskset} gave no tasks")
    return out
