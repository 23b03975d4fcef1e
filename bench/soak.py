"""Soak: a whole-recipe pipeline for a long time with random faults injected, then checks.
By default `pipelines/recipe.yaml` at the quickstart's size (`make soak` passes the
overrides): the quickstart's recipe with the GRM judge, whose engine the faults also kill.

The pipeline runs as `posttrain run` in its own session; a fault injector SIGKILLs, at
random times, one of that session's rollout engine actors (the pool must requeue its
trajectories and start a new engine), trainer ranks (the run dies; the soak resumes it
with `posttrain run --resume`, as a user would) or judge engines (when a stage has
one). At the end it checks that every stage finished, the sample accounting of every
logged step (drawn = trained + queued + dropped, counters never going back across
resumes, steps 1..N each logged once) and that the eval stage ran (eval.json).

    .venv/bin/python bench/soak.py [--fault-every 60] [--seed 0] [-o stages[2].steps=10 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

FAULTS = {"engine": "ray::RolloutEngine", "trainer": "ray::TrainerWorker", "judge": "ray::JudgeEngine"}


def session_processes(sid: int) -> dict[str, list[int]]:
    """Process ids by fault kind, among the processes of session `sid` (the run and its Ray)."""
    found: dict[str, list[int]] = {kind: [] for kind in FAULTS}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != sid:
                continue
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except (OSError, ProcessLookupError):
            continue
        for kind, prefix in FAULTS.items():
            if title.startswith(prefix):
                found[kind].append(int(entry.name))
    return found


def checkpoints(run_dir: Path) -> int:
    return (
        sum(
            1
            for p in (run_dir / "checkpoints").rglob("*")
            if p.is_dir() and (p.name == "final" or p.name.startswith("step_"))
        )
        if (run_dir / "checkpoints").is_dir()
        else 0
    )


def run_once(
    argv: list[str], rng: random.Random, fault_every: float, log: list[dict], kinds: list[str], run_dir: Path
) -> int:
    """One `posttrain run` until it exits; faults injected meanwhile. Returns its exit code.
    A trainer kill ends the run, which resumes from its newest checkpoint: the next one waits
    until a new checkpoint exists, or a busy machine could kill the run again and again
    before it ever saves (seen: SFT restarted 6 times)."""
    proc = subprocess.Popen(argv, start_new_session=True)
    next_fault = time.monotonic() + rng.expovariate(1 / fault_every)
    while proc.poll() is None:
        time.sleep(1)
        if time.monotonic() < next_fault:
            continue
        next_fault = time.monotonic() + rng.expovariate(1 / fault_every)
        targets = session_processes(proc.pid)
        last_trainer_kill = max((f["checkpoints"] for f in log if f["fault"] == "trainer"), default=-1)
        if checkpoints(run_dir) <= last_trainer_kill:
            targets["trainer"] = []
        choices = [k for k in kinds if targets[k]]
        if not choices:
            continue
        kind = rng.choice(choices)
        pid = rng.choice(targets[kind])
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        log.append({"t": time.time(), "fault": kind, "pid": pid, "checkpoints": checkpoints(run_dir)})
        print(f"[soak] killed {kind} pid {pid}", flush=True)
    return proc.returncode


def check_accounting(run_dir: Path) -> list[str]:
    """Problems found in the metrics; empty when all is well."""
    from posttrain.records.metrics import read_metrics

    problems = []
    rows = read_metrics(run_dir)
    state = json.loads((run_dir / "run_state.json").read_text())
    problems += [
        f"stage {name}: status {entry['status']}"
        for name, entry in state["stages"].items()
        if entry["status"] != "done"
    ]
    for name in sorted({r["stage"] for r in rows}):  # a stage, or one job of an experts stage
        stage_rows = [r for r in rows if r["stage"] == name]
        steps = [r["step"] for r in stage_rows]
        if steps != list(range(1, len(steps) + 1)):
            problems.append(f"stage {name}: steps logged {steps[:5]}... are not 1..N, each once")
        previous = None
        for r in stage_rows:
            if "samples/drawn" not in r:
                continue
            rest = r["samples/trained"] + r["samples/queued"] + r["samples/dropped"]
            if r["samples/drawn"] != rest:
                problems.append(f"stage {name} step {r['step']}: drawn {r['samples/drawn']} != {rest}")
            if previous and (
                r["samples/drawn"] < previous["samples/drawn"] or r["samples/trained"] < previous["samples/trained"]
            ):
                problems.append(f"stage {name} step {r['step']}: sample counters went back")
            previous = r
    return problems


def check_eval(run_dir: Path) -> tuple[int, list[str]]:
    """Rows of the eval stage's eval.json, and problems (none when it ran and scored)."""
    path = run_dir / "eval.json"
    if not path.is_file():
        return 0, ["no eval.json: the eval stage did not run (does the pipeline have one?)"]
    rows = json.loads(path.read_text())["rows"]
    return len(rows), [] if rows else ["eval.json has no rows"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline", default="pipelines/recipe.yaml")
    parser.add_argument("--run-dir", default="runs/soak")
    parser.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to posttrain run, e.g. -o stages[2].steps=10 for a shorter soak",
    )
    parser.add_argument("--fault-every", type=float, default=60.0, help="mean seconds between faults")
    parser.add_argument("--faults", default="engine,trainer,judge")
    parser.add_argument("--max-restarts", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    run_dir = Path(args.run_dir)
    cli = [sys.executable, "-m", "posttrain.cli", "run"]
    first = cli + [args.pipeline, "--run-dir", str(run_dir)] + [x for o in args.override for x in ("-o", o)]
    faults: list[dict] = []
    started = time.time()
    code = run_once(first, rng, args.fault_every, faults, args.faults.split(","), run_dir)
    restarts = 0
    while code != 0 and restarts < args.max_restarts:
        if not (run_dir / "run_state.json").is_file():
            print(f"[soak] the run failed (exit {code}) before it wrote run_state.json", flush=True)
            break
        restarts += 1
        print(f"[soak] run exited with {code}: resuming ({restarts})", flush=True)
        code = run_once(
            cli + ["--resume", str(run_dir)], rng, args.fault_every, faults, args.faults.split(","), run_dir
        )
    wall = time.time() - started

    problems = [] if code == 0 else [f"the run did not finish (exit {code}, {restarts} resumes)"]
    problems += check_accounting(run_dir) if (run_dir / "run_state.json").is_file() else ["no run_state.json"]
    from posttrain.records.metrics import read_metrics

    rows = read_metrics(run_dir)
    requeued = sum(r.get("engine/requeued_by_death", 0) for r in rows)
    eval_rows, eval_problems = check_eval(run_dir)
    problems += eval_problems
    by_kind = {k: sum(f["fault"] == k for f in faults) for k in FAULTS}
    print(
        "\n| wall | faults injected (engine / trainer / judge) | resumes | trajectories requeued by engine deaths "
        "| steps logged | eval rows | problems |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {wall / 60:.1f} min | {by_kind['engine']} / {by_kind['trainer']} / {by_kind['judge']} | {restarts} | "
        f"{requeued:.0f} | {len(rows)} | {eval_rows} | "
        f"{'; '.join(problems) or 'none'} |"
    )
    (run_dir / "soak.json").write_text(
        json.dumps(
            {"faults": faults, "restarts": restarts, "problems": problems, "eval_rows": eval_rows, "wall_s": wall}
        )
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
