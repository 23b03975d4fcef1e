"""Partial rollouts against synchronous batches, side by side in one run.

SmolLM2-135M-Instruct answers reasoning-gym arithmetic with room to ramble (large
max_tokens), which gives a long-tailed response length distribution. For each lambda the
same initial weights, tasks and seeds run the same RL loop (posttrain.stages.rl.RLRun) for the
same number of optimizer steps; we report trained tokens per second of wall time, the
engines' idle fraction, the length distribution, and the reward curve.

    .venv/bin/python bench/partial_rollout.py [--steps 6] [--lambdas 1.0,0.9,0.75,0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def build_config(args):
    from posttrain.config.files import validate_pipeline

    family = {"name": "basic_arithmetic", "params": {"min_terms": 3, "max_terms": 5, "max_digits": 3}}
    return validate_pipeline(
        {
            "name": "bench-partial",
            "model": {"name": args.model},
            "rollout": {"engines": 1, "max_model_len": args.max_tokens + 128},
            "trainer": {"workers": 2, "zero_stage": 2, "micro_batch_tokens": 1024},
            "stages": [
                {
                    "name": "rl",
                    "type": "rl",
                    "steps": args.steps,
                    "lr": 1e-6,
                    "prompts_per_step": args.prompts,
                    "group_size": args.group,
                    "max_tokens": args.max_tokens,
                    "partial": {"lambda": 1.0, "max_staleness": 4},
                    "tasks": {
                        "type": "reasoning_gym",
                        "families": [family],
                        "size": 500,
                        "seed": 7,
                        "system_prompt": "Think step by step, then give the final answer.",
                    },
                }
            ],
        }
    )


def run_one(config, lam: float, infra, init_dir: Path) -> dict:
    """One lambda from the same initial weights; its metrics go under stage `lambda-X`."""
    from posttrain.stages.rl import RLRun

    base = config.stages[0]
    stage = base.model_copy(
        update={"name": f"lambda-{lam}-steps-{base.steps}", "partial": base.partial.model_copy(update={"lam": lam})}
    )
    infra.trainers.load(str(init_dir), "float32", stage.lr, 0)
    infra.trainers.sync_weights(infra.pool.engines)
    started = time.perf_counter()
    RLRun(stage, infra).run()
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in infra.metrics.path.read_text().splitlines()]
    return {"lambda": lam, "wall": wall, "rows": [r for r in rows if r["stage"] == stage.name]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lambdas", default="1.0,0.9,0.75,0.5")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from posttrain.models import resolve_model
    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import Infra, engine_pool, start_ray
    from posttrain.train.group import TrainerGroup

    config = build_config(args)
    model_dir = resolve_model(config.model)
    start_ray(config, verbose=False)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-partial-"))
    pool = engine_pool(config, model_dir)
    trainers = TrainerGroup(config.trainer, config.seed)
    infra = Infra(
        config=config,
        run_dir=run_dir,
        trainers=trainers,
        pool=pool,
        metrics=MetricsLog(run_dir),
        tokenizer=AutoTokenizer.from_pretrained(model_dir),
    )
    warm = config.model_copy(update={"stages": [config.stages[0].model_copy(update={"steps": 1})]})
    run_one(warm, 1.0, infra, model_dir)  # untimed: first engine call and first DeepSpeed step
    results = []
    for lam in [float(x) for x in args.lambdas.split(",")]:
        results.append(run_one(config, lam, infra, model_dir))
        print(f"lambda={lam}: {results[-1]['wall']:.0f}s", flush=True)
    trainers.shutdown()
    pool.shutdown()
    print_table(results, args)
    print(f"metrics: {run_dir / 'metrics.jsonl'}")
    return 0


def print_table(results, args) -> None:
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        f"workload: {args.model}, reasoning-gym basic_arithmetic (3-5 terms), 'think step by step', "
        f"{args.prompts} prompts x {args.group} samples per step, max_tokens {args.max_tokens}, "
        f"{args.steps} optimizer steps per lambda",
        "",
        "| lambda | trained tokens/s | vs sync | engine idle | response tokens p50 / p90 / max | "
        "wall s | reward per step |",
        "|---|---|---|---|---|---|---|",
    ]
    base = None
    for res in results:
        rows = res["rows"]
        rate = sum(r["tokens/trained"] for r in rows) / res["wall"]
        base = base or rate
        lines.append(
            f"| {res['lambda']} | {rate:.1f} | {rate / base:.2f}x | "
            f"{np.mean([r['engine/idle_frac'] for r in rows]):.2f} | "
            f"{np.median([r['response_tokens/p50'] for r in rows]):.0f} / "
            f"{np.median([r['response_tokens/p90'] for r in rows]):.0f} / "
            f"{max(r['response_tokens/max'] for r in rows):.0f} | {res['wall']:.0f} | "
            + " ".join(f"{r['reward/mean']:.2f}" for r in rows)
            + " |"
        )
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
