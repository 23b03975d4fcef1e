"""Coding verifier: pull the program out of a response and check it in the sandbox.

The verdict comes from a side the candidate cannot reach. Formats `tests` and `check`: the
candidate's program runs in one sandbox, the tests in another (the harness, its own uid
and PID namespace), calling the candidate's function through a proxy over pipes and
comparing plain data on their side; the harness reports to this process over a pipe the
candidate never holds. Format `io`: each case runs the program in a fresh sandbox with the
input on stdin, and this process compares its stdout with the expected output. Nothing the
candidate prints or how it exits can pass a test. Entry schema: `data/coding.py`.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from posttrain.data.coding import validate_entry
from posttrain.rewards.sandbox import Limits, SandboxPool, Slot, Verdict, run_function, run_program
from posttrain.rewards.sandbox_harness import instrument_check
from posttrain.types import RewardResult, Sample

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
MAX_DETAIL_TESTS = 50  # per-test verdicts kept in a reward's details


def extract_code(text: str) -> str:
    """The last fenced code block, else an unterminated fence's tail, else the whole text."""
    blocks = _FENCE.findall(text)
    if blocks:
        return blocks[-1]
    if "```" in text:
        tail = text.rsplit("```", 1)[1]
        return tail.split("\n", 1)[1] if tail.lower().startswith(("python", "py")) and "\n" in tail else tail
    return text


@dataclass(frozen=True)
class CheckResult:
    """One program checked against one task's tests."""

    score: float
    status: str  # passed, failed, error (the check itself could not run: unscored)
    reason: str
    passed: int = 0
    total: int = 0
    tests: list[dict] = field(default_factory=list)  # {test, passed, error} per test (or io case)
    process: dict = field(default_factory=dict)  # how the run ended: limits, output tails, both sides' exits

    @property
    def ok(self) -> bool:
        return self.status != "error"

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def limits_for(entry: dict, output_bytes: int | None = None) -> Limits:
    timeout = float(entry["timeout_s"])
    extra = {"output_bytes": output_bytes} if output_bytes else {}
    return Limits(wall_seconds=timeout, cpu_seconds=max(1, math.ceil(timeout)), **extra)


def check_program(program: str, entry: dict, slot: Slot) -> CheckResult:
    """Check `program` against a `code` task's entry on the slot's uids."""
    try:
        entry = validate_entry(entry)
    except ValueError as exc:
        return CheckResult(0.0, "error", f"task error: {exc}")
    if "io" in entry:
        return _io_check(program, entry, slot)
    return _function_check(program, entry, slot)


@lru_cache(maxsize=1024)
def _instrumented(check: str) -> tuple[str, tuple[str, ...]]:
    source, asserts = instrument_check(check)
    return source, tuple(asserts)


def _process(verdict: Verdict) -> dict:
    """How a sandbox run ended (limits hit, output tails), for a reward's details."""
    return {
        "status": verdict.status,
        "reason": verdict.reason,
        "stdout_tail": verdict.stdout_tail[-500:],
        "stderr_tail": verdict.stderr_tail[-500:],
        "wall_seconds": verdict.wall_seconds,
        "peak_memory_bytes": verdict.peak_memory_bytes,
    }


def _function_check(program: str, entry: dict, slot: Slot) -> CheckResult:
    kind = "tests" if "tests" in entry else "check"
    harness = {"kind": kind, "entry_point": entry["entry_point"], "timeout_s": float(entry["timeout_s"])}
    if entry.get("context"):
        harness["context"] = entry["context"]
    if kind == "tests":
        harness["tests"] = list(entry["tests"])
    else:
        harness["check"], asserts = _instrumented(entry["check"])
        harness["asserts"] = list(asserts)
    run = run_function(program, harness, limits_for(entry), slot)
    process = _process(run.process) | {"candidate": (run.launcher or {}).get("candidate")}
    if run.process.status == "sandbox_error":
        return CheckResult(0.0, "error", run.process.reason, process=process)
    if run.process.status == "passed":  # the launcher finished: no limit was hit
        process.update(status="finished", reason="both sides ran to their end")
    report = run.report
    if report is None:  # the harness died or was stopped: what the candidate made of its check
        harness = (run.launcher or {}).get("harness") or "killed with the launcher"
        why = run.process.reason if run.process.status != "passed" else f"the test harness {harness}"
        return CheckResult(
            0.0, "failed", f"no report from the test harness: {run.process.status}: {why}", process=process
        )
    if report.get("task_error"):
        return CheckResult(0.0, "error", f"task error: {report['task_error']}", process=process)
    tests = report["tests"]
    process["candidate_fate"] = report.get("candidate")
    if kind == "tests":
        passed = sum(t["passed"] for t in tests)
        all_passed = bool(tests) and passed == len(tests)
    else:
        passed = sum(t["passed"] and t["reached"] for t in tests)
        all_passed = report["check_passed"]
    if all_passed:
        score = 1.0
    elif entry["reward"] == "fraction" and tests:
        score = passed / len(tests)
    else:
        score = 0.0
    return CheckResult(
        score,
        "passed" if all_passed else "failed",
        _reason(kind, passed, tests, all_passed, report),
        passed,
        len(tests),
        tests[:MAX_DETAIL_TESTS],
        process,
    )


