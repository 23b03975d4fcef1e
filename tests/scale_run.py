"""A run folder at the size of a long real run, written by the project's own writers
(records/metrics.py MetricsLog, records/rollouts.py RolloutLog, the RL driver's health
monitor): an SFT stage of 7,400 steps and nine expert jobs of 1,400 steps (20,000 metric
rows), 80 saved samples per expert step (1,008,000 samples), and the GRM judgements of the
general jobs' writing samples. The dashboard's scale test serves it.

    python tests/scale_run.py DIR      # writes DIR and prints how long it took
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from multiprocessing import get_context
from pathlib import Path

import yaml

DOMAINS = ("general", "coding", "agent")
EFFORTS = ("max", "high", "low")
JOBS = [f"{d}-{e}" for d in DOMAINS for e in EFFORTS]
SFT_STEPS, EXPERT_STEPS, PER_STEP, GRM_PER_STEP = 7_400, 1_400, 80, 8
MISMATCH_JOB, MISMATCH_STEPS = "coding-high", range(700, 720)  # logp/mismatch over its bound there
SPIKE_STEP = 3_333  # SFT grad/norm spike: downsampling must keep it
RUBRICS = [
    [{"text": f"The answer names topic {i} and stays on it", "kind": "essential", "weight": 3.0}]
    + [
        {
            "text": f"Criterion {i}-{j}: the tone suits a {('letter', 'memo', 'post')[j]}",
            "kind": "optional",
            "weight": 1.0,
        }
        for j in range(2)
    ]
    for i in range(50)
]


def config() -> dict:
    domains = {"general": {"type": "writing"}, "coding": {"type": "coding"}, "agent": {"type": "agent"}}
    return {
        "name": "scale",
        "model": {"name": "tiny"},
        "health": {"logp_mismatch_max": 0.05},
        "stages": [
            {"name": "sft", "type": "sft", "steps": SFT_STEPS},
            {
                "name": "experts",
                "type": "experts",
                "steps": EXPERT_STEPS,
                "domains": domains,
                "partial": {"lambda": 0.75, "max_staleness": 2},
            },
        ],
    }


# ------------------------------------------------------------------ samples


def _samples(domain: str):
    from posttrain.types import Completion, Message, Sample, Task

    out = []
    for i in range(PER_STEP):
        task = Task(
            f"{domain}/{i % 40}",
            {"general": "writing", "coding": "coding_train", "agent": "calculator"}[domain],
            (Message("system", "Effort: high."), Message("user", f"Task {i % 40} of {domain}: answer in one line.")),
            f"answer {i % 40}",
            {"tests": ["assert solve(1) == 2", "assert solve(2) == 3"]} if domain == "coding" else {},
            {"general": "grm", "coding": "code", "agent": "agent"}[domain],
        )
        text = f"Thinking: step by step about task {i % 40}. The answer is {i % 7}."
        completion = Completion(tuple(range(20 + i % 30)), (), text, "stop" if i % 9 else "length")
        out.append(Sample(task, i // 8, tuple(range(40)), completion, 0))
    return out


def _reward(domain: str, step: int, i: int):
    grm = domain == "general" and i < GRM_PER_STEP
    return _result(domain, (step * 7 + i * 13) % 9, (step + i) % 97 != 0, (step + i) % len(RUBRICS) if grm else -1)


@functools.cache
def _result(domain: str, quarter: int, ok: bool, rubric: int):
    """Every distinct reward once: the writers get the same objects a scorer would hand them."""
    from posttrain.types import RewardResult

    score = quarter / 4 - 1  # -1 .. 1 in quarters
    if rubric >= 0:
        criteria = RUBRICS[rubric]
        verdicts = [{"criterion": j, "verdict": "yes", "score": 0.8, "reason": "it does"} for j in range(len(criteria))]
        details = {
            "status": "scored",
            "rubric": criteria,
            "verdicts": verdicts,
            "judge_model": "scale-judge",
            "cache_hit": False,
            "latency_s": 0.1,
        }
        return RewardResult(score, f"rubric {score:.2f}", "grm", details)
    source = {"general": "reasoning_gym", "coding": "code", "agent": "agent"}[domain]
    details = {"passed": 2, "total": 2} if domain == "coding" else {}
    return RewardResult(score, f"{source} said {score:.2f}", source, details, ok=ok)


def write_job_rollouts(args: tuple[str, str]) -> None:
    from posttrain.records.rollouts import RolloutLog

    run_dir, job = args
    domain, effort = job.split("-")
    log, samples = RolloutLog(Path(run_dir), f"experts/{job}"), _samples(domain)
    budgets = [40] * PER_STEP
    for step in range(1, EXPERT_STEPS + 1):
        log.write(step, samples, [_reward(domain, step, i) for i in range(PER_STEP)], budgets, effort)


# ------------------------------------------------------------------ metrics


def rl_row(job: str, step: int) -> dict:
    t = step / EXPERT_STEPS
    wave = math.sin(step / 37)
    row = {
        "reward_source/x": 0.1 + 0.5 * t,
        "reward/mean": -0.2 + 0.6 * t + 0.05 * wave,
        "reward/std": 0.4,
        "reward/over_budget_frac": 0.1 * (1 - t),
        "response_tokens/mean": 40 - 10 * t,
        "response_tokens/p50": 38.0,
        "response_tokens/p90": 60.0,
        "response_tokens/max": 80.0,
        "tokens/trained": 3000.0,
        "response/truncated_frac": 0.05,
        "logp/mismatch": 0.2 if job == MISMATCH_JOB and step in MISMATCH_STEPS else 1e-4 * (1 + wave),
        "offpolicy/token_frac": 0.1,
        "offpolicy/weight_mean": 0.98,
        "loss/policy": 0.01 * wave,
        "loss/clip_frac": 0.02,
        "loss/kl": 0.001,
        "grad/norm": 0.5 + 0.1 * wave,
        "train/skipped_nonfinite": 0.0,
        "policy/entropy": 0.9 - 0.3 * t,
        "time/train_s": 1.0,
        "time/step_s": 3.0,
        "throughput/tokens_per_s": 1000.0,
        "engine/busy_s": 1.5,
        "engine/count": 2.0,
        "engine/requeued_by_death": 0.0,
        "time/generate_s": 1.5,
        "time/score_s": 0.3,
        "engine/idle_frac": 0.4,
        "groups/zero_advantage_frac": 0.2,
        "staleness/mean": 0.5,
        "staleness/max": 1.0,
        # whole books, as the after-module sweep checks them: every saved sample trained, 40 queued
        "samples/drawn": float(PER_STEP * step + 40),
        "samples/trained": float(PER_STEP * step),
        "samples/queued": 40.0,
        "samples/dropped": 0.0,
        "sync/seconds": 0.2,
        "queue/depth": 40.0,
        "budget/tokens": 40.0,
        "policy/version": float(step),
    }
    if job.startswith("agent"):
        row.update({"agent/turns_mean": 2.0, "agent/tool_calls_mean": 1.0, "agent/tool_error_frac": 0.1})
    if job.startswith("general"):
        row.update({"grm/score_mean": 0.3, "grm/unscored": 0.0, "grm/latency_s": 0.4})
    if job.startswith("coding"):
        row["code/tests_counted"] = 2.0
    return row


def write_metrics(run_dir: Path) -> None:
    from posttrain.config import HealthConfig
    from posttrain.records.health import HealthMonitor
    from posttrain.records.metrics import MetricsLog

    log = MetricsLog(run_dir)
    for step in range(1, SFT_STEPS + 1):
        grad = 1000.0 if step == SPIKE_STEP else 1.0 + 0.2 * math.sin(step / 50)
        row = {"loss/nll": 3.0 / (1 + step / 500), "grad/norm": grad, "tokens": 4096.0, "time/step_s": 0.5}
        log.log("sft", step, {**row, "train/skipped_nonfinite": 0.0})
    quiet = open("/dev/null", "w")  # noqa: SIM115 - the monitor's warnings: the driver prints them, not a test
    for job in JOBS:
        health = HealthMonitor(HealthConfig(**config()["health"]), f"experts/{job}", 2, stream=quiet)
        for step in range(1, EXPERT_STEPS + 1):
            row = rl_row(job, step)
            row.update(health.step(step, row))
            log.log(f"experts/{job}", step, row)
    quiet.close()


def build(run_dir: Path) -> float:
    """Write the folder; returns the seconds it took."""
    started = time.perf_counter()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.resolved.yaml").write_text(yaml.safe_dump(config()))
    jobs = {j: {"status": "done", "seconds": 4200.0, "attempts": 1} for j in JOBS}
    state = {
        "run_id": "scale-1",
        "stages": {
            "sft": {"status": "done", "seconds": 3700.0},
            "experts": {"status": "done", "seconds": 4200.0, "jobs": jobs},
        },
    }
    (run_dir / "run_state.json").write_text(json.dumps(state))
    # two processes; every general job (the only writers of scoreboard.jsonl) in the same one
    order = [j for j in JOBS if j.startswith("general")] + [j for j in JOBS if not j.startswith("general")]
    with get_context("fork").Pool(2) as pool:
        done = pool.map_async(write_job_rollouts, [(str(run_dir), j) for j in order], chunksize=5)
        write_metrics(run_dir)
        done.get()
    return time.perf_counter() - started


if __name__ == "__main__":
    seconds = build(Path(sys.argv[1]))
    print(f"wrote {sys.argv[1]} in {seconds:.1f}s")
