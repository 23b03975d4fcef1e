"""Task sources: configured generators and files -> Hugging Face `datasets`, -> `Task`s,
and a seeded sampler over them.

Every source becomes a `datasets.Dataset` with one row per task (columns in
`TASK_FEATURES`; the verifier's entry is a JSON string, since entries differ by family),
so tasks can be inspected, saved and shared like any dataset; `load_tasks` reads the
rows back as `Task`s. reasoning-gym families are generated with their own generators
and keep their entry (question, answer, metadata), which the verifier hands back to
reasoning-gym's scoring.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from posttrain.config import ArithmeticTasks, ChatJsonl, ReasoningGymTasks
from posttrain.types import Message, Task, infer_answer_form

TASK_COLUMNS = ("task_id", "family", "verifier", "messages", "answer", "entry")


def task_dataset(source):
    """The tasks of a configured source as a `datasets.Dataset`."""
    return tasks_to_dataset(_generate(source))


def load_tasks(source) -> list[Task]:
    """The tasks of a configured source, through its dataset."""
    return tasks_from_dataset(task_dataset(source))


def generate_tasks(source) -> list[Task]:
    """The same tasks as `load_tasks`, straight from their generator (no dataset round trip):
    for reading prompts of large sources."""
    return _generate(source)


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


def _generate(source) -> list[Task]:
    from posttrain.data.registry import build_tasks

    return build_tasks(source)


def _family_sizes(source: ReasoningGymTasks) -> list[int]:
    total = sum(f.weight for f in source.families)
    sizes = [int(source.size * f.weight / total) for f in source.families]
    sizes[0] += source.size - sum(sizes)
    return sizes


# reasoning-gym families whose answers have a form their questions ask for (the others:
# `infer_answer_form` reads the question)
FAMILY_ANSWER_FORMS = {
    "polynomial_multiplication": "expanded",
    "fraction_simplification": "fraction",
    "decimal_arithmetic": "decimal",
    "decimal_chain_sum": "decimal",
}


def family_answer_form(family: str, question: str) -> str | None:
    """The form a reasoning-gym task's answer must take: its family's, else the question's wording."""
    return FAMILY_ANSWER_FORMS.get(family) or infer_answer_form(question)


def reasoning_gym_tasks(source: ReasoningGymTasks) -> list[Task]:
    import reasoning_gym

    tasks: list[Task] = []
    for index, (family, size) in enumerate(zip(source.families, _family_sizes(source))):
        if size <= 0:
            continue
        for i, entry in enumerate(_family_part(reasoning_gym, family, size, source.seed + 1000 * index, source.part)):
            system = (Message("system", source.system_prompt),) if source.system_prompt else ()
            user = Message("user", entry["question"] + source.prompt_suffix)
            form = family_answer_form(family.name, entry["question"])
            entry = {**entry, "answer_form": form} if form else entry
            tasks.append(
                Task(
                    task_id=f"{family.name}/{source.seed}/{i}",
                    family=family.name,
                    messages=system + (user,),
                    answer=str(entry["answer"]),
                    entry=_jsonable(entry),
                    answer_form=form,
                )
            )
    random.Random(source.seed).shuffle(tasks)
    return tasks


def arithmetic_tasks(source: ArithmeticTasks) -> list[Task]:
    """Chains of single-digit additions of the source's part, with their scratchpads (verifier `math`)."""
    from posttrain.data.reasoning import chain_entry, chain_problems, chain_prompt

    system = (Message("system", source.system_prompt),) if source.system_prompt else ()
    tasks = []
    for i, terms in enumerate(chain_problems(source.size, source.seed, source.part, *source.terms)):
        entry = chain_entry(terms)
        tasks.append(
            Task(
                task_id=f"arithmetic/{source.part}/{source.seed}/{i}",
                family="chain_sum",
                messages=system + (Message("user", chain_prompt(terms, source.instruction)),),
                answer=entry["answer"],
                entry=entry,
                verifier="math",
            )
        )
    return tasks


def _family_part(reasoning_gym, family, size: int, seed: int, part: str) -> list[dict]:
    """`size` items of one family from the part of its problem space the source asks for:
    generate, keep those whose question hashes into the part, generate more if short."""
    from posttrain.data.reasoning import EVAL_SHARE, in_eval_part, keep

    want = size if part == "all" else (size * (EVAL_SHARE + 1) if part == "eval" else size + size // 4) + 16
    while True:
        try:
            dataset = reasoning_gym.create_dataset(family.name, size=want, seed=seed, **family.params)
        except (TypeError, ValueError, KeyError, AssertionError) as exc:
            raise ValueError(f"reasoning-gym family {family.name!r}: {exc}") from None
        items = [e for e in dataset if keep(part, in_eval_part(str(e["question"])))]
        if len(items) >= size or want >= 64 * size + 1024:
            if not items:
                raise ValueError(f"reasoning-gym family {family.name!r}: no question falls in the {part} part")
            return (items * (size // len(items) + 1))[:size]
        want *= 2


def _jsonable(entry: dict) -> dict:
    """Entries go through Ray and into saved rollouts: keep them JSON-clean."""
    return json.loads(json.dumps(entry, default=repr))


def load_chat_jsonl(source: ChatJsonl) -> list[tuple[Message, ...]]:
    """Conversations from a JSONL file, read by the user files' row reader; a bad line is an
    error naming the line."""
    from posttrain.data.user import _rows

    out = []
    path = Path(source.path)
    for number, row in _rows(path):
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
