"""Answer-check overhead: what running each sample's check in a worker process (with its
hard time limit, `rewards/deadline.py`) costs per sample, against the same check called
in-process, on the same samples through the `math` verifier. Workers are set up before the
clock starts (their imports are paid once per process, not per sample).

.venv/bin/python bench/answer_checks.py [--samples 400]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import sys
import time

from posttrain.rewards.deadline import ANSWER_WORKERS, slim, warm_answer_checks
from posttrain.rewards.math_verifier import MathVerifier
from posttrain.rollout.workers import call_method, shared_pool
from posttrain.types import Completion, Message, Sample, Task

FORMS = [
    ("{v}", "\\boxed{{{v}}}"),
    ("{v}", "The answer is $\\frac{{{w}}}{{2}}$."),
    ("{v}", "<answer>{v}.0</answer>"),
    ("{v}", "So the total is {v} apples."),
    ("\\frac{{{v}}}{{7}}", "\\boxed{{\\frac{{{w}}}{{14}}}}"),
]


def samples(n: int) -> list[Sample]:
    out = []
    for i in range(n):
        gold, text = FORMS[i % len(FORMS)]
        v = 100 + i
        task = Task(f"t{i}", "math", (Message("user", "q"),), answer=gold.format(v=v), verifier="math")
        ids = tuple(range(300))  # a response's token ids and logprobs, which a check does not read
        out.append(Sample(task, 0, ids, Completion(ids, (0.0,) * 300, text.format(v=v, w=2 * v), "stop")))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=400)
    args = parser.parse_args()
    verifier, batch = MathVerifier(), samples(args.samples)
    asyncio.run(verifier.score(batch[:8]))  # set the workers up
    rows = []
    for _ in range(2):
        started = time.perf_counter()
        in_workers = asyncio.run(verifier.score(batch))
        workers_s = time.perf_counter() - started
        started = time.perf_counter()
        in_process = [verifier.score_one(s) for s in batch]
        process_s = time.perf_counter() - started
        assert [r.score for r in in_workers] == [r.score for r in in_process]
        rows.append((workers_s, process_s, sum(r.score for r in in_process)))
    # the round trip alone: each sample sent to a worker and an answer back, no check run
    blob = pickle.dumps(verifier)
    pool = shared_pool(warm_answer_checks, ("math_verify",), ANSWER_WORKERS)
    calls = [(blob, "__eq__", (slim(s),)) for s in batch]
    started = time.perf_counter()
    assert all(error is None for _, error in pool.map(call_method, calls, 10.0))
    trip_ms = 1000 * (time.perf_counter() - started) / len(batch)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average {load}")
    print("| run | samples | credited | in-process ms/sample | in workers ms/sample | overhead ms/sample |")
    print("|---|---|---|---|---|---|")
    for i, (w, p, credited) in enumerate(rows, 1):
        n = len(batch)
        print(f"| {i} | {n} | {credited:.0f} | {1000 * p / n:.2f} | {1000 * w / n:.2f} | {1000 * (w - p) / n:.2f} |")
    print(f"round trip alone (a sample to a worker and back, no check, {ANSWER_WORKERS} workers): {trip_ms:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
