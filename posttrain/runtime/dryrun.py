"""`posttrain run --dry-run`: the placement plan, without starting anything.

Which resources a slot (one placement group: engines, trainer ranks, judge) takes, which
node each slot would go on, where MOPD's teachers would go, and which expert jobs would
run on which slot, in order (assuming jobs of equal length). The nodes: on a cluster
(`ray.address`, or RAY_ADDRESS) read from it as a client; else the cluster the file
declares (`ray.nodes` x `node_gpus`/`node_cpus`); else this machine. A pipeline those
nodes could never place is reported in one line (exit 2), not left to wait.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from posttrain.config import PipelineConfig
from posttrain.config.resources import declared_nodes


def cluster_nodes(config: PipelineConfig) -> tuple[str, list[dict], bool]:
    """(where, nodes with `node`, `total` and free `resources`, whether they are the whole cluster)."""
    address = config.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        import ray

        from posttrain.runtime.slots import live_nodes

        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        try:
            nodes = live_nodes()
        finally:
            ray.shutdown()
        return f"Ray cluster at {address}", nodes, True
    declared = declared_nodes(config.ray)
    if declared is not None:
        nodes = [{"node": f"node{i + 1}", "total": n, "resources": dict(n)} for i, n in enumerate(declared)]
        count = f"{config.ray.nodes} nodes" if config.ray.nodes else "nodes"
        return (
            f"the declared cluster ({count} of {_size(declared[0])}; no ray.address or RAY_ADDRESS to read a live one)",
            nodes,
            config.ray.nodes is not None,
        )
    from posttrain.config.resources import slot_cpus

    cpus = config.ray.num_cpus or max(os.cpu_count() or 1, int(slot_cpus(config) + 0.999))
    local = {"CPU": float(cpus), **({"GPU": float(_local_gpus())} if _local_gpus() else {})}
    return "local Ray (started by `posttrain run`)", [{"node": "local", "total": local, "resources": local}], True


def _size(node: dict) -> str:
    return ", ".join(f"{v:g} {k}s" for k, v in node.items() if v != float("inf"))


def _local_gpus() -> int:
    """GPUs a local Ray would see, without importing torch: CUDA_VISIBLE_DEVICES, else /dev/nvidiaN."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    return len([d for d in Path("/dev").glob("nvidia[0-9]*")])


def schedule(jobs: dict, slots: int) -> list[list[str]]:
    """Rounds of jobs per slot, in the order the experts runner would start them."""
    done: set[str] = set()
    left = list(jobs)
    rounds = []
    while left:
        batch = []
        for name in list(left):
            if len(batch) == slots:
                break
            if jobs[name].after is None or jobs[name].after in done:
                batch.append(name)
                left.remove(name)
        if not batch:
            raise RuntimeError(f"jobs that can never start: {left}")
        rounds.append(batch)
        done |= set(batch)
    return rounds


# bytes per parameter of one checkpoint: the Hugging Face weights, DeepSpeed's copy of them
# and its fp32 optimizer state (master weights, Adam's two moments); 60 checkpoints of the
# 0.4M-parameter tiny model (float32) took 462 MB, 19 bytes per parameter each
OPTIMIZER_BYTES = 12


def model_parameters(config: PipelineConfig) -> int | None:
    """The model's parameter count, from its folder's safetensors headers, without building,
    converting or downloading anything (None when it is not on disk yet)."""
    from posttrain.models import cache_root, cached_snapshot, parameter_count, tiny_key

    name = config.model.name
    if name == "tiny":
        folder = cache_root() / "models" / f"tiny-{tiny_key(config.model.tiny, config.model.seed)}"
    elif name == "smollm2-135m-instruct":
        folder = cache_root() / "models" / "smollm2-135m-instruct"
    elif "/" in name and not Path(name).expanduser().exists():
        folder = cached_snapshot(name)
    else:
        folder = Path(name).expanduser()
    if folder is None or not folder.is_dir():
        return None
    return parameter_count(folder) or None


def checkpoint_plan(stage) -> tuple[int, int] | None:
    """(checkpoints kept at the end, of which step checkpoints) of a stage that saves
    (per job for an experts stage); None for a stage that saves none."""
    if stage.trains == "nothing":
        return None
    if not stage.uses_trainer():
        return 1, 0  # its final checkpoint alone
    steps = stage.longest_steps()
    saves = (steps - 1) // stage.save_every if stage.save_every else 0
    kept = saves if stage.keep_last is None else min(saves, stage.keep_last + (1 if stage.keep_best else 0))
    return kept + 1, kept


