"""MOPD against its simple alternatives, on a finished run of the whole recipe.

From the run's SFT checkpoint and nine experts, with the same eval (held-out tasks of
every (domain, effort) cell, greedy, the experts' budgets):

  mopd         the run's own MOPD student (multi-teacher on-policy distillation)
  weight-avg   the nine experts' weights averaged, parameter by parameter
  mixed-rl     one RL run from SFT on prompts of all nine cells, each with its effort line
               and budget, rewarded by the verifiers: the same steps, prompts per step and
               group size as the MOPD stage (the same samples generated and trained on);
               `--steps recipe`: as many steps as the recipe's RL took in all (every expert
               job's steps and MOPD's), the comparison on the same budget of steps

and, for reference, SFT and each expert on its own cell (the teachers).

    .venv/bin/python bench/mopd.py runs/quickstart     # after `make quickstart`
    .venv/bin/python bench/mopd.py runs/smollm2 --steps recipe   # read by bench/recipe_targets.py

Anchor: published multi-teacher on-policy distillation (e.g. MiMo-V2-Flash's MOPD) beats
weight merging and mixed-data RL at keeping each teacher's skill.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np


def average_weights(folders: list[Path], out: Path) -> Path:
    """The element-wise mean of the checkpoints' weights, saved as a model folder."""
    import shutil

    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    total = None
    for folder in folders:
        state = {}
        for path in sorted(folder.glob("*.safetensors")):
            state.update(load_file(str(path)))
        total = (
            {k: v.double() for k, v in state.items()}
            if total is None
            else {k: total[k] + state[k].double() for k in total}
        )
    avg = {k: (v / len(folders)).to(state[k].dtype).contiguous() for k, v in total.items()}
    save_file(avg, str(out / "model.safetensors"), metadata={"format": "pt"})
    for f in folders[0].iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.suffix in (".json", ".txt", ".model", ".jinja"):
            shutil.copy(f, out / f.name)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path, help="a finished run with experts, mopd and eval stages")
    parser.add_argument("--out", type=Path, help="where the bench's run folder goes (default: RUN_DIR/bench-mopd)")
    parser.add_argument("--table-only", action="store_true", help="print the tables of an earlier run's bench.json")
    parser.add_argument(
        "--steps",
        default="mopd",
        help="mixed-rl's steps: `mopd` (the MOPD stage's), `recipe` (every expert job's and MOPD's), or a number",
    )
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from posttrain.config.files import load_pipeline
    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import start_ray
    from posttrain.runtime.slots import open_first_slot
    from posttrain.stages.evaluate import Evaluator, format_table
    from posttrain.stages.mopd import CellSampler, cell_tasks, with_experts
    from posttrain.stages.rl import RLRun, train_and_save

    run = args.run_dir
    config = load_pipeline(run / "config.resolved.yaml")
    if args.table_only:
        saved = json.loads(((args.out or run / "bench-mopd") / "bench.json").read_text())
        experts = next(s for s in config.stages if s.type == "experts")
        mopd = next(s for s in config.stages if s.type == "mopd")
        print(format_table(saved["rows"]))
        rl_steps = saved.get("mixed_rl_steps", mopd.steps)  # a bench.json of before --steps: MOPD's
        print(summary(saved["rows"], experts, mopd, saved["mixed_rl_seconds"], float("nan"), run, rl_steps))
        return 0
    state = json.loads((run / "run_state.json").read_text())
    experts = next(s for s in config.stages if s.type == "experts")
    mopd = next(s for s in config.stages if s.type == "mopd")
    evaluation = next(s for s in config.stages if s.type == "eval")
    sft_dir = Path(state["stages"][mopd.init_from or "sft"]["checkpoint"])
    expert_dirs = {job: Path(p) for job, p in state["stages"][experts.name]["checkpoints"].items()}
    out = args.out or run / "bench-mopd"
    out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    avg_dir = average_weights(list(expert_dirs.values()), out / "weight-avg")

    start_ray(config, verbose=False)
    slot, infra = open_first_slot(
        config, Path(state["model"]), out, MetricsLog(out), tokenizer=AutoTokenizer.from_pretrained(sft_dir)
    )
    # mixed RL: the MOPD stage's prompts (all nine cells, round-robin, each cell's effort line,
    # budget and cap) and compute, with GRPO on the verifiers' rewards instead of the teachers
    stage, limits = with_experts(mopd, config)
    steps = mixed_steps(args.steps, experts, mopd)
    stage = stage.model_copy(update={"name": "mixed-rl", "alpha": 1.0, "steps": steps})
    mixed = RLRun(stage, infra, sampler=CellSampler(cell_tasks(stage, limits), config.seed))
    rl_started = time.perf_counter()
    mixed_dir = train_and_save(mixed, sft_dir, None)
    rl_seconds = time.perf_counter() - rl_started

    checkpoints = {
        "sft": sft_dir,
        "mopd": Path(state["stages"][mopd.name]["checkpoint"]),
        "weight-avg": avg_dir,
        "mixed-rl": Path(mixed_dir),
        **{f"{experts.name}/{j}": p for j, p in expert_dirs.items()},
    }
    evaluation = evaluation.model_copy(update={"checkpoints": list(checkpoints)})
    evaluator = Evaluator(evaluation, infra)
    rows = []
    import ray

    for label, folder in checkpoints.items():
        evaluator.version += 1
        ray.get([e.load_folder.remote(str(folder), evaluator.version) for e in infra.pool.engines])
        cells = [tuple(label.split("/")[1].split("-"))] if label.startswith(f"{experts.name}/") else experts.cells()
        role = "expert" if len(cells) == 1 else label
        for domain, effort in cells:
            rows.append({"checkpoint": label, "role": role, **evaluator._run(label, domain, effort)})
    evaluator.router.close()
    slot.close()
    (out / "bench.json").write_text(
        json.dumps({"rows": rows, "mixed_rl_seconds": rl_seconds, "mixed_rl_steps": steps}, indent=1)
    )
    print(format_table(rows))
    print(summary(rows, experts, mopd, rl_seconds, time.perf_counter() - started, run, steps))
    return 0


