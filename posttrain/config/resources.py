"""What a pipeline asks Ray for, and whether it can ever be placed: the device of an actor
(from its resources), a slot's bundles (engines, trainer ranks, judge), MOPD's teacher
actors, and first-fit placement on nodes of given sizes. Pure arithmetic on the config,
no Ray: validation checks it against a declared cluster (`ray.nodes`, `node_gpus`,
`node_cpus`), the dry-run and the start of a run against the live one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from posttrain.config.infra import RayConfig, RolloutConfig
    from posttrain.config.pipeline import PipelineConfig

MIN_CPU = 0.01  # Ray refuses an empty bundle; an actor asking 0 CPUs still fits in this
Device = Literal["cuda", "cpu"]


def device_of(num_gpus: float) -> Device:
    """The one place that decides an actor's device: it has GPUs if Ray gives it some."""
    return "cuda" if num_gpus > 0 else "cpu"


def tensor_parallel_problem(num_gpus: float, tensor_parallel: int) -> str | None:
    """Why an engine holding `num_gpus` cannot run `tensor_parallel` ranks, or None. Each
    tensor-parallel rank needs a GPU of its own inside the engine actor: vLLM's workers
    would otherwise wait for GPUs the actor does not hold, forever."""
    if device_of(num_gpus) == "cpu":
        if tensor_parallel > 1:
            return (
                f"tensor_parallel {tensor_parallel} needs num_gpus: {tensor_parallel} (one GPU per tensor-parallel "
                "rank, held by the engine actor); a CPU engine (num_gpus 0) runs tensor_parallel 1"
            )
        return None
    if num_gpus < 1:
        if tensor_parallel > 1:
            return f"tensor_parallel {tensor_parallel} needs num_gpus: {tensor_parallel}, not a share of one GPU"
        return None
    if num_gpus != tensor_parallel:
        return (
            f"num_gpus {num_gpus:g} and tensor_parallel {tensor_parallel} differ: an engine holds exactly one GPU "
            f"per tensor-parallel rank (set both to the same whole number)"
        )
    return None


def weight_sync_mode(rollout: RolloutConfig) -> Literal["collective", "object_store"]:
    """`auto`: a collective (NCCL) when the engines have GPUs, Ray's object store on CPU."""
    if rollout.weight_sync != "auto":
        return rollout.weight_sync
    return "collective" if device_of(rollout.num_gpus) == "cuda" else "object_store"


def transfer_backend(rollout: RolloutConfig) -> Literal["gloo", "nccl", "ipc"]:
    """vLLM's weight-transfer backend of a collective sync; `auto`: nccl on GPU, gloo on CPU."""
    if rollout.transfer_backend != "auto":
        return rollout.transfer_backend
    return "nccl" if device_of(rollout.num_gpus) == "cuda" else "gloo"


# ---------------------------------------------------------------- a slot


def per_stage(config: PipelineConfig) -> bool:
    """Each stage reserves its own slot (`ray.placement: per_stage`), not slot 0 for the run."""
    return config.ray.placement == "per_stage"


def slot_stages(config: PipelineConfig, stage=None) -> list:
    """The stages whose roles a slot holds: every stage's when slot 0 is the pipeline's (or
    no stage is named), else the one stage's."""
    return [stage] if stage is not None and per_stage(config) else list(config.stages)


def stage_config(config: PipelineConfig, stage=None) -> PipelineConfig:
    """The pipeline as one stage runs it: with `ray.placement: per_stage`, its `slot` sizes
    in place of rollout.engines and trainer.workers."""
    if stage is None or not per_stage(config) or (stage.slot.engines is None and stage.slot.trainer_workers is None):
        return config
    rollout = config.rollout.model_copy(update={"engines": stage.slot.engines or config.rollout.engines})
    trainer = config.trainer.model_copy(update={"workers": stage.slot.trainer_workers or config.trainer.workers})
    return config.model_copy(update={"rollout": rollout, "trainer": trainer})


def judge_config(config: PipelineConfig, stage=None):
    """The vLLM judge a slot holds (the largest its stages need), or None."""
    stages = slot_stages(config, stage)
    judges = [s.grm().judge for s in stages if s.grm() is not None and s.grm().judge.in_slot]
    return max(judges, key=lambda j: (j.num_cpus, j.num_gpus), default=None)


