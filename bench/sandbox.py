"""Sandbox throughput: trivial HumanEval-style checks per second through the worker pool.

.venv/bin/python bench/sandbox.py [--checks 200] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from posttrain.rewards.sandbox import Limits, SandboxPool


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checks", type=int, default=200)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    jobs = [("def add(a, b):\n    return a + b\n", f"assert add({i}, 1) == {i + 1}") for i in range(args.checks)]
    rows = []
    for workers in sorted({1, args.workers}):
        pool = SandboxPool(workers=workers, limits=Limits(wall_seconds=10, cpu_seconds=5))
        pool.map(jobs[:4])  # warm the page cache
        started = time.perf_counter()
        verdicts = pool.map(jobs)
        wall = time.perf_counter() - started
        pool.close()
        passed = sum(v.status == "passed" for v in verdicts)
        rows.append(f"| {workers} | {args.checks} | {passed} | {wall:.2f} | {args.checks / wall:.1f} |")
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print("| workers | checks | passed | wall s | checks/s |\n|---|---|---|---|---|\n" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
