"""The RL job of each (domain, effort) cell of an experts stage: pure functions of the
configuration, shared by the experts stage, the dry-run, eval and MOPD.

Per domain the efforts form a chain: `max` starts from the stage's init checkpoint,
`high` from `max`'s final checkpoint and `low` from `high`'s, each annealing its budget
down from the previous effort's (docs/recipe.md, token-budget effort annealing).
"""

from __future__ import annotations

from dataclasses import dataclass

from posttrain.config.algo import AnnealConfig, BudgetConfig
from posttrain.config.recipe_stages import EFFORT_ORDER, ExpertsStage
from posttrain.config.stages import RLStage


@dataclass
class Job:
    name: str  # DOMAIN-EFFORT
    domain: str
    effort: str
    after: str | None  # the job whose final checkpoint this one starts from
    stage: RLStage


def job_stage(stage: ExpertsStage, domain: str, effort: str) -> RLStage:
    """The RL stage a job runs: the experts stage's settings, its domain's tasks and its
    effort's budget (annealed from the previous effort's when `anneal` is set)."""
    spec = stage.efforts[effort]
    earlier = [e for e in EFFORT_ORDER[: EFFORT_ORDER.index(effort)] if e in stage.efforts]
    margin = stage.budget.margin
    if spec.multiple is not None:
        budget = BudgetConfig(effort=effort, multiple=spec.multiple, margin=margin)
    else:
        tokens = spec.tokens_for(domain)
        previous = stage.efforts[earlier[-1]] if earlier else None
        start = previous.tokens_for(domain) if previous is not None and previous.tokens is not None else None
        if stage.anneal is not None and start is not None and start != tokens:
            a = stage.anneal
            budget = BudgetConfig(
                effort=effort,
                margin=margin,
                anneal=AnnealConfig(start=start, end=tokens, steps=a.steps, kind=a.kind, every=a.every),
            )
        else:
            budget = BudgetConfig(effort=effort, tokens=tokens, margin=margin)
    shared = {
        k: getattr(stage, k) for k in RLStage.model_fields if k not in ("type", "name", "tasks", "budget", "steps")
    }
    job = RLStage.model_validate(
        {
            **shared,
            "type": "rl",
            "name": "job",
            "tasks": stage.domains[domain],
            "budget": budget,
            "steps": spec.steps or stage.steps,
        }
    )
    return job.model_copy(update={"name": f"{stage.name}/{domain}-{effort}", "init_from": None})


def expert_jobs(stage: ExpertsStage) -> dict[str, Job]:
    jobs: dict[str, Job] = {}
    for domain, effort in stage.cells():
        earlier = [e for e in EFFORT_ORDER[: EFFORT_ORDER.index(effort)] if e in stage.efforts]
        name = f"{domain}-{effort}"
        jobs[name] = Job(
            name, domain, effort, f"{domain}-{earlier[-1]}" if earlier else None, job_stage(stage, domain, effort)
        )
    return jobs