def engine_count(config: PipelineConfig, stage=None) -> int:
    """Engines per slot: none when none of its stages samples from the policy."""
    sampling = any(s.samples_policy for s in slot_stages(config, stage))
    return stage_config(config, stage).rollout.engines if sampling else 0


def trainer_count(config: PipelineConfig, stage=None) -> int:
    """Trainer ranks per slot: a stage's own slot holds none when it trains nothing (eval)."""
    if stage is None or not per_stage(config):
        return config.trainer.workers
    return stage_config(config, stage).trainer.workers if stage.uses_trainer() else 0


def bundle(cpus: float, gpus: float) -> dict[str, float]:
    out = {"CPU": max(cpus, MIN_CPU)}
    if gpus:
        out["GPU"] = gpus
    return out


def slot_bundles(config: PipelineConfig, stage=None) -> list[dict[str, float]]:
    """Engines first, then trainer ranks, then the GRM judge when a stage needs one. `stage`:
    with `ray.placement: per_stage`, that stage's own slot."""
    r, t = config.rollout, config.trainer
    bundles = [bundle(r.num_cpus, r.num_gpus) for _ in range(engine_count(config, stage))]
    bundles += [bundle(t.num_cpus, t.num_gpus) for _ in range(trainer_count(config, stage))]
    judge = judge_config(config, stage)
    if judge is not None:
        bundles.append(bundle(judge.num_cpus, judge.num_gpus))
    return bundles


