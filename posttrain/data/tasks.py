"""Task sources: configured generators and files -> Hugging Face `datasets`, -> `Task`s,
and a seeded sampler over them.

Every source becomes a `datasets.Dataset` with one row per task (columns in
`TASK_FEATURES`; the verifier's entry is a JSON string, since entries differ by family),
so tasks can be inspected, saved and shared like any dataset; `load_tasks` reads the
rows back as `Task`s. Each source type builds its tasks through the task-source table
(`data/registry.py`); the generated ones are in `data/families.py`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from posttrain.config import ChatJsonl
from posttrain.data.registry import build_tasks
from posttrain.types import Message, Task

TASK_COLUMNS = ("task_id", "family", "verifier", "messages", "answer", "entry")


def task_dataset(source):
    """The tasks of a configured source as a `datasets.Dataset`."""
    return tasks_to_dataset(build_tasks(source))


def load_tasks(source) -> list[Task]:
    """The tasks of a configured source, through its dataset."""
    return tasks_from_dataset(task_dataset(source))


def generate_tasks(source) -> list[Task]:
    """The same tasks as `load_tasks`, straight from their generator (no dataset round trip):
    for reading prompts of large sources."""
    return build_tasks(source)


def tasks_to_dataset(tasks: list[Task]):
    import datasets

    return datasets.Dataset.from_dict(
        {
            "task_id": [t.task_id for t in tasks],
            "family": [t.family for t in tasks],
            "verifier": [t.verifier for t in tasks],
            "messages": [[{"role": m.role, "content": m.content} for m in t.messages] for t in tasks],
            "answer": [t.answer for t in tasks],
            "entry": [json.dumps(t.entry) for t in tasks],
        },
        features=_features(),
    )


def _features():
    from datasets import Features, List, Value

    return Features(
        {
            "task_id": Value("string"),
            "family": Value("string"),
            "verifier": Value("string"),
            "messages": List({"role": Value("string"), "content": Value("string")}),
            "answer": Value("string"),
            "entry": Value("string"),
        }
    )


def tasks_from_dataset(dataset) -> list[Task]:
    """Rows with the `TASK_COLUMNS` -> `Task`s (a dataset saved by a user works too)."""
    missing = [c for c in TASK_COLUMNS if c not in dataset.column_names]
    if missing:
        raise ValueError(f"task dataset lacks columns {', '.join(missing)} (needs {', '.join(TASK_COLUMNS)})")
    return [
        Task(
            task_id=row["task_id"],
            family=row["family"],
            verifier=row["verifier"],
            answer=row["answer"],
            messages=tuple(Message(m["role"], m["content"]) for m in row["messages"]),
            entry=(entry := json.loads(row["entry"]) if row["entry"] else {}),
            answer_form=entry.get("answer_form") if isinstance(entry, dict) else None,
        )
        for row in dataset
    ]


def load_chat_jsonl(source: ChatJsonl) -> list[tuple[Message, ...]]:
    """Conversations from a JSONL file, read by the user files' row reader; a bad line is an
    error naming the line."""
    from posttrain.data.user import task_file_rows

    out = []
    path = Path(source.path)
    for number, row in task_file_rows(path):
        try:
            if isinstance(row, Exception):
                raise row
            messages = tuple(Message(m["role"], m["content"]) for m in row["messages"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f'{path}:{number}: not a {{"messages": [{{"role", "content"}}]}} row ({exc})') from None
        if not messages or messages[-1].role != "assistant":
            raise ValueError(f"{path}:{number}: the last message must be the assistant's")
        out.append(messages)
    if not out:
        raise ValueError(f"{path}: no conversations")
    return out


SAMPLE = 16  # tasks of a source whose gold is checked (`rewards/gold.py`)


def sampled(tasks: list[Task], count: int = SAMPLE) -> list[Task]:
    """Up to `count` tasks, the same ones every time (a seeded sample)."""
    return list(tasks) if len(tasks) <= count else random.Random(0).sample(list(tasks), count)


class TaskSampler:
    """Draws tasks in a seeded order, epoch after epoch; `position` is the resume point."""

    def __init__(self, tasks: list[Task], seed: int, position: int = 0):
        if not tasks:
            raise ValueError("no tasks to sample from")
        self.tasks, self.seed, self.position = tasks, seed, position

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.tasks)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def draw(self, count: int) -> list[Task]:
        out = []
        for _ in range(count):
            epoch, offset = divmod(self.position, len(self.tasks))
            out.append(self.tasks[self._order(epoch)[offset]])
            self.position += 1
        return out
