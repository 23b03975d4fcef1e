"""Peak memory of a command and every process it starts (Ray's raylet, workers, engine
and trainer actors included), sampled every 0.5 s as the sum of PSS (shared pages counted
once) over the process tree.

    .venv/bin/python bench/peak_memory.py -- make quickstart
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil


def tree_pss(root: psutil.Process) -> int:
    total = 0
    for proc in [root] + root.children(recursive=True):
        try:
            total += proc.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    started = time.perf_counter()
    child = subprocess.Popen(command)
    root = psutil.Process(child.pid)
    peak, peak_at = 0, 0.0
    while child.poll() is None:
        pss = tree_pss(root)
        if pss > peak:
            peak, peak_at = pss, time.perf_counter() - started
        time.sleep(0.5)
    wall = time.perf_counter() - started
    print(
        f"\npeak memory (PSS of the process tree): {peak / 2**30:.2f} GiB at {peak_at:.0f}s; "
        f"wall {wall:.0f}s; exit code {child.returncode}"
    )
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