def total(bundles: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            out[k] = round(out.get(k, 0.0) + v, 3)
    return out


def slot_need(config: PipelineConfig, stage=None) -> dict[str, float]:
    return total(slot_bundles(config, stage))


def slot_cpus(config: PipelineConfig) -> float:
    """CPUs of the largest slot the pipeline reserves (slot 0, or with per_stage, a stage's)."""
    if per_stage(config):
        return max(slot_need(config, stage)["CPU"] for stage in config.stages)
    return slot_need(config)["CPU"]


def slot_parts(config: PipelineConfig, stage=None) -> str:
    """What a slot is made of, in words: `3 engines x {...} + 4 trainer ranks x {...} + judge {...}`."""
    r, t = config.rollout, config.trainer
    parts = []
    if engine_count(config, stage):
        parts.append(f"{_count(engine_count(config, stage), 'engine')} x {bundle(r.num_cpus, r.num_gpus)}")
    if trainer_count(config, stage):
        parts.append(f"{_count(trainer_count(config, stage), 'trainer rank')} x {bundle(t.num_cpus, t.num_gpus)}")
    judge = judge_config(config, stage)
    if judge is not None:
        parts.append(f"GRM judge {bundle(judge.num_cpus, judge.num_gpus)}")
    return " + ".join(parts) or "nothing"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


# ---------------------------------------------------------------- MOPD's teachers


def teacher_actors(config: PipelineConfig) -> list[tuple[int, object, int, dict[str, float]]]:
    """Per stage with teacher actors (MOPD): (stage index, its teacher_pool, actors resident
    at once, resources of one)."""
    out = []
    for i, stage in enumerate(config.stages):
        found = stage.teacher_actors(config.stages)
        if found is None:
            continue
        pool, count = found
        one = {"CPU": float(pool.num_cpus), **({"GPU": float(pool.num_gpus)} if pool.num_gpus else {})}
        out.append((i, pool, count, one))  # actors outside any placement group: 0 CPUs is 0
    return out


# ---------------------------------------------------------------- a stage's GPUs


@dataclass(frozen=True)
class StageGPUs:
    """The GPUs of the cluster while one stage runs: those its actors use, by role, and
    those reserved for actors it does not use (slot 0's engines or judge through SFT)."""

    used: dict[str, float]  # role -> GPUs its actors hold and this stage uses ("trainer ranks": 8)
    held_idle: dict[str, float]  # role -> GPUs reserved for it that this stage leaves idle
    cluster: float  # GPUs of the nodes

    @property
    def in_use(self) -> float:
        return round(sum(self.used.values()), 3)

    @property
    def idle(self) -> float:
        return round(self.cluster - self.in_use, 3)


def slot_roles(config: PipelineConfig, stage=None) -> dict[str, float]:
    """GPUs of one slot, by role (engines, trainer ranks, judge)."""
    judge = judge_config(config, stage)
    roles = {
        "engines": engine_count(config, stage) * config.rollout.num_gpus,
        "trainer ranks": trainer_count(config, stage) * config.trainer.num_gpus,
        "judge": judge.num_gpus if judge is not None else 0.0,
    }
    return {k: v for k, v in roles.items() if v}


def roles_used(stage) -> set[str]:
    """The slot roles a stage's code calls on."""
    grm = stage.grm()
    judged = grm is not None and grm.judge.in_slot
    uses = (("engines", stage.samples_policy), ("trainer ranks", stage.uses_trainer()), ("judge", judged))
    return {role for role, used in uses if used}


def stage_gpus(config: PipelineConfig, stage, nodes: list[dict[str, float]]) -> StageGPUs:
    """Which GPUs of `nodes` (their total resources) the stage's actors use: its slot (or
    slot 0, with ray.placement: pipeline, whose roles it may not use), the experts' extra
    slots that fit, and the teachers resident beside them."""
    free = [dict(n) for n in nodes]
    own = per_stage(config)
    held = slot_roles(config, stage if own else None)
    uses = {role: gpus for role, gpus in held.items() if role in roles_used(stage)}
    take_slot(free, config, stage if own else None)
    used = dict(uses)
    for _ in range(stage.job_slots() - 1):  # the experts' parallel slots, where they fit
        if take_slot(free, config, stage if own else None) is None:
            break
        for role, gpus in uses.items():
            used[role] = used.get(role, 0.0) + gpus
    for index, _pool, count, one in teacher_actors(config):
        if config.stages[index] is stage and one.get("GPU"):
            placed = sum(first_fit(free, one) is not None for _ in range(count))
            used["teachers"] = placed * one["GPU"]
    idle = {role: gpus for role, gpus in held.items() if role not in uses}
    return StageGPUs(used, idle, sum(n.get("GPU", 0.0) for n in nodes))


# ---------------------------------------------------------------- fitting


def fits(free: dict[str, float], need: dict[str, float]) -> bool:
    return all(free.get(k, 0.0) + 1e-9 >= v for k, v in need.items())


def first_fit(free: list[dict[str, float]], need: dict[str, float]) -> int | None:
    """The first node with room for `need` (its room is taken), or None."""
    for i, room in enumerate(free):
        if fits(room, need):
            for k, v in need.items():
                room[k] = room.get(k, 0.0) - v
            return i
    return None


def slot_strategy(config: PipelineConfig) -> str:
    """The Ray placement strategy of a slot: one node (STRICT_PACK), or as few as fit (PACK)
    when its trainer ranks may span nodes (`trainer.span_nodes`)."""
    return "PACK" if config.trainer.span_nodes else "STRICT_PACK"


def take_slot(free: list[dict[str, float]], config: PipelineConfig, stage=None) -> list[int] | None:
    """Where a slot's bundles would go on nodes with `free` room (that room is taken): the
    node index of each bundle, or None (nothing taken) when it cannot be placed. One node
    holds it all when one can (what both strategies try first); with `trainer.span_nodes`
    the bundles are otherwise packed onto as few nodes as fit, largest first. `stage`: with
    `ray.placement: per_stage`, that stage's slot."""
    bundles = slot_bundles(config, stage)
    whole = first_fit(free, total(bundles))
    if whole is not None:
        return [whole] * len(bundles)
    if not config.trainer.span_nodes:
        return None
    trial = [dict(room) for room in free]
    where = [0] * len(bundles)
    for i in sorted(range(len(bundles)), key=lambda i: (-bundles[i].get("GPU", 0.0), -bundles[i]["CPU"])):
        spot = first_fit(trial, bundles[i])
        if spot is None:
            return None
        where[i] = spot
    free[:] = trial
    return where


def declared_nodes(ray: RayConfig) -> list[dict[str, float]] | None:
    """The cluster the file declares (`ray.nodes` nodes of `node_gpus` GPUs and `node_cpus`
    CPUs; an undeclared size is unbounded), or None when it declares no node size."""
    if ray.node_gpus is None and ray.node_cpus is None:
        return None
    node = {
        "CPU": float("inf") if ray.node_cpus is None else float(ray.node_cpus),
        "GPU": float("inf") if ray.node_gpus is None else float(ray.node_gpus),
    }
    return [dict(node) for _ in range(ray.nodes or 1)]


def _shown(resources: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items()) if k in ("CPU", "GPU")) + "}"