def disk_lines(config: PipelineConfig, run_dir: Path | None = None) -> list[str]:
    """The disk the checkpoints will take (predicted from the parameter count) and take now."""
    from posttrain.records.checkpoints import checkpoint_disk, human_bytes

    params = model_parameters(config)
    per = params * (2 * (4 if config.model.dtype == "float32" else 2) + OPTIMIZER_BYTES) if params else None
    lines = [
        "checkpoints on disk (predicted: "
        + (
            f"about {human_bytes(per)} each, {params / 1e6:.1f}M parameters x "
            f"{per // params} bytes: weights, DeepSpeed's copy and optimizer state):"
            if per
            else "the model is not on disk yet, so its size is unknown):"
        )
    ]
    total = 0
    for stage in config.stages:
        plans = [plan for plan in map(checkpoint_plan, stage.phases()) if plan is not None]
        if not plans:
            continue
        count, steps = sum(p[0] for p in plans), sum(p[1] for p in plans)
        finals = f" + {len(plans)} finals" if len(plans) > 1 else " + final"
        jobs = len(stage.job_names()) if stage.trains == "jobs" else 1
        keep_last = getattr(stage, "keep_last", None)  # a stage that trains nothing saves no step checkpoints
        keep = f"keep_last {keep_last}" if keep_last else "every step checkpoint kept"
        size = f" = {human_bytes(per * count * jobs)}" if per else ""
        total += per * count * jobs if per else 0
        each = f" x {jobs} jobs" if jobs > 1 else ""
        lines.append(f"  stage {stage.name}: {steps} step checkpoint(s){finals}{each} ({keep}){size}")
    if per:
        lines.append(f"  in all: about {human_bytes(total)}")
    if run_dir is not None and (Path(run_dir) / "checkpoints").is_dir():
        now = checkpoint_disk(Path(run_dir))
        lines.append(f"  now in {Path(run_dir) / 'checkpoints'}: {human_bytes(now['bytes'])}")
    return lines


@dataclass(frozen=True)
class PlanView:
    """What a stage's dry-run lines are drawn from: the pipeline, the stage's index in it,
    the nodes (with their free `resources`) and the slots granted on them (at least 1)."""

    config: PipelineConfig
    index: int
    nodes: list[dict]
    slots: int


StageLines = Callable[[object, PlanView], list[str]]


def dry_run(config: PipelineConfig, stage_lines: StageLines, run_dir: Path | None = None) -> tuple[str, list[str]]:
    """The plan, and the problems that would keep it from ever being placed (one line each).
    `stage_lines(stage, view)`: each stage's lines, from its type (the stage registry's
    `dry_run_lines`). `run_dir`: where the checkpoints go, for the disk they take now."""
    from posttrain.config.resources import per_stage, placement_problems, slot_need, slot_parts, stage_gpus

    where, nodes, whole = cluster_nodes(config)
    lines = [f"placement plan for pipeline '{config.name}' on {where}:"]
    for n in nodes:
        lines.append(f"  node {n['node']}: free {n['resources']}")
    spread = "on as few nodes as fit (PACK)" if config.trainer.span_nodes else "on one node (STRICT_PACK)"
    if per_stage(config):
        lines.append(
            f"each stage reserves a slot of its own {spread} (ray.placement: per_stage): the roles it uses, sized "
            "by its `slot`, given back when it ends"
        )
        granted = 1
    else:
        lines.append(f"a slot = one placement group {spread}: {slot_parts(config)} = {slot_need(config)}")
        granted = _slot0_lines(config, nodes, lines)
    free = [n["resources"] for n in nodes]
    for i, stage in enumerate(config.stages):
        slots = _stage_slots(config, stage, free) if per_stage(config) else granted
        lines += stage_lines(stage, PlanView(config, i, nodes, max(1, slots)))
        gpus = stage_gpus(config, stage, free)
        if gpus.cluster or gpus.in_use:
            lines.append("  " + gpu_line(gpus))
    lines += disk_lines(config, run_dir)
    problems = placement_problems(config, [n["total"] for n in nodes], whole=whole)
    return "\n".join(lines), problems


