"""Peak memory of a command and every process it starts (Ray's raylet, workers, engine
and trainer actors included), sampled every 0.5 s as the sum of PSS (shared pages counted
once) over the process tree. PSS costs the kernel a walk of every mapping (about 0.1 s
for the quickstart's tree, a fifth of a core at this rate), so it is read only when the
tree's RSS (cheap: /proc/PID/statm) has risen by 2 % above its lowest since the last PSS
reading, and at least every 10 s: new memory shows in RSS first, so a rise of the tree's
PSS comes with one of its RSS.

    .venv/bin/python bench/peak_memory.py -- make quickstart
    .venv/bin/python bench/peak_memory.py --record runs/smollm2/peak_memory.json -- posttrain run ...

`--record FILE` also writes the figures as JSON ({"peak_gib", "peak_at_s", "wall_s",
"exit_code", "command"}), which bench/recipe_targets.py reads from the run folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil


def tree_sum(root: psutil.Process, measure) -> int:
    """`measure(process)` in bytes, summed over the process and its descendants alive now."""
    total = 0
    for proc in [root] + root.children(recursive=True):
        try:
            total += measure(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total


def tree_pss(root: psutil.Process) -> int:
    return tree_sum(root, lambda proc: proc.memory_full_info().pss)


def tree_rss(root: psutil.Process) -> int:
    return tree_sum(root, lambda proc: proc.memory_info().rss)


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    options = argv[: argv.index("--")] if "--" in argv else []
    record = Path(options[options.index("--record") + 1]) if "--record" in options[:-1] else None
    if options and record is None:
        print(f"peak_memory.py: unknown options {' '.join(options)} (only --record FILE)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    child = subprocess.Popen(command)
    root = psutil.Process(child.pid)
    peak, peak_at, low_rss, last_pss, readings = 0, 0.0, float("inf"), -1e9, 0
    while child.poll() is None:
        rss, now = tree_rss(root), time.perf_counter()
        low_rss = min(low_rss, rss)
        if rss > 1.02 * low_rss or now - last_pss >= 10:
            pss, last_pss, low_rss, readings = tree_pss(root), now, rss, readings + 1
            if pss > peak:
                peak, peak_at = pss, now - started
        time.sleep(0.5)
    wall = time.perf_counter() - started
    print(
        f"\npeak memory (PSS of the process tree): {peak / 2**30:.2f} GiB at {peak_at:.0f}s; "
        f"wall {wall:.0f}s; exit code {child.returncode} ({readings} PSS readings)"
    )
    if record is not None:
        record.parent.mkdir(parents=True, exist_ok=True)
        figures = {"peak_gib": peak / 2**30, "peak_at_s": peak_at, "wall_s": wall, "exit_code": child.returncode}
        record.write_text(json.dumps({**figures, "command": command}, indent=1) + "\n")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