def placement_problems(config: PipelineConfig, nodes: list[dict[str, float]], whole: bool) -> list[str]:
    """Why this pipeline could never be placed on `nodes` (each node's total resources),
    one line each naming the keys to change; [] if it can. `whole`: `nodes` is the whole
    cluster, so the teachers that must sit beside a slot can be counted too. With
    `ray.placement: per_stage`, each stage's own slot (and its teachers) is checked alone."""
    if not per_stage(config):
        problems = _slot_problems(config, nodes, None, "rollout, trainer: one slot")
        return problems or _teacher_problems(config, nodes, whole, None)
    problems = []
    for index, stage in enumerate(config.stages):
        where = f"stages[{index}] ({stage.name}): its slot (ray.placement: per_stage)"
        found = _slot_problems(config, nodes, stage, where)
        problems += found or _teacher_problems(config, nodes, whole, stage)
    return problems


def _slot_problems(config: PipelineConfig, nodes: list[dict[str, float]], stage, where: str) -> list[str]:
    """A slot no node (or, with span_nodes, no spread over the nodes) can hold."""
    if take_slot([dict(n) for n in nodes], config, stage) is not None:
        return []
    need, parts = _shown(slot_need(config, stage)), slot_parts(config, stage)
    largest = {k: max((n.get(k, 0.0) for n in nodes), default=0.0) for k in ("CPU", "GPU")}
    sizes = "lower rollout.engines, trainer.workers or their num_gpus/num_cpus"
    if stage is not None:
        sizes = (
            f"lower stages[{config.stages.index(stage)}].slot.engines or .trainer_workers, or their num_gpus/num_cpus"
        )
    if config.trainer.span_nodes:
        return [
            f"{where} needs {need} ({parts}), and its bundles do not fit on the {len(nodes)} node(s) even spread "
            f"across them; it would wait for Ray forever: add nodes, or {sizes}"
        ]
    return [
        f"{where} (a placement group on one node) needs {need} ({parts}), more than any node has (largest: "
        f"{_shown(largest)}); it would wait for Ray forever: {sizes}, or let the trainer ranks span nodes "
        "(trainer.span_nodes: true)"
    ]


def _teacher_problems(config: PipelineConfig, nodes: list[dict[str, float]], whole: bool, stage) -> list[str]:
    """Teacher actors no node can hold, or too many to be resident beside their stage's slot
    (slot 0; with per_stage, the stage's own)."""
    problems = []
    largest = {k: max((n.get(k, 0.0) for n in nodes), default=0.0) for k in ("CPU", "GPU")}
    beside = "slot 0" if stage is None else "its stage's slot"
    hint = "" if stage is not None else " (or ray.placement: per_stage: slot 0 then holds only what each stage uses)"
    for index, pool, count, one in teacher_actors(config):
        if stage is not None and config.stages[index] is not stage:
            continue
        where = f"stages[{index}].teacher_pool"
        if not any(fits(n, one) for n in nodes):
            problems.append(
                f"{where}: a teacher actor needs {_shown(one)}, more than any node has (largest: {_shown(largest)})"
            )
            continue
        if not whole:
            continue
        free = [dict(n) for n in nodes]
        take_slot(free, config, stage)  # the slot stays while MOPD runs (the experts' extra slots are gone)
        placed = sum(first_fit(free, one) is not None for _ in range(count))
        if placed < count:
            fix = f"set teacher_pool.max_resident: {placed} (teachers are then swapped), " if placed else ""
            problems.append(
                f"{where}: {count} {pool.backend} teacher actor(s) of {_shown(one)} must be resident at once, but "
                f"{placed} fit beside {beside} on {len(nodes)} node(s); the rest would wait for Ray until the load "
                f"times out: {fix}give each less num_gpus/num_cpus, or add nodes{hint}"
            )
    return problems