def mixed_steps(asked: str, experts, mopd) -> int:
    """The mixed run's steps: MOPD's, the recipe's RL steps in all, or a number."""
    from posttrain.config.jobs import job_stage

    if asked == "mopd":
        return mopd.steps
    if asked == "recipe":
        return sum(job_stage(experts, d, e).steps for d, e in experts.cells()) + mopd.steps
    if not asked.isdigit() or int(asked) < 1:
        raise SystemExit(f"--steps {asked!r}: give mopd, recipe or a positive number of steps")
    return int(asked)


def summary(rows, experts, mopd, rl_seconds, wall, run, rl_steps: int) -> str:
    teacher = {(r["domain"], r["effort"]): r["score"] for r in rows if r["role"] == "expert"}
    teacher_tokens = {(r["domain"], r["effort"]): r["mean_tokens"] for r in rows if r["role"] == "expert"}
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; run: {run}",
        f"compute: mopd {mopd.steps} steps, mixed-rl {rl_steps} steps, each x {mopd.prompts_per_step} prompts x "
        f"{mopd.group_size} samples (mixed-rl took {rl_seconds:.0f}s); bench wall {wall:.0f}s",
        "",
        "| method | mean score (9 cells) | cells at >= 90% of their teacher | mean score / teacher's |"
        " mean tokens low / high / max | mean abs(tokens - teacher's) |",
        "|---|---|---|---|---|---|",
    ]
    for method in ("mopd", "weight-avg", "mixed-rl", "sft"):
        mine = [r for r in rows if r["checkpoint"] == method]
        if not mine:
            continue
        ratio = [
            r["score"] / teacher[(r["domain"], r["effort"])] for r in mine if teacher.get((r["domain"], r["effort"]))
        ]
        ok = sum(r["score"] >= 0.9 * teacher.get((r["domain"], r["effort"]), 0.0) for r in mine)
        tokens = {e: np.mean([r["mean_tokens"] for r in mine if r["effort"] == e]) for e in ("low", "high", "max")}
        lines.append(
            f"| {method} | {np.mean([r['score'] for r in mine]):.3f} | {ok}/{len(mine)} | "
            f"{np.mean(ratio) if ratio else float('nan'):.2f} | "
            f"{tokens['low']:.1f} / {tokens['high']:.1f} / {tokens['max']:.1f} | "
            f"{np.mean([abs(r['mean_tokens'] - teacher_tokens[(r['domain'], r['effort'])]) for r in mine]):.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
