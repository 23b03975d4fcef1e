"""AdamW, Muon and per-head Muon on the quickstart GRPO job, at the same compute.

The quickstart's SFT stage runs once (AdamW, as shipped); then its GRPO stage runs once
per optimizer from that same SFT checkpoint, with the same seed, tasks, batch and number
of steps: only `trainer.optimizer.type` differs. Muon runs at the quickstart's lr
(`adjust_lr: match_rms_adamw`) with gradient clipping off, its default. Reported per
optimizer: reward/mean per window of steps, and the trainer's and the whole GRPO step's
time (mean over steps 2.., since the first Muon step compiles DeepSpeed's Newton-Schulz
kernel; the first step is shown apart).

    .venv/bin/python bench/optimizers.py [--steps N] [--sft-steps N] [--window 25]
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
import yaml

QUICKSTART = Path(__file__).resolve().parent.parent / "pipelines" / "quickstart.yaml"


def run(data: dict, run_dir: Path) -> dict:
    from posttrain.config.files import validate_pipeline
    from posttrain.pipeline import run_pipeline

    return run_pipeline(validate_pipeline(data), run_dir)


def run_sft(base: dict, steps: int, run_dir: Path) -> str:
    """The quickstart's SFT stage alone; returns its final checkpoint folder."""
    sft = next(s for s in base["stages"] if s["type"] == "sft")
    state = run({**base, "name": "bench-optimizers-sft", "stages": [{**sft, "steps": steps}]}, run_dir)
    return state["stages"][sft["name"]]["checkpoint"]


def run_grpo(base: dict, kind: str, init_dir: str, steps: int, run_dir: Path) -> dict:
    """The quickstart's GRPO stage from `init_dir` with one optimizer; its metrics rows."""
    from posttrain.records.metrics import read_metrics

    grpo = next(s for s in base["stages"] if s["type"] == "rl")
    data = {
        **base,
        "name": f"bench-optimizers-{kind}",
        "model": {"name": init_dir},
        "trainer": {**base.get("trainer", {}), "optimizer": {"type": kind}},
        "stages": [{**grpo, "steps": steps}],
    }
    started = time.perf_counter()
    run(data, run_dir)
    return {"optimizer": kind, "wall_s": time.perf_counter() - started, "rows": read_metrics(run_dir, grpo["name"])}


def summarize(result: dict, window: int) -> dict:
    rows = result["rows"]
    rewards = [r["reward/mean"] for r in rows]
    train_s = [r["time/train_s"] for r in rows]
    step_s = [r["time/step_s"] for r in rows]
    return {
        "optimizer": result["optimizer"],
        "steps": len(rows),
        "wall_s": round(result["wall_s"], 1),
        "window": window,
        "reward_per_window": [
            round(float(np.mean(rewards[i : i + window])), 4) for i in range(0, len(rewards), window)
        ],
        "train_s_mean": float(np.mean(train_s[1:] or train_s)),
        "train_s_first": train_s[0],
        "step_s_mean": float(np.mean(step_s[1:] or step_s)),
        "step_s_first": step_s[0],
        "reward": rewards,
        "grad_norm": [r["grad/norm"] for r in rows],
    }


def print_table(summaries: list[dict], args) -> None:
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        f"workload: pipelines/quickstart.yaml, SFT {args.sft_steps} steps once (AdamW), then GRPO "
        f"{args.steps} steps per optimizer from that checkpoint",
        "",
        f"| optimizer | reward/mean per {args.window}-step window | trainer step s (mean, first) | "
        "GRPO step s (mean, first) | wall s |",
        "|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(
            f"| {s['optimizer']} | "
            + " ".join(f"{r:.2f}" for r in s["reward_per_window"])
            + f" | {s['train_s_mean']:.2f}, {s['train_s_first']:.1f} | {s['step_s_mean']:.2f}, "
            f"{s['step_s_first']:.1f} | {s['wall_s']:.0f} |"
        )
    print("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, help="GRPO steps per optimizer (default: the quickstart's)")
    parser.add_argument("--sft-steps", type=int, help="SFT steps (default: the quickstart's)")
    parser.add_argument("--window", type=int, default=25, help="steps per reward window")
    parser.add_argument("--optimizers", default="adamw,muon,muon_per_head")
    parser.add_argument("--run-dir", help="where the runs go (default: a new temp folder)")
    args = parser.parse_args()

    base = yaml.safe_load(QUICKSTART.read_text())
    stage_steps = {s["type"]: s["steps"] for s in base["stages"]}
    args.steps = args.steps or stage_steps["rl"]
    args.sft_steps = args.sft_steps or stage_steps["sft"]
    root = Path(args.run_dir or tempfile.mkdtemp(prefix="bench-optimizers-"))
    sft_dir = run_sft(base, args.sft_steps, root / "sft")
    results = []
    for kind in args.optimizers.split(","):
        results.append(run_grpo(base, kind, sft_dir, args.steps, root / kind))
        print(f"{kind}: {results[-1]['wall_s']:.0f}s", flush=True)
    summaries = [summarize(r, min(args.window, args.steps)) for r in results]
    print_table(summaries, args)
    out = root / "optimizers.json"
    out.write_text(json.dumps({"args": vars(args), "sft_checkpoint": sft_dir, "results": summaries}, indent=1))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
