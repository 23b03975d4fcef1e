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
Writes RUN_DIR/eval.json ({"rows": [...]}) and prints the table; every scored sample is
saved in rollouts/EVAL/CHECKPOINT/CELL.jsonl.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from posttrain.config import EvalStage, ExpertsStage, PipelineConfig
from posttrain.config.jobs import job_stage
from posttrain.runtime.infra import Infra
from posttrain.types import SamplingSettings

EVAL_FILE = "eval.json"
ROLES = {"sft": "sft", "experts": "expert", "mopd": "student", "rl": "rl"}


def held_out(source, offset: int):
    """The same task source with every generator seed moved by `offset`."""
    if source.type == "mixture":
        return source.model_copy(
            update={"seed": source.seed + offset, "sources": [held_out(s, offset) for s in source.sources]}
        )
    return source.model_copy(update={"seed": source.seed + offset}) if "seed" in type(source).model_fields else source


def experts_of(stage: EvalStage, config: PipelineConfig) -> ExpertsStage:
    if stage.experts:
        return config.stage(stage.experts)
    return next(s for s in config.stages if s.type == "experts")


def targets(
    stage: EvalStage, config: PipelineConfig, checkpoints: dict[str, Path], experts: ExpertsStage
) -> list[tuple[str, str, Path, list[tuple[str, str]]]]:
    """(checkpoint label, role, folder, cells to score) for every checkpoint named."""
    out = []
    for ref in stage.checkpoints:
        if ref == "model":
            out.append(("model", "base", checkpoints["model"], experts.cells()))
            continue
        kind = config.stage(ref.split("/")[0]).type
        if kind == "experts" and "/" not in ref:
            for domain, effort in config.stage(ref).cells():
                label = f"{ref}/{domain}-{effort}"
                out.append((label, "expert", checkpoints[label], [(domain, effort)]))
        elif kind == "experts":
            domain, effort = ref.split("/")[1].split("-")
            out.append((ref, "expert", checkpoints[ref], [(domain, effort)]))
        else:
            out.append((ref, ROLES.get(kind, kind), checkpoints[ref], experts.cells()))
    return out


def cell_score(sample, result) -> float:
    if result.over_budget:
        return 0.0
    if result.source == "grm":
        return (result.score + 1.0) / 2.0
    return float(min(max(result.score, 0.0), 1.0))


class Evaluator:
    def __init__(self, stage: EvalStage, infra: Infra):
        from posttrain.data.tasks import TaskSampler, load_tasks

        self.stage, self.infra = stage, infra
        config = infra.config
        self.experts = experts_of(stage, config)
        sources = stage.domains or {d: held_out(s, stage.seed_offset) for d, s in self.experts.domains.items()}
        self.sources, self.tasks = sources, {}
        for domain, source in sources.items():
            tasks = load_tasks(source)
            self.tasks[domain] = TaskSampler(tasks, seed=config.seed + 17).draw(min(stage.tasks_per_cell, len(tasks)))
        self.router = None
        self.version = 10_000_000  # engines serve checkpoints, not a training version

    def _run(self, label: str, domain: str, effort: str):
        """Generate and score one cell with the weights the engines serve now."""
        from posttrain.stages.rl import RLRun

        job = job_stage(self.experts, domain, effort)
        n = len(self.tasks[domain])
        b = job.budget
        final = b.anneal.end if b.anneal else b.tokens
        fixed = job.budget.model_copy(update={"anneal": None, "tokens": final})
        job = job.model_copy(
            update={
                "name": f"{self.stage.name}/{label}/{domain}-{effort}",
                "group_size": 1,
                "prompts_per_step": n,
                "temperature": self.stage.temperature,
                "budget": fixed,
            }
        )
        if self.router is None:  # one for every cell: sandbox workers and judge start once
            from posttrain.rewards.router import reward_router

            self.router = reward_router(self.experts.model_copy(update={"domains": self.sources}), self.infra.judge)
            self.router.start()
        run = RLRun(job, self.infra, sampler=_Fixed(self.tasks[domain]), verifier=self.router)
        run.sampling = SamplingSettings(temperature=self.stage.temperature, top_p=1.0)
        trajs = run.fill(self.version, fixed.tokens)
        while trajs:
            self.infra.pool.run_iteration(trajs, run.sampling, 1.0, self.version)
            run.agents.advance(run.queue, trajs, self.version)
            trajs = run.queue.unfinished(self.version, n)
        groups = run.queue.pop_complete(self.version)
        samples = run.samples(groups)
        rewards = run.score(groups, samples)
        run.rollouts.write(0, samples, rewards, [g.budget for g in groups], effort)
        scored = [(s, r) for s, r in zip(samples, rewards) if r.ok]
        return {
            "domain": domain,
            "effort": effort,
            "score": float(np.mean([cell_score(s, r) for s, r in scored])) if scored else 0.0,
            "mean_tokens": float(np.mean([s.model_tokens for s in samples])) if samples else 0.0,
            "n": len(scored),
            "unscored": len(samples) - len(scored),
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


class _Fixed:
    """A sampler that hands out a fixed list of tasks once, in order."""

    def __init__(self, tasks):
        self.tasks, self.position = list(tasks), 0

    def draw(self, count: int):
        out = [self.tasks[(self.position + i) % len(self.tasks)] for i in range(count)]
        self.position += count
        return out


def format_table(rows: list[dict]) -> str:
    """One row per checkpoint, one column per cell: `score / mean tokens`."""
    cells = sorted(
        {(r["domain"], r["effort"]) for r in rows},
        key=lambda c: (c[0], ["max", "high", "low"].index(c[1]) if c[1] in ("max", "high", "low") else 9),
    )
    names = list(dict.fromkeys(r["checkpoint"] for r in rows))
    width = max([len(n) for n in names] + [10])
    head = " " * width + " |" + "|".join(f"{d[:4]}-{e}".center(10) for d, e in cells)
    lines = [head, "-" * len(head)]
    by = {(r["checkpoint"], r["domain"], r["effort"]): r for r in rows}
    for name in names:
        parts = []
        for d, e in cells:
            r = by.get((name, d, e))
            parts.append((f"{r['score']:.2f}/{r['mean_tokens']:.0f}" if r else "").center(10))
        lines.append(name.ljust(width) + " |" + "|".join(parts))
    return "\n".join(lines) + "\n(each cell: score in [0, 1] / mean response tokens)"


def run_eval(stage: EvalStage, infra: Infra, checkpoints: dict[str, Path]) -> Path:
    from posttrain.records.metrics import write_json_atomic

    evaluator = Evaluator(stage, replace(infra, live_progress=False))
    rows = evaluator.run(checkpoints)
    path = infra.run_dir / EVAL_FILE
    write_json_atomic(path, {"stage": stage.name, "rows": rows})
    print(format_table(rows), flush=True)
    return path
