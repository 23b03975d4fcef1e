"""What a pipeline asks Ray for, and whether it can ever be placed: the device of an actor
(from its resources), a slot's bundles (engines, trainer ranks, judge), MOPD's teacher
actors, and first-fit placement on nodes of given sizes. Pure arithmetic on the config,
no Ray: validation checks it against a declared cluster (`ray.nodes`, `node_gpus`,
`node_cpus`), the dry-run and the start of a run against the live one.
"""

from __future__ import annotations

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


# ---------------------------------------------------------------- a slot


def judge_config(config: PipelineConfig):
    """The vLLM judge a stage of this pipeline needs (the largest), or None."""
    judges = [s.grm().judge for s in config.stages if s.grm() is not None and s.grm().judge.in_slot]
    return max(judges, key=lambda j: (j.num_cpus, j.num_gpus), default=None)


def engine_count(config: PipelineConfig) -> int:
    """Engines per slot: none when no stage samples from the policy."""
    sampling = any(s.samples_policy for s in config.stages)
    return config.rollout.engines if sampling else 0


def bundle(cpus: float, gpus: float) -> dict[str, float]:
    out = {"CPU": max(cpus, MIN_CPU)}
    if gpus:
        out["GPU"] = gpus
    return out


def slot_bundles(config: PipelineConfig) -> list[dict[str, float]]:
    """Engines first, then trainer ranks, then the GRM judge when a stage needs one."""
    r, t = config.rollout, config.trainer
    bundles = [bundle(r.num_cpus, r.num_gpus) for _ in range(engine_count(config))]
    bundles += [bundle(t.num_cpus, t.num_gpus) for _ in range(t.workers)]
    judge = judge_config(config)
    if judge is not None:
        bundles.append(bundle(judge.num_cpus, judge.num_gpus))
    return bundles


def total(bundles: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            out[k] = round(out.get(k, 0.0) + v, 3)
    return out


def slot_need(config: PipelineConfig) -> dict[str, float]:
    return total(slot_bundles(config))


def slot_parts(config: PipelineConfig) -> str:
    """What a slot is made of, in words: `3 engines x {...} + 4 trainer ranks x {...} + judge {...}`."""
    r, t = config.rollout, config.trainer
    parts = []
    if engine_count(config):
        parts.append(f"{_count(engine_count(config), 'engine')} x {bundle(r.num_cpus, r.num_gpus)}")
    parts.append(f"{_count(t.workers, 'trainer rank')} x {bundle(t.num_cpus, t.num_gpus)}")
    judge = judge_config(config)
    if judge is not None:
        parts.append(f"GRM judge {bundle(judge.num_cpus, judge.num_gpus)}")
    return " + ".join(parts)


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


def take_slot(free: list[dict[str, float]], config: PipelineConfig) -> list[int] | None:
    """Where a slot's bundles would go on nodes with `free` room (that room is taken): the
    node index of each bundle, or None (nothing taken) when it cannot be placed. One node
    holds it all when one can (what both strategies try first); with `trainer.span_nodes`
    the bundles are otherwise packed onto as few nodes as fit, largest first."""
    bundles = slot_bundles(config)
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
    cluster, so the teachers that must sit beside slot 0 can be counted too."""
    problems = []
    need = slot_need(config)
    largest = {k: max((n.get(k, 0.0) for n in nodes), default=0.0) for k in ("CPU", "GPU")}
    if take_slot([dict(n) for n in nodes], config) is None:
        if config.trainer.span_nodes:
            problems.append(
                f"rollout, trainer: one slot needs {_shown(need)} ({slot_parts(config)}), and its bundles do not fit "
                f"on the {len(nodes)} node(s) even spread across them; it would wait for Ray forever: add nodes, "
                "or lower rollout.engines, trainer.workers or their num_gpus/num_cpus"
            )
            return problems
        problems.append(
            f"rollout, trainer: one slot (a placement group on one node) needs {_shown(need)} "
            f"({slot_parts(config)}), more than any node has (largest: {_shown(largest)}); it would wait for Ray "
            "forever: lower rollout.engines, trainer.workers or their num_gpus/num_cpus, or let the trainer "
            "ranks span nodes (trainer.span_nodes: true)"
        )
        return problems
    for index, pool, count, one in teacher_actors(config):
        where = f"stages[{index}].teacher_pool"
        if not any(fits(n, one) for n in nodes):
            problems.append(
                f"{where}: a teacher actor needs {_shown(one)}, more than any node has (largest: {_shown(largest)})"
            )
            continue
        if not whole:
            continue
        free = [dict(n) for n in nodes]
        take_slot(free, config)  # slot 0 stays while MOPD runs (the experts' extra slots are gone)
        placed = sum(first_fit(free, one) is not None for _ in range(count))
        if placed < count:
            fix = f"set teacher_pool.max_resident: {placed} (teachers are then swapped), " if placed else ""
            problems.append(
                f"{where}: {count} {pool.backend} teacher actor(s) of {_shown(one)} must be resident at once, but "
                f"{placed} fit beside slot 0 on {len(nodes)} node(s); the rest would wait for Ray until the load "
                f"times out: {fix}give each less num_gpus/num_cpus, or add nodes"
            )
    return problems