def _slot0_lines(config: PipelineConfig, nodes: list[dict], lines: list[str]) -> int:
    """Where slot 0 and the experts' extra slots go (ray.placement: pipeline); returns how
    many are granted."""
    from posttrain.runtime.slots import plan

    placed = plan(config, nodes, max(s.job_slots() for s in config.stages))
    for p in placed:
        role = "the pipeline's own (every stage)" if p["slot"] == 0 else "expert jobs"
        lines.append(
            f"slot {p['slot']}: "
            + (
                f"node {p['node']} - {role}"
                if p["node"]
                else "waits: no node has the resources free (its jobs queue for the others)"
            )
        )
    return len([p for p in placed if p["node"] is not None])


def _stage_slots(config: PipelineConfig, stage, free: list[dict]) -> int:
    """Slots of a stage's own (per_stage) that fit on the nodes at once."""
    from posttrain.config.resources import take_slot

    room = [dict(n) for n in free]
    return sum(take_slot(room, config, stage) is not None for _ in range(stage.job_slots()))


def gpu_line(gpus) -> str:
    """A stage's GPU use: by role, and what is left idle (reserved for roles it does not
    use, or reserved by nothing)."""
    used = ", ".join(f"{role} {n:g}" for role, n in gpus.used.items()) or "none"
    line = f"GPUs: {gpus.in_use:g} of {gpus.cluster:g} in use ({used})"
    if gpus.cluster == float("inf"):
        return f"GPUs: {gpus.in_use:g} in use ({used})"
    held = sum(gpus.held_idle.values())
    why = ", ".join(f"{role} {n:g}" for role, n in gpus.held_idle.items())
    idle = f"{gpus.idle:g} idle" + (
        f" ({held:g} held by slot 0 for roles this stage does not use: {why})" if held else ""
    )
    return f"{line}; {idle}"


# ---------------------------------------------------------------- lines of a stage


def slot0_lines(stage, view: PlanView) -> list[str]:
    """A stage that runs on the pipeline's own slot, or (per_stage) on a slot of its own."""
    from posttrain.config.resources import per_stage, slot_need, slot_parts

    if not per_stage(view.config):
        return [f"stage {stage.name} ({stage.type}): slot 0"]
    return [
        f"stage {stage.name} ({stage.type}): its own slot: {slot_parts(view.config, stage)} = "
        f"{slot_need(view.config, stage)}"
    ]


def expert_job_lines(stage, view: PlanView) -> list[str]:
    """The experts stage: which job runs on which slot, round by round."""
    from posttrain.config.jobs import expert_jobs
    from posttrain.config.resources import per_stage, slot_parts

    rounds = schedule(expert_jobs(stage), view.slots)
    own = f" of its own ({slot_parts(view.config, stage)} each)" if per_stage(view.config) else ""
    lines = [f"stage {stage.name} ({stage.type}): {sum(map(len, rounds))} jobs on {view.slots} slot(s){own}:"]
    for k, batch in enumerate(rounds, 1):
        lines.append(f"  round {k}: " + ", ".join(f"{job} -> slot {j}" for j, job in enumerate(batch)))
    return lines


def teacher_lines(stage, view: PlanView) -> list[str]:
    """MOPD: slot 0, and where its teacher actors would go beside it."""
    from posttrain.config.resources import first_fit, per_stage, slot_parts, take_slot, teacher_actors

    config, nodes = view.config, view.nodes
    pool, count, one = next((p, c, o) for index, p, c, o in teacher_actors(config) if index == view.index)
    kind = "one shared hf worker actor" if pool.backend == "hf" else f"{count} vllm engine actor(s) at once"
    free = [dict(n["resources"]) for n in nodes]
    own = per_stage(config)
    take_slot(free, config, stage if own else None)  # its slot stays; the experts' extra slots are gone by then
    spots = [first_fit(free, one) for _ in range(count)]
    on = ", ".join(f"{nodes[k]['node']} x{spots.count(k)}" for k in sorted({s for s in spots if s is not None}))
    slot = f"its own slot ({slot_parts(config, stage)})" if own else "slot 0"
    return [
        f"stage {stage.name} ({stage.type}): {slot}; teachers as {kind}, {one} each, at most "
        f"{pool.memory_gib} GiB resident; beside {'it' if own else 'slot 0'} they go on: {on or 'no node'}"
        + (f" ({spots.count(None)} wait)" if None in spots else "")
    ]
