"""The MOPD stage: the RL loop (same engines, queue, trainer, loss and off-policy
correction) with the teachers' dense per-token advantage in place of GRPO's.

Each prompt belongs to a (domain, effort) cell: its domain's task, with the effort
stated in the system prompt and the effort's token limit; its `cell` is its teacher id.
Cells are drawn round-robin, so every batch of at least nine prompts holds all nine.
Between rollout and training, the teacher pool scores every finished trajectory with its
own cell's teacher; with `distill_topk` the teacher also returns its k most likely next
tokens at each position, and the loss adds the KL from them to the student. Every
checkpoint carries `mopd_manifest.json`: the teachers (id, checkpoint path, sha256 of the
weights) it was distilled from.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from posttrain.config import MOPDStage
from posttrain.data.chat import with_effort
from posttrain.data.tasks import TaskSampler, load_tasks
from posttrain.mopd.advantage import mopd_advantages, reverse_kl
from posttrain.mopd.teachers import TeacherPool, same_tokenizer
from posttrain.rollout.queue import Group
from posttrain.runtime.infra import Infra
from posttrain.stages.rl import RLRun, train_and_save
from posttrain.types import Task, TeacherTopK

MANIFEST_FILE = "mopd_manifest.json"


def with_experts(stage: MOPDStage, config) -> tuple[MOPDStage, dict[str, dict]]:
    """A stage with `experts: NAME` gets that experts stage's domains and its nine jobs as
    teachers; each cell keeps its expert's final budget (over it, the outcome reward is
    -1) and is capped at that budget plus the margin (unless `effort_max_tokens` sets a
    cap). Returns the stage and {cell: {"budget": tokens, "max_tokens": cap}}."""
    if stage.experts is None:
        return stage, {}
    from posttrain.config import TeacherSpec
    from posttrain.config.jobs import job_stage

    experts = config.stage(stage.experts)
    teachers = [TeacherSpec(domain=d, effort=e, checkpoint=f"stage:{experts.name}/{d}-{e}") for d, e in experts.cells()]
    limits = {}
    for d, e in experts.cells():
        b = job_stage(experts, d, e).budget
        final = b.anneal.end if b.anneal else b.tokens
        if final is not None:
            limits[f"{d}-{e}"] = {
                "budget": final,
                "max_tokens": stage.effort_max_tokens.get(e, math.ceil(final * (1 + b.margin))),
            }
    return stage.model_copy(update={"domains": dict(experts.domains), "teachers": teachers}), limits


def cell_tasks(stage: MOPDStage, limits: dict[str, dict] | None = None) -> list[tuple[str, list[Task]]]:
    """(teacher id, its prompts) for every cell; `limits`: budget and token cap per cell."""
    by_domain = {name: load_tasks(source) for name, source in stage.domains.items()}
    cells = []
    for teacher in stage.teachers:
        cell = (limits or {}).get(teacher.teacher_id, {})
        limit = cell.get("max_tokens") or stage.effort_max_tokens.get(teacher.effort, stage.max_tokens)
        budget = {"budget": cell["budget"]} if "budget" in cell else {}
        cells.append(
            (
                teacher.teacher_id,
                [
                    Task(
                        task_id=f"{teacher.teacher_id}/{t.task_id}",
                        family=t.family,
                        answer=t.answer,
                        messages=with_effort(t.messages, teacher.effort),
                        verifier=t.verifier,
                        entry={
                            **t.entry,
                            "cell": teacher.teacher_id,
                            "domain": teacher.domain,
                            "effort": teacher.effort,
                            "max_tokens": min(limit, stage.max_tokens),
                            **budget,
                        },
                    )
                    for t in by_domain[teacher.domain]
                ],
            )
        )
    return cells


class CellSampler:
    """Round-robin over cells, each drawing from its own seeded `TaskSampler`."""

    def __init__(self, cells: list[tuple[str, list[Task]]], seed: int):
        self.samplers = [TaskSampler(tasks, seed + 7919 * i) for i, (_, tasks) in enumerate(cells)]
        self.tasks = [t for _, tasks in cells for t in tasks]
        self.cursor = 0

    def draw(self, count: int) -> list[Task]:
        out = []
        for _ in range(count):
            out += self.samplers[self.cursor % len(self.samplers)].draw(1)
            self.cursor += 1
        return out

    @property
    def position(self) -> dict:
        return {"cursor": self.cursor, "positions": [s.position for s in self.samplers]}

    @position.setter
    def position(self, value: dict) -> None:
        self.cursor = value["cursor"]
        for sampler, position in zip(self.samplers, value["positions"]):
            sampler.position = position


class MOPDRun(RLRun):
    def __init__(self, stage: MOPDStage, infra: Infra, teachers: TeacherPool, limits: dict[str, dict] | None = None):
        super().__init__(stage, infra, sampler=CellSampler(cell_tasks(stage, limits), infra.config.seed))
        self.teachers = teachers
        self.uses_outcome = stage.alpha > 0  # alpha = 0: the verifiers' rewards are logged, not trained on
        self.logp_teacher: dict[str, list[float]] = {}
        self.topk_teacher: dict[str, TeacherTopK] = {}
        self.manifest = {
            "stage": stage.name,
            "alpha": stage.alpha,
            "teachers": [
                {**entry, "domain": t.domain, "effort": t.effort}
                for t, entry in zip(stage.teachers, teachers.manifest())
            ],
        }

    def prepare(self, groups: list[Group]) -> dict:
        """Every trajectory's tokens scored by its own cell's teacher (with `distill_topk`,
        also the teacher's top-k next tokens at each response position)."""
        started = time.perf_counter()
        by_teacher: dict[str, list] = {}
        for group in groups:
            by_teacher.setdefault(group.task.entry["cell"], []).extend(group.trajectories)
        self.logp_teacher, self.topk_teacher = {}, {}
        metrics = {}
        if self.stage.distill_topk:
            requests = {
                tid: [(list(t.prompt_ids) + t.response_ids, len(t.response_ids)) for t in trajs]
                for tid, trajs in by_teacher.items()
            }
            scored = {}
            for tid, rows in self.teachers.topk(requests, self.stage.distill_topk).items():
                scored[tid] = [logp for logp, _, _ in rows]
                for traj, (_, ids, values) in zip(by_teacher[tid], rows):
                    self.topk_teacher[traj.traj_id] = TeacherTopK(ids=ids, logp=values)
            masses = [float(np.exp(top.logp).sum(-1).mean()) for top in self.topk_teacher.values() if len(top.logp)]
            metrics["mopd/topk_mass"] = float(np.mean(masses)) if masses else 0.0
        else:
            scored = self.teachers.logprobs(
                {tid: [list(t.prompt_ids) + t.response_ids for t in trajs] for tid, trajs in by_teacher.items()}
            )
        for tid, trajs in by_teacher.items():
            total = count = 0
            for traj, logp in zip(trajs, scored[tid]):
                self.logp_teacher[traj.traj_id] = logp[len(logp) - len(traj.response_ids) :]
                kl, n = reverse_kl(self.logp_teacher[traj.traj_id], traj.logp_behaviour, traj.action_mask)
                total, count = total + kl, count + n
            metrics[f"mopd/reverse_kl/{tid}"] = total / max(count, 1)
        kls = [v for v in metrics.values()]
        metrics["mopd/reverse_kl"] = sum(kls) / len(kls) if kls else 0.0
        metrics["time/teachers_s"] = time.perf_counter() - started
        return {**metrics, **self.teachers.metrics()}

    def teacher_of(self, traj) -> TeacherTopK | None:
        return self.topk_teacher.get(traj.traj_id)

    def token_advantages(self, group: Group, trajs: list, advs: list[float]) -> list[list[float]]:
        return [
            mopd_advantages(self.logp_teacher[t.traj_id], t.logp_behaviour, t.action_mask, a, self.stage.alpha)
            for t, a in zip(trajs, advs)
        ]

    def extra_files(self) -> dict[str, str]:
        return {MANIFEST_FILE: json.dumps(self.manifest, indent=1)}


def teacher_checkpoints(stage: MOPDStage, student_dir: Path, stages: dict[str, Path] | None = None) -> dict[str, str]:
    """Each teacher's folder (`stage:NAME` is an earlier stage's final checkpoint), checked:
    it exists, and its token ids mean what the student's do."""
    out = {}
    for i, teacher in enumerate(stage.teachers):
        ref = teacher.checkpoint.removeprefix("stage:")
        folder = (
            (stages or {}).get(ref)
            if teacher.checkpoint.startswith("stage:")
            else Path(teacher.checkpoint).expanduser()
        )
        if folder is None:
            raise ValueError(f"stage {stage.name}: teachers[{i}].checkpoint: stage {ref!r} has no checkpoint yet")
        if not (folder / "config.json").is_file():
            raise ValueError(f"stage {stage.name}: teachers[{i}].checkpoint: no model folder at {folder}")
        if not same_tokenizer(student_dir, folder):
            raise ValueError(
                f"stage {stage.name}: teachers[{i}] ({teacher.teacher_id}) has a different tokenizer "
                f"or vocabulary than the student ({student_dir}): its logprobs would not be comparable"
            )
        out[teacher.teacher_id] = str(folder)
    return out


def run_mopd(
    stage: MOPDStage,
    init_dir: Path,
    infra: Infra,
    resume_dir: Path | None = None,
    stages: dict[str, Path] | None = None,
) -> Path:
    """`stages`: the final checkpoints of the pipeline's earlier stages, by name (an experts
    stage's jobs as `EXPERTS/DOMAIN-EFFORT`)."""
    stage, limits = with_experts(stage, infra.config)
    pool = TeacherPool(
        teacher_checkpoints(stage, init_dir, stages),
        stage.teacher_pool,
        infra.config.model.dtype,
        infra.config.rollout,
        max_logprobs=max(20, stage.distill_topk),
    )
    try:
        return train_and_save(MOPDRun(stage, infra, pool, limits), init_dir, resume_dir)
    finally:
        pool.close()
