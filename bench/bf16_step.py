"""One RL step in fp32 against bf16 (trainer and engine), on SmolLM2-135M-Instruct.

For each dtype, in one process one after the other: a vLLM engine actor and one DeepSpeed
ZeRO-2 rank (Ray, as in a run), synchronous GRPO on reasoning-gym arithmetic for
`--steps` steps. bf16 runs with `correction: {type: tis, cap: 2, fresh: true}`, so
fresh tokens are corrected for the engine/trainer mismatch. Reports the median over the
steps after the first (warm-up) of the step time and its parts, `logp/mismatch`, the mean
fresh-token weight, and the padding share of the trainer's micro-batches.

    .venv/bin/python bench/bf16_step.py [--steps 4] [--prompts 8] [--group 4] [--max-tokens 96]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

FAMILY = {"name": "basic_arithmetic", "params": {"min_terms": 2, "max_terms": 3, "max_digits": 2}}
COLUMNS = (
    "time/step_s",
    "time/generate_s",
    "time/train_s",
    "sync/seconds",
    "logp/mismatch",
    "offpolicy/fresh_weight_mean",
    "train/padding_frac",
    "response_tokens/mean",
)


def run(args, dtype: str, model_dir: Path) -> list[dict]:
    import ray
    from transformers import AutoTokenizer

    from posttrain.config.files import validate_pipeline
    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import Infra, engine_pool, start_ray
    from posttrain.stages.rl import RLRun
    from posttrain.train.group import TrainerGroup

    correction = {"type": "tis", "cap": 2.0, "fresh": dtype == "bfloat16"}
    config = validate_pipeline(
        {
            "name": f"bench-{dtype}",
            "model": {"name": str(model_dir), "dtype": dtype},
            "rollout": {"engines": 1, "max_model_len": args.max_tokens + 192, "kv_cache_gib": 0.5},
            "trainer": {
                "workers": 1,
                "zero_stage": 2,
                "threads": args.trainer_threads,
                "micro_batch_tokens": args.micro_batch_tokens,
            },
            "wandb": {"enabled": False},
            "stages": [
                {
                    "name": "grpo",
                    "type": "rl",
                    "steps": args.steps,
                    "lr": 1e-6,
                    "prompts_per_step": args.prompts,
                    "group_size": args.group,
                    "max_tokens": args.max_tokens,
                    "partial": {"lambda": 1.0, "correction": correction},
                    "tasks": {"type": "reasoning_gym", "families": [FAMILY], "size": 500, "seed": 11},
                }
            ],
        }
    )
    start_ray(config, verbose=False)
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-bf16-{dtype}-"))
    pool = engine_pool(config, model_dir)
    trainers = TrainerGroup(config.trainer, config.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    infra = Infra(config, run_dir, trainers, pool, MetricsLog(run_dir), tokenizer, live_progress=False)
    try:
        trainers.load(str(model_dir), dtype, 1e-6, 0)
        trainers.sync_weights(pool.engines)
        ray.get([e.info.remote() for e in pool.engines])
        RLRun(config.stages[0], infra).run()
    finally:
        trainers.shutdown()
        pool.shutdown()
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument("--trainer-threads", type=int, default=2)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()

    from posttrain.config import ModelConfig
    from posttrain.models import resolve_model

    model_dir = resolve_model(ModelConfig(name=args.model))
    results = {}
    for dtype in args.dtypes.split(","):
        rows = run(args, dtype, model_dir)
        results[dtype] = {c: statistics.median(r[c] for r in rows[1:] or rows) for c in COLUMNS}
        print(f"  {dtype}: " + ", ".join(f"{c} {v:.4g}" for c, v in results[dtype].items()), flush=True)
    print(f"\n{args.model}, {args.prompts} prompts x {args.group}, max {args.max_tokens} tokens; median of steps 2..")
    print("| dtype | " + " | ".join(COLUMNS) + " |\n|---|" + "---|" * len(COLUMNS))
    for dtype, cols in results.items():
        print(f"| {dtype} | " + " | ".join(f"{v:.4g}" for v in cols.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
