"""The eval stage: score checkpoints on held-out tasks of every (domain, effort) cell.

A cell's prompts are its domain's held-out tasks with the effort stated in the system
prompt; a response is generated (greedy by default, multi-turn for agent tasks) on the
pipeline's engines with the checkpoint's weights loaded in place, capped like the
cell's expert was, and scored by the domain's verifier with the expert's final budget:

    score = mean over scored tasks of s in [0, 1]
            s = verifier score (reasoning-gym, code, agent: 0..1), GRM: (r + 1) / 2,
                0 for a response over the cell's token budget

Unscored samples (a judge that never answered) are left out and counted. An experts
stage's checkpoints are each scored on their own cell, any other checkpoint on all cells.
Every cell of a domain is scored on the same tasks (a paired design), none of whose
prompts occurs in the run's training data (posttrain/data/heldout.py: checked here, and
before the run starts). Each row has the score's standard error; paired differences
(each step of the effort ladder, expert against SFT, the student against its teacher) come
with theirs; so does each row's score per verifier of its tasks (`sources`), beside its
mean tokens and the share of responses over the budget.
Writes RUN_DIR/eval.json ({"rows": [...], "comparisons": [...]}) and prints the table;
every scored sample is saved in rollouts/EVAL/CHECKPOINT/CELL.jsonl.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from posttrain.config import EvalStage, ExpertsStage, PipelineConfig
from posttrain.config.jobs import job_stage
from posttrain.data.heldout import check_held_out, eval_sources, eval_tasks, experts_of
from posttrain.runtime.infra import Infra

EVAL_FILE = "eval.json"
ROLES = {"sft": "sft", "experts": "expert", "mopd": "student", "rl": "rl"}  # other types: their type name


def targets(
    stage: EvalStage, config: PipelineConfig, checkpoints: dict[str, Path], experts: ExpertsStage
) -> list[tuple[str, str, Path, list[tuple[str, str]]]]:
    """(checkpoint label, role, folder, cells to score) for every checkpoint named."""
    out = []
    for ref in stage.checkpoints:
        if ref == "model":
            out.append(("model", "base", checkpoints["model"], experts.cells()))
            continue
        made_by = config.stage(ref.split("/")[0])
        if isinstance(made_by, ExpertsStage) and "/" not in ref:
            for domain, effort in made_by.cells():
                label = f"{ref}/{domain}-{effort}"
                out.append((label, "expert", checkpoints[label], [(domain, effort)]))
        elif isinstance(made_by, ExpertsStage):
            domain, effort = ref.split("/")[1].split("-")
            out.append((ref, "expert", checkpoints[ref], [(domain, effort)]))
        else:
            out.append((ref, ROLES.get(made_by.type, made_by.type), checkpoints[ref], experts.cells()))
    return out


def cell_score(sample, result) -> float:
    if result.over_budget:
        return 0.0
    if result.source == "grm":
        return (result.score + 1.0) / 2.0
    return float(min(max(result.score, 0.0), 1.0))


class Evaluator:
    def __init__(self, stage: EvalStage, infra: Infra):
        self.stage, self.infra = stage, infra
        config = infra.config
        self.experts = experts_of(stage, config)
        self.sources = eval_sources(stage, config)
        drawn = eval_tasks(stage, config)
        self.tasks = check_held_out(stage, config, drawn)  # never a row on prompts the run trained on
        self.dropped = {d: len(drawn[d]) - len(self.tasks[d]) for d in drawn}
        for domain, tasks in self.tasks.items():
            if not tasks:
                raise ValueError(
                    f"eval stage {stage.name}: no {domain} task is left once those seen in training are out"
                )
        self.router = None
        self.per_task: dict[tuple[str, str, str], dict[str, float]] = {}
        self.version = 10_000_000  # engines serve checkpoints, not a training version

    def _run(self, label: str, domain: str, effort: str):
        """Generate and score one cell with the weights the engines serve now."""
        from posttrain.records.rollouts import RolloutLog
        from posttrain.stages.rl import generate_scored

        job = job_stage(self.experts, domain, effort)
        b = job.budget
        final = b.anneal.end if b.anneal else b.tokens
        fixed = job.budget.model_copy(update={"anneal": None, "tokens": final})
        update = {"group_size": 1, "temperature": self.stage.temperature, "top_p": 1.0, "budget": fixed}
        job = job.model_copy(update={"name": f"{self.stage.name}/{label}/{domain}-{effort}", **update})
        if self.router is None:  # one for every cell: sandbox workers and judge start once
            from posttrain.rewards.router import reward_router

            self.router = reward_router(self.experts.model_copy(update={"domains": self.sources}), self.infra.judge)
            self.router.start()
        drawn = generate_scored(job, self.infra, self.tasks[domain], self.router, self.version, fixed.tokens)
        samples, rewards = drawn.samples, drawn.rewards
        RolloutLog(self.infra.run_dir, job.name).write(0, samples, rewards, [g.budget for g in drawn.groups], effort)
        scored = [(s, r) for s, r in zip(samples, rewards) if r.ok]
        values = [cell_score(s, r) for s, r in scored]
        self.per_task[(label, domain, effort)] = {s.task.task_id: v for (s, _), v in zip(scored, values)}
        return {
            "domain": domain,
            "effort": effort,
            "score": float(np.mean(values)) if values else 0.0,
            "score_se": standard_error(values),
            "mean_tokens": float(np.mean([s.model_tokens for s in samples])) if samples else 0.0,
            "over_budget_rate": float(np.mean([r.over_budget for _, r in scored])) if scored else 0.0,
            "sources": by_source([s.task.verifier for s, _ in scored], values),
            "n": len(scored),
            "unscored": len(samples) - len(scored),
            "overlap": 0,
            "dropped_overlap": self.dropped[domain],
        }

    def run(self, checkpoints: dict[str, Path]) -> list[dict]:
        import ray

        rows = []
        pool = self.infra.pool
        trainer_push = pool.on_restart  # an engine replaced mid-eval must serve the checkpoint under eval

        def load(folder: Path, engines: list) -> list[int]:
            return ray.get([e.load_folder.remote(str(folder), self.version) for e in engines])

        try:
            for label, role, folder, cells in targets(self.stage, self.infra.config, checkpoints, self.experts):
                started = time.perf_counter()
                self.version += 1
                pool.on_restart = lambda engine, folder=folder: load(folder, [engine])
                pool.on_every_engine(lambda engines, folder=folder: load(folder, engines))
                for domain, effort in cells:
                    rows.append(
                        {"checkpoint": label, "role": role, "path": str(folder), **self._run(label, domain, effort)}
                    )
                print(
                    f"[{self.stage.name}] {label}: {len(cells)} cells in {time.perf_counter() - started:.0f}s",
                    flush=True,
                )
        finally:
            pool.on_restart = trainer_push
            if self.router is not None:
                self.router.close()
        return rows


def standard_error(values: list[float]) -> float:
    """Standard error of a mean: sample standard deviation / sqrt(n); 0 for fewer than two."""
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def by_source(sources: list[str], values: list[float]) -> dict[str, dict]:
    """A cell's score per verifier of its tasks (a mixture's parts: reasoning tasks and
    GRM-judged writing, HumanEval and generated code), each with its standard error."""
    out = {}
    for source in sorted(set(sources)):
        mine = [v for s, v in zip(sources, values) if s == source]
        out[source] = {"score": float(np.mean(mine)), "score_se": standard_error(mine), "n": len(mine)}
    return out


def paired(a: dict[str, float], b: dict[str, float]) -> tuple[float, float, int]:
    """Mean of a - b over the tasks both scored, its standard error, and how many."""
    common = sorted(a.keys() & b.keys())
    diffs = [a[t] - b[t] for t in common]
    return (float(np.mean(diffs)) if diffs else 0.0), standard_error(diffs), len(diffs)


def comparisons(rows: list[dict], per_task: dict[tuple[str, str, str], dict[str, float]]) -> list[dict]:
    """The differences the recipe is judged by, each paired on the same tasks: within a role,
    each step of the effort ladder (max against low, max against high, high against low);
    each expert against SFT and the student against each expert, on the expert's cell; the
    student against an RL stage's checkpoint (role `rl`) on every cell."""
    by_cell: dict[tuple[str, str, str], str] = {}  # (role, domain, effort) -> checkpoint
    for r in rows:
        by_cell.setdefault((r["role"], r["domain"], r["effort"]), r["checkpoint"])
    out = []

    def add(kind: str, a: tuple, b: tuple) -> None:
        ka, kb = (by_cell.get(a), a[1], a[2]), (by_cell.get(b), b[1], b[2])
        if ka[0] is None or kb[0] is None or ka not in per_task or kb not in per_task:
            return
        diff, se, n = paired(per_task[ka], per_task[kb])
        out.append(
            {
                "kind": kind,
                "a": f"{ka[0]}@{a[1]}-{a[2]}",
                "b": f"{kb[0]}@{b[1]}-{b[2]}",
                "domain": a[1],
                "effort": a[2],
                "diff": diff,
                "se": se,
                "n": n,
            }
        )

    domains = sorted({r["domain"] for r in rows})
    for role in ("expert", "student", "sft"):
        for d in domains:  # the effort ladder: low < high < max, each step and the whole
            add("max_minus_low", (role, d, "max"), (role, d, "low"))
            add("max_minus_high", (role, d, "max"), (role, d, "high"))
            add("high_minus_low", (role, d, "high"), (role, d, "low"))
    for r in rows:
        if r["role"] == "expert":
            add("expert_minus_sft", ("expert", r["domain"], r["effort"]), ("sft", r["domain"], r["effort"]))
            add("student_minus_teacher", ("student", r["domain"], r["effort"]), ("expert", r["domain"], r["effort"]))
        if r["role"] == "rl":  # an RL stage on the mixture: the recipe's simpler alternative
            add("student_minus_rl", ("student", r["domain"], r["effort"]), ("rl", r["domain"], r["effort"]))
    return out


