"""Code-check throughput: trivial checks per second through the sandbox pool, each the
whole two-process check a coding reward runs (the candidate's sandbox, the harness's
sandbox on another uid, one call through the pipe proxy, the report), and for comparison
a program alone in one sandbox (an io case). Also the CPU time per check (this process
and every sandbox process), which a busy machine inflates less than the wall clock.

.venv/bin/python bench/sandbox.py [--checks 200] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

from posttrain.rewards.code import check_program
from posttrain.rewards.sandbox import Limits, SandboxPool, run_program

ADD = "def add(a, b):\n    return a + b\n"


def function_check(i: int, slot) -> bool:
    entry = {"entry_point": "add", "tests": [f"assert add({i}, 1) == {i + 1}"], "reward": "all_pass", "timeout_s": 10}
    return check_program(ADD, entry, slot).score == 1.0


def program_alone(i: int, slot) -> bool:
    verdict = run_program("print(sum(map(int, input().split())))", Limits(), slot.candidate, stdin=f"{i} 1")
    return verdict.stdout.split() == [str(i + 1).encode()]


def _cpu_seconds() -> float:
    """CPU of this process and of every sandbox process it waited for (the whole check)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checks", type=int, default=200)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    rows = []
    for name, fn in (("function (two sandboxes)", function_check), ("io case (one sandbox)", program_alone)):
        for workers in sorted({1, args.workers}):
            pool = SandboxPool(workers=workers)
            pool.run(fn, list(range(4)))  # warm the page cache
            started, cpu = time.perf_counter(), _cpu_seconds()
            ok = pool.run(fn, list(range(args.checks)))
            wall, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
            pool.close()
            rate, per = args.checks / wall, 1000 * cpu / args.checks
            rows.append(f"| {name} | {workers} | {args.checks} | {sum(ok)} | {wall:.2f} | {rate:.1f} | {per:.1f} |")
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average {load}")
    print(
        "| check | workers | checks | passed | wall s | checks/s | CPU ms per check |\n|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
