"""Does thinking longer help the tiny model? Held-out accuracy with and without a scratchpad.

For each answer form (full scratchpad, short scratchpad, answer alone, and for agent tasks
the calculator episode), the quickstart's tiny model is fine-tuned from scratch with the
quickstart's SFT settings on training-part tasks of the three domains, every answer in
that one form; then each domain's eval-part tasks (disjoint from training by
construction) are generated greedily on a vLLM engine and scored by the domain's
verifier, with no token budget. Real SFT on DeepSpeed ranks, real engine, real sandbox.

    .venv/bin/python bench/scratchpad.py [--steps 200] [--tasks 200] [--forms full,short,none,tool]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

AGENT_SYSTEM = "Tools: calculator(expression)."


def domains(part: str, size: int, seed: int) -> dict:
    return {
        "general": {"type": "arithmetic", "size": size, "seed": seed, "part": part},
        "coding": {"type": "coding", "split": "offset", "size": size, "seed": seed, "part": part, "system_prompt": ""},
        "agent": {
            "type": "agent",
            "families": ["arithmetic"],
            "size": size,
            "seed": seed + 7,
            "part": part,
            "max_turns": 3,
            "system_prompt": AGENT_SYSTEM,
        },
    }


def pipeline(form: str, steps: int, tasks: int) -> dict:
    train = domains("train", 2000, 1)
    forms = {form: 1.0} if form != "tool" else {"tool": 1.0, "none": 1e-9}
    return {
        "name": f"scratchpad-{form}",
        "model": {"name": "tiny", "tiny": {"layers": 4, "hidden": 256, "heads": 4, "kv_heads": 4, "intermediate": 512}},
        "rollout": {"engines": 1, "max_model_len": 256, "kv_cache_gib": 0.25},
        "trainer": {"workers": 2, "zero_stage": 2},
        "wandb": {"enabled": False},
        "stages": [
            {
                "name": "sft",
                "type": "sft",
                "data": {"type": "mixture", "seed": 1, "sources": list(train.values())},
                "think": {"forms": forms},
                "effort_lines": True,
                "steps": steps,
                "batch_size": 32,
                "lr": 1.0e-3,
                "warmup_steps": 20,
            },
            {  # only its cells and budgets are used: one effort with a budget nothing reaches
                "name": "experts",
                "type": "experts",
                "domains": domains("train", 10, 1),
                "efforts": {"max": {"tokens": 120}},
                "steps": 1,
                "lr": 1e-5,
                "max_tokens": 160,
            },
            {
                "name": "eval",
                "type": "eval",
                "checkpoints": ["sft"],
                "tasks_per_cell": tasks,
                "domains": domains("eval", tasks, 5),
            },
        ],
    }


def run_form(form: str, args, out: Path) -> list[dict]:
    from transformers import AutoTokenizer

    from posttrain.config import PipelineConfig
    from posttrain.models import resolve_model
    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import Infra, start_ray
    from posttrain.runtime.placement import open_slot, reserve, wait_ready
    from posttrain.stages.evaluate import Evaluator
    from posttrain.stages.sft import run_sft

    config = PipelineConfig.model_validate(pipeline(form, args.steps, args.tasks))
    run_dir = out / form
    run_dir.mkdir(parents=True, exist_ok=True)
    model_dir = resolve_model(config.model)
    start_ray(config, verbose=False)
    pg = reserve(config, 0)
    wait_ready(pg, config)
    slot = open_slot(config, model_dir, 0, pg)
    infra = Infra(
        config=config,
        run_dir=run_dir,
        trainers=slot.trainers,
        pool=slot.pool,
        metrics=MetricsLog(run_dir),
        tokenizer=AutoTokenizer.from_pretrained(model_dir),
        judge=slot.judge,
        pg=pg,
        node=slot.node,
        live_progress=False,
    )
    try:
        started = time.perf_counter()
        sft_dir = run_sft(config.stages[0], model_dir, infra)
        sft_s = time.perf_counter() - started
        evaluator = Evaluator(config.stages[2], infra)
        rows = evaluator.run({"sft": sft_dir, "model": model_dir})
    finally:
        slot.close()
        import ray

        ray.shutdown()
    for row in rows:
        row.update(form=form, sft_seconds=round(sft_s, 1))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200, help="SFT steps (the quickstart's)")
    parser.add_argument("--tasks", type=int, default=200, help="eval tasks per domain")
    parser.add_argument("--forms", default="full,short,none,tool")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-scratchpad")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for form in args.forms.split(","):
        rows += run_form(form, args, args.out)
        (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
        print(table(rows), flush=True)
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
    return 0


def table(rows: list[dict]) -> str:
    lines = [
        "| form | domain | score ± se | mean tokens | n |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if r["form"] == "tool" and r["domain"] != "agent":
            continue
        se = math.sqrt(max(r["score"] * (1 - r["score"]), 0) / max(r["n"] - 1, 1))
        score = f"{r['score']:.3f} ± {se:.3f}"
        lines.append(f"| {r['form']} | {r['domain']} | {score} | {r['mean_tokens']:.1f} | {r['n']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