def format_table(rows: list[dict]) -> str:
    """One row per checkpoint, one column per cell: `score±se/mean tokens`."""
    cells = sorted(
        {(r["domain"], r["effort"]) for r in rows},
        key=lambda c: (c[0], ["max", "high", "low"].index(c[1]) if c[1] in ("max", "high", "low") else 9),
    )
    names = list(dict.fromkeys(r["checkpoint"] for r in rows))
    width = max([len(n) for n in names] + [10])
    head = " " * width + " |" + "|".join(f"{d[:4]}-{e}".center(15) for d, e in cells)
    lines = [head, "-" * len(head)]
    by = {(r["checkpoint"], r["domain"], r["effort"]): r for r in rows}
    for name in names:
        parts = []
        for d, e in cells:
            r = by.get((name, d, e))
            text = f"{r['score']:.2f}±{r.get('score_se', 0.0):.2f}/{r['mean_tokens']:.0f}" if r else ""
            parts.append(text.center(15))
        lines.append(name.ljust(width) + " |" + "|".join(parts))
    return "\n".join(lines) + "\n(each cell: score in [0, 1] ± its standard error / mean response tokens)"


def format_comparisons(found: list[dict]) -> str:
    if not found:
        return ""
    lines = ["paired differences (same tasks; ** = more than two standard errors):"]
    for c in found:
        mark = "**" if abs(c["diff"]) > 2 * c["se"] and c["n"] > 1 else "  "
        lines.append(
            f"  {mark} {c['kind']:<22} {c['a']:<34} - {c['b']:<34} {c['diff']:+.3f} ± {c['se']:.3f} (n={c['n']})"
        )
    return "\n".join(lines)


def run_eval(stage: EvalStage, infra: Infra, checkpoints: dict[str, Path]) -> Path:
    from posttrain.records.metrics import write_json_atomic

    evaluator = Evaluator(stage, replace(infra, live_progress=False))
    rows = evaluator.run(checkpoints)
    found = comparisons(rows, evaluator.per_task)
    path = infra.run_dir / EVAL_FILE
    write_json_atomic(path, {"stage": stage.name, "rows": rows, "comparisons": found})
    print(format_table(rows), flush=True)
    print(format_comparisons(found), flush=True)
    return path
