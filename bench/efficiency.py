"""posttrain against the machine's limits: the cores' measured matmul peak (fp32, bf16)
and memory bandwidth, against what an RL run of SmolLM2-135M-Instruct achieves (the
trainer's FLOP/s, the engine's tokens/s, the weight sync) and how idle the engine and
the trainer are per step, with generation overlapped with training and without.

    PYTHONPATH=. .venv/bin/python bench/efficiency.py [--steps 6] [--dtype bfloat16]

The RL runs use bench/time_to_accuracy.py's settings (same task, batch and lengths); the
first step of each run is warm-up and left out. Trainer FLOPs count 6 N per position the
trainer computed (forward 2 N, backward 4 N; N = parameters, the tied output head included,
since it multiplies every position; a group's prompt once, and no group of zero advantage,
as the trainer computes them), attention's own FLOPs left out (sequences under 100 tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def matmul_peak(dtype: str, threads: int, size: int = 2048, seconds: float = 3.0) -> float:
    """Best GFLOP/s of a square matmul over a few seconds."""
    import torch

    torch.set_num_threads(threads)
    dt = getattr(torch, dtype)
    a, b = torch.randn(size, size, dtype=dt), torch.randn(size, size, dtype=dt)
    a @ b
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        started = time.perf_counter()
        a @ b
        best = max(best, 2 * size**3 / (time.perf_counter() - started) / 1e9)
    return best


def memcpy_bandwidth(mib: int = 512, tries: int = 5) -> float:
    """Best GB/s of copying one buffer into another (bytes read + written)."""
    import torch

    torch.set_num_threads(1)
    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    best = 0.0
    for _ in range(tries):
        started = time.perf_counter()
        dst.copy_(src)
        best = max(best, 2 * src.nbytes / (time.perf_counter() - started) / 1e9)
    return best


def rl_rows(overlap: str, dtype: str, steps: int) -> tuple[list[dict], list[dict], dict]:
    """A short posttrain RL run with time_to_accuracy's settings: its metrics rows, saved
    samples and facts (parameters, weight bytes)."""
    import ray
    from transformers import AutoTokenizer

    from bench.tta_sides import FAMILY, family_source, posttrain_config, split_tasks
    from posttrain.config import ModelConfig
    from posttrain.data.tasks import TaskSampler
    from posttrain.models import resolve_model
    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import Infra, engine_pool, start_ray
    from posttrain.stages.rl import RLRun
    from posttrain.train.group import TrainerGroup

    args = argparse.Namespace(
        overlap=overlap, dtype=dtype, lr=1e-5, prompts=8, group=8, max_tokens=32, max_model_len=160
    )
    model_dir = resolve_model(ModelConfig(name="smollm2-135m-instruct"))
    config = posttrain_config(args, model_dir)
    config = config.model_copy(update={"stages": [config.stages[0].model_copy(update={"steps": steps})]})
    start_ray(config, verbose=False)
    import tempfile

    run_dir = Path(tempfile.mkdtemp(prefix="efficiency-"))
    pool, trainers = engine_pool(config, model_dir), TrainerGroup(config.trainer, config.seed)
    infra = Infra(
        config,
        run_dir,
        trainers,
        pool,
        MetricsLog(run_dir),
        AutoTokenizer.from_pretrained(model_dir),
        live_progress=False,
    )
    trainers.load(str(model_dir), config.model.dtype, args.lr, 0)
    trainers.sync_weights(pool.engines)
    train_tasks, _ = split_tasks(family_source(*FAMILY), 200)
    RLRun(config.stages[0], infra, sampler=TaskSampler(train_tasks, seed=0)).run()
    infra.metrics.close()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in (run_dir / "rollouts" / "grpo.jsonl").read_text().splitlines()]
    weights = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    trainers.shutdown()
    pool.shutdown()
    ray.shutdown()
    return rows, samples, {"weight_bytes_fp32": weights, "params": weights / 4, "run_dir": str(run_dir)}


def saved_run(run_dir: str) -> tuple[list[dict], list[dict], dict]:
    """The rows, samples and facts of a run folder this script left (its path is printed)."""
    from posttrain.config import ModelConfig
    from posttrain.models import resolve_model

    run = Path(run_dir)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in (run / "rollouts" / "grpo.jsonl").read_text().splitlines()]
    model_dir = resolve_model(ModelConfig(name="smollm2-135m-instruct"))
    weights = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    return rows, samples, {"weight_bytes_fp32": weights, "params": weights / 4, "run_dir": run_dir}


def computed_tokens(samples: list[dict]) -> dict[int, int]:
    """Positions the trainer computed per step: of each group (`trainer.share_prompts`) the
    prompt once and every response, for the groups whose rewards differ (the others have
    zero advantage, left out by `trainer.skip_zero_gradient`; one sample when all are)."""
    groups: dict[tuple, list[dict]] = {}
    for s in samples:
        groups.setdefault((s["step"], s["group"]), []).append(s)
    computed: dict[int, int] = {}
    first: dict[int, int] = {}  # the batch's first sample: the one computed when every group is zero
    for (step, _), members in sorted(groups.items()):
        first.setdefault(step, members[0]["prompt_tokens"] + members[0]["response_tokens"])
        if len({m["reward"] for m in members}) > 1:
            tokens = members[0]["prompt_tokens"] + sum(m["response_tokens"] for m in members)
            computed[step] = computed.get(step, 0) + tokens
    return {step: computed.get(step, size) for step, size in first.items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    parser.add_argument("--runs", nargs=2, metavar=("OFF_DIR", "ON_DIR"), help="tabulate run folders left before")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    load = [os.getloadavg()[0]]
    peak = {(dt, t): matmul_peak(dt, t) for dt in ("float32", "bfloat16") for t in (1, cores)}
    bw = memcpy_bandwidth()
    print(f"matmul peak GFLOP/s: {peak}; memcpy {bw:.1f} GB/s", flush=True)
    if args.runs:
        runs = {mode: saved_run(d) for mode, d in zip(("off", "on"), args.runs)}
    else:
        runs = {mode: rl_rows(mode, args.dtype, args.steps) for mode in ("off", "on")}
    for mode, (_, _, info) in runs.items():
        print(f"overlap {mode}: run folder {info['run_dir']}", flush=True)
    load.append(os.getloadavg()[0])

    bytes_per = 2 if args.dtype == "bfloat16" else 4
    print(f"\nload average at start / end: {load[0]:.1f} / {load[1]:.1f}; {cores} cores; dtype {args.dtype}")
    print("| what | overlap off | overlap on | limit |")
    print("|---|---|---|---|")
    facts = {}
    for mode, (rows, samples, info) in runs.items():
        timed = rows[1:]  # step 1 is warm-up
        n = info["params"]
        by_step = computed_tokens(samples)
        flops = [6 * n * by_step.get(r["step"], 0) / r["time/train_s"] / 1e9 for r in timed]
        # every generated sample is trained by the run's end (lambda 1): its tokens over the engines' busy time
        engine_tok = sum(s["response_tokens"] for s in samples) / sum(r["engine/busy_s"] for r in rows)
        threads = 1 if mode == "on" else cores
        facts[mode] = {
            "trainer_gflops": statistics.median(flops),
            "trainer_threads": threads,
            "engine_tok_s": engine_tok,
            "sync_s": statistics.median(r["sync/seconds"] for r in timed),
            "engine_idle": statistics.median(r["engine/idle_frac"] for r in timed),
            "trainer_idle": statistics.median(r["trainer/idle_frac"] for r in timed),
            "step_s": statistics.median(r["time/step_s"] for r in timed),
            "train_s": statistics.median(r["time/train_s"] for r in timed),
            "generate_s": statistics.median(r["time/generate_s"] for r in timed),
            "params": n,
        }
    off, on = facts["off"], facts["on"]
    n = off["params"]
    # decode reads every weight once per step of the batch: tokens/s <= batch x bandwidth / weight bytes
    batch = 8 * 8
    print(
        f"| trainer GFLOP/s (6N per token) | {off['trainer_gflops']:.0f} ({off['trainer_threads']} threads) | "
        f"{on['trainer_gflops']:.0f} (1 thread) | {args.dtype} matmul peak: "
        f"{peak[(args.dtype, cores)]:.0f} ({cores} threads), {peak[(args.dtype, 1)]:.0f} (1 thread) |"
    )
    print(
        f"| engine tokens/s (while busy) | {off['engine_tok_s']:.0f} | {on['engine_tok_s']:.0f} | compute "
        f"(1 thread, 2N per token): {peak[(args.dtype, 1)] * 1e9 / (2 * n):.0f}; bandwidth (batch {batch}, "
        f"weights read once per decode step): {batch * bw * 1e9 / 2 / (n * bytes_per):.0f} |"
    )
    print(
        f"| weight sync s | {off['sync_s']:.2f} | {on['sync_s']:.2f} | one memcpy of the weights "
        f"({n * bytes_per / 1e6:.0f} MB): {n * bytes_per * 2 / (bw * 1e9):.3f} |"
    )
    for key, label in (
        ("engine_idle", "engine idle fraction"),
        ("trainer_idle", "trainer idle fraction"),
        ("step_s", "step s (median)"),
        ("generate_s", "generate s (driver waits)"),
        ("train_s", "train s"),
    ):
        print(f"| {label} | {off[key]:.2f} | {on[key]:.2f} | |")
    out = Path(__file__).parent / "efficiency.json"
    out.write_text(json.dumps({"peak": {f"{k[0]}x{k[1]}": v for k, v in peak.items()}, "memcpy": bw, **facts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
