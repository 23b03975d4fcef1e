"""The judge's code tool, run: each answer's code on the example calls its task states
(`data/judge_tools.examples`), in the sandbox, for the tool lines of the GRM's prompts.

An answer's program (its last fenced block, else its text: `rewards/code.py`) is the
candidate, and the harness calls its function through the sandbox's proxy, as the code
verifier does. Each example is one test that ends by raising an AssertionError whose
message starts with a nonce drawn for this run, then the repr of the value the call
returned. The nonce lives only on the harness's side, so an answer cannot raise a message
that reads as a value; whatever it raises instead is shown by its exception's name.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import hashlib
import secrets
import threading
from collections import OrderedDict

from posttrain.data.judge_tools import Example, Run, examples
from posttrain.rewards.code import extract_code
from posttrain.rewards.sandbox import Limits, SandboxPool, Slot, run_function

CACHE_SIZE = 4096  # (task, answer) runs kept
TIMEOUT_S = 5.0  # one answer's examples together
NOT_RUN = Run(error="did not run")


def _test(example: Example, nonce: str) -> str:
    return f"raise AssertionError({nonce!r} + repr({example.call}))"


_START = ("def ", "class ", "import ", "from ", "@")


def program_of(answer: str) -> str:
    """An answer's program: its last fenced block (`rewards/code.py`), else, where its text is
    not Python as a whole, the lines from its first `def`/`class`/`import` line to the last
    line that still leaves valid Python (prose around unfenced code)."""
    code = extract_code(answer)
    if _parses(code):
        return code
    lines = code.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith(_START)), None)
    if first is None:
        return code
    for last in range(len(lines), first, -1):
        candidate = "\n".join(lines[first:last])
        if _parses(candidate):
            return candidate
    return code


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def run_answer(program: str, stated: list[Example], slot: Slot, timeout_s: float = TIMEOUT_S) -> list[Run]:
    """One answer's program on each example, in the sandbox on `slot`."""
    nonce = f"posttrain-value-{secrets.token_hex(8)}:"
    harness = {
        "kind": "tests",
        "entry_point": stated[0].function,
        "timeout_s": timeout_s,
        "tests": [_test(e, nonce) for e in stated],
    }
    limits = Limits(wall_seconds=timeout_s, cpu_seconds=max(1, int(timeout_s)))
    run = run_function(program, harness, limits, slot)
    report = run.report or {}
    tests = report.get("tests") or []
    out = []
    for i in range(len(stated)):
        error = tests[i]["error"] if i < len(tests) else None
        head = f"AssertionError: {nonce}"
        if error and error.startswith(head):
            out.append(Run(value=error[len(head) :]))
        else:
            out.append(Run(error=what_failed(error)))
    return out


def _builtin(name: str) -> str:
    """An exception's name where it is Python's own; an answer's own class (whatever it is
    called) is never shown."""
    kind = getattr(builtins, name, None) if name.isidentifier() else None
    if isinstance(kind, type) and issubclass(kind, BaseException):
        return name
    return "an exception of its own"


def what_failed(error: str | None) -> str:
    """The harness's error for a test, as a tool line's words."""
    if not error or error.startswith("not run"):
        return NOT_RUN.error
    head, _, rest = error.partition(": ")
    if head == "CandidateGone":
        return "runs out of time" if "time limit" in rest else "stops before returning"
    if head == "CandidateFailed":
        if rest.startswith("the program defines no function"):
            return "defines no such function"
        if rest.startswith("the program failed at import: "):
            return f"does not load ({_builtin(rest.split(': ', 2)[1])})"
        if rest.startswith("the candidate raised "):
            return f"raises {_builtin(rest[len('the candidate raised ') :].split(':', 1)[0])}"
        return "fails"
    return f"raises {_builtin(head)}"


class CodeTool:
    """The runs of answers on their tasks' examples, with a bounded cache; the sandbox
    pool (one slot) starts at the first task that states examples."""

    def __init__(self, timeout_s: float = TIMEOUT_S, cache_size: int = CACHE_SIZE):
        self.timeout_s = timeout_s
        self.cache_size = cache_size
        self._cache: OrderedDict[str, list[Run]] = OrderedDict()
        self._pool: SandboxPool | None = None
        self._lock = threading.Lock()

    def runs(self, task: str, answers: list[str]) -> list[list[Run] | None]:
        """Per answer, its runs on `task`'s examples; None for every answer where the task
        states none."""
        stated = examples(task)
        if not stated:
            return [None] * len(answers)
        with self._lock:
            return self._runs(task, stated, answers)

    def _runs(self, task: str, stated: list[Example], answers: list[str]) -> list[list[Run]]:
        keys = [hashlib.sha256(f"{task}\0{a}".encode()).hexdigest() for a in answers]
        found = {k: self._cache[k] for k in keys if k in self._cache}
        todo = [(k, a) for k, a in dict(zip(keys, answers)).items() if k not in found]
        if todo:
            if self._pool is None:
                self._pool = SandboxPool(workers=1)
            done = self._pool.run(
                lambda item, slot: run_answer(program_of(item[1]), stated, slot, self.timeout_s), todo
            )
            found.update((key, got) for (key, _), got in zip(todo, done))
        for key in keys:  # most recently used last; the oldest go past the bound
            self._cache[key] = found[key]
            self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return [found[key] for key in keys]

    async def runs_async(self, task: str, answers: list[str]) -> list[list[Run] | None]:
        return await asyncio.to_thread(self.runs, task, answers)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