def _reason(kind: str, passed: int, tests: list[dict], all_passed: bool, report: dict) -> str:
    noun = "tests" if kind == "tests" else "asserts"
    head = f"{passed}/{len(tests)} {noun} passed"
    if kind == "check":
        head = ("check passed: " if all_passed else "check failed: ") + head
    if all_passed:
        return head
    first = next((t for t in tests if not t["passed"]), None)
    if first is not None:
        head += f"; first failure: {first['test'][:120]}: {(first['error'] or '')[:160]}"
    elif report.get("stopped"):
        head += f"; the check stopped: {report['stopped'][:160]}"
    if report.get("candidate"):
        head += f"; the candidate: {report['candidate'][:120]}"
    return head


def _io_check(program: str, entry: dict, slot: Slot) -> CheckResult:
    cases, tests, process = entry["io"], [], {}
    for i, case in enumerate(cases):
        if tests and not tests[-1]["passed"] and entry["reward"] == "all_pass":
            tests.append({"test": f"case {i}", "passed": False, "error": "not run: an earlier case failed"})
            continue
        # room for the expected output and then some: past it the program is killed
        limits = limits_for(entry, max(Limits().output_bytes, 2 * len(case["output"].encode()) + 4096))
        verdict = run_program(program, limits, slot.candidate, stdin=case["input"])
        process = _process(verdict)
        if verdict.status == "sandbox_error":
            return CheckResult(0.0, "error", verdict.reason, process=process)
        if verdict.status != "passed":
            error = f"{verdict.status}: {verdict.reason}"
        elif verdict.stdout.decode("utf-8", "replace").split() != case["output"].split():
            error = "wrong output: " + " ".join(verdict.stdout.decode("utf-8", "replace").split())[:120]
        else:
            error = None
        tests.append({"test": f"case {i}", "passed": error is None, "error": error})
    passed = sum(t["passed"] for t in tests)
    all_passed = passed == len(cases)
    score = 1.0 if all_passed else (passed / len(cases) if entry["reward"] == "fraction" else 0.0)
    reason = f"{passed}/{len(cases)} cases passed"
    failed = next((t for t in tests if not t["passed"]), None)
    if failed is not None:
        reason += f"; {failed['test']}: {failed['error'][:200]}"
    status = "passed" if all_passed else "failed"
    return CheckResult(score, status, reason, passed, len(cases), tests[:MAX_DETAIL_TESTS], process)


def entry_from_files(program: str, tests: str, entry_point: str | None, timeout_s: float) -> dict:
    """A `code` entry from a tests file (`posttrain sandbox --tests`): a `check(candidate)`
    function (format `check`), or assert statements, each top-level statement holding an
    assert one test and the other statements (imports, helpers) their context."""
    import ast

    try:
        tree = ast.parse(tests)
    except SyntaxError as exc:
        raise ValueError(f"the tests file is not valid Python: {exc}") from None
    entry: dict = {"entry_point": entry_point or _only_function(program), "reward": "all_pass", "timeout_s": timeout_s}
    if any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body):
        return validate_entry(dict(entry, check=tests))
    parts = {True: [], False: []}
    for stmt in tree.body:
        parts[any(isinstance(n, ast.Assert) for n in ast.walk(stmt))].append(ast.get_source_segment(tests, stmt))
    if not parts[True]:
        raise ValueError("the tests file holds no assert statement and no check(candidate) function")
    entry["tests"] = parts[True]
    if parts[False]:
        entry["context"] = "\n".join(parts[False])
    return validate_entry(entry)


def _only_function(program: str) -> str:
    import ast

    try:
        names = [n.name for n in ast.parse(program).body if isinstance(n, ast.FunctionDef)]
    except SyntaxError:
        names = []
    if len(names) != 1:
        raise ValueError(f"the program defines {len(names)} top-level functions: give --entry-point NAME")
    return names[0]


def as_reward(result: CheckResult, source: str = "code") -> RewardResult:
    details = {
        "status": result.status,
        "passed": result.passed,
        "total": result.total,
        "tests": result.tests,
        "run": result.process,
    }
    return RewardResult(result.score, result.reason, source, details, ok=result.ok)


@dataclass(frozen=True)
class _Job:
    program: str
    entry: str  # the entry as canonical JSON, so that identical jobs are found


def _check_alone(job: _Job, slot: Slot) -> CheckResult:
    """One job's verdict, whatever happens to another's: a failure of the verifier itself
    leaves this sample unscored, with the error as its reason, and the batch goes on."""
    try:
        return check_program(job.program, json.loads(job.entry), slot)
    except Exception as exc:
        return CheckResult(0.0, "error", f"verifier error: {type(exc).__name__}: {str(exc)[:300]}")


class CodeVerifier:
    """Scores `code` tasks; each task's own `timeout_s` and `reward` apply."""

    name = "code"

    def __init__(self, workers: int = 2, timeout_s: float | None = None):
        """`timeout_s`: the limit of tasks whose entry has none (else 5 s)."""
        self.pool = SandboxPool(workers)
        self.defaults = {} if timeout_s is None else {"timeout_s": timeout_s}

    def _job(self, sample: Sample) -> _Job:
        entry = {**self.defaults, **sample.task.entry}
        return _Job(extract_code(sample.completion.text), json.dumps(entry, sort_keys=True))

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        """Identical programs against identical tests (common within a GRPO group) run
        once per call and share the verdict."""
        jobs = [self._job(s) for s in samples]
        unique = list(dict.fromkeys(jobs))
        checked = await asyncio.to_thread(self.pool.run, _check_alone, unique)
        verdicts = dict(zip(unique, checked))
        return [as_reward(verdicts[job], self.name) for job in jobs]

    def close(self) -> None:
        self.pool.close()
