"""The generated task sources: reasoning-gym families, each with its own generator, and the
arithmetic chains. A reasoning-gym task keeps its family's entry (question, answer,
metadata), which the verifier hands back to reasoning-gym's scoring, and the form its
answer must take.
"""

from __future__ import annotations

import json
import random

from posttrain.config import ArithmeticTasks, ReasoningGymTasks
from posttrain.types import Message, Task, infer_answer_form


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
