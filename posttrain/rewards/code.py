"""Coding verifier: pull the code out of a response, run it against the task's tests in
the sandbox, and score all-pass (1 or 0) or the fraction of tests passed.

Generated tasks carry a list of assert statements; a small harness runs each one and
prints how many passed, so one sandbox run gives the fraction. HumanEval tasks carry
their `check(candidate)` function and are all-or-nothing.
"""

from __future__ import annotations

import asyncio
import re

from posttrain.rewards.sandbox import Limits, SandboxPool
from posttrain.types import RewardResult, Sample

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_COUNT = re.compile(r"POSTTRAIN_TESTS_PASSED (\d+) OF (\d+)")


def extract_code(text: str) -> str:
    """The last fenced code block, else an unterminated fence's tail, else the whole text."""
    blocks = _FENCE.findall(text)
    if blocks:
        return blocks[-1]
    if "```" in text:
        tail = text.rsplit("```", 1)[1]
        return tail.split("\n", 1)[1] if tail.lower().startswith(("python", "py")) and "\n" in tail else tail
    return text


def test_harness(tests: list[str]) -> str:
    return (
        f"_posttrain_tests = {tests!r}\n_posttrain_passed = 0\n"
        "for _posttrain_t in _posttrain_tests:\n"
        "    try:\n"
        "        exec(_posttrain_t, globals())\n"
        "        _posttrain_passed += 1\n"
        "    except Exception:\n"
        "        pass\n"
        "print(f'POSTTRAIN_TESTS_PASSED {_posttrain_passed} OF {len(_posttrain_tests)}')\n"
    )


class CodeVerifier:
    name = "code"

    def __init__(self, workers: int = 2, timeout_s: float = 5.0):
        self.pool = SandboxPool(workers, Limits(wall_seconds=timeout_s, cpu_seconds=max(1, int(timeout_s))))

    def _job(self, sample: Sample) -> tuple[str, str]:
        entry = sample.task.entry
        tests = entry["check"] if "check" in entry else test_harness(list(entry["tests"]))
        return extract_code(sample.completion.text), tests

    def _score(self, sample: Sample, verdict) -> RewardResult:
        entry = sample.task.entry
        details = {
            "status": verdict.status,
            "stderr_tail": verdict.stderr_tail[-500:],
            "wall_seconds": verdict.wall_seconds,
        }
        found = _COUNT.search(verdict.stdout_tail)
        if "tests" in entry and found and verdict.status == "passed":
            passed, total = int(found.group(1)), int(found.group(2))
            details.update(passed=passed, total=total)
            score = passed / total if entry.get("reward") == "fraction" else float(passed == total)
            return RewardResult(score, f"{passed}/{total} tests passed", self.name, details)
        if verdict.status == "passed":
            return RewardResult(1.0, "all tests passed", self.name, details)
        return RewardResult(0.0, f"{verdict.status}: {verdict.reason}", self.name, details)

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        """Identical programs against identical tests (common within a GRPO group) run
        once per call and share the verdict."""
        jobs = [self._job(s) for s in samples]
        unique = list(dict.fromkeys(jobs))
        verdicts = dict(zip(unique, await asyncio.to_thread(self.pool.map, unique)))
        return [self._score(s, verdicts[job]) for s, job in zip(samples, jobs)]

    def close(self) -> None:
        self.pool.close()
