"""`posttrain run --dry-run`: the placement plan, without starting anything.

Which resources a slot (one placement group: engines, trainer ranks, judge) takes, which
node each slot would go on, and which expert jobs would run on which slot, in order
(assuming jobs of equal length). On a cluster (`ray.address`, or RAY_ADDRESS) the nodes
and their free resources are read from it as a client; locally, the one node that
`posttrain run` would start.
"""

from __future__ import annotations

import os

from posttrain.config import PipelineConfig


def cluster_nodes(config: PipelineConfig) -> tuple[str, list[dict]]:
    address = config.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        import ray

        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        try:
            from ray._private.state import available_resources_per_node

            free = available_resources_per_node()  # node id -> resources not yet reserved
            nodes = [
                {
                    "node": f"{n['NodeManagerAddress']}:{n['NodeManagerPort']}",
                    "resources": _free(free.get(n["NodeID"], n.get("Resources", {}))),
                }
                for n in ray.nodes()
                if n.get("Alive")
            ]
        finally:
            ray.shutdown()
        return f"Ray cluster at {address}", nodes
    from posttrain.runtime.placement import slot_cpus

    cpus = config.ray.num_cpus or max(os.cpu_count() or 1, int(slot_cpus(config) + 0.999))
    return "local Ray (started by `posttrain run`)", [{"node": "local", "resources": {"CPU": float(cpus)}}]


def _free(resources: dict) -> dict:
    return {
        k: float(v)
        for k, v in resources.items()
        if not k.startswith("node:") and k not in ("memory", "object_store_memory")
    }


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


def dry_run(config: PipelineConfig) -> str:
    from posttrain.config.jobs import expert_jobs
    from posttrain.runtime.placement import engine_count, judge_config, plan, slot_bundles

    where, nodes = cluster_nodes(config)
    lines = [f"placement plan for pipeline '{config.name}' on {where}:"]
    for n in nodes:
        lines.append(f"  node {n['node']}: free {n['resources']}")
    bundles = slot_bundles(config)
    parts = [f"engine x{engine_count(config)}", f"trainer rank x{config.trainer.workers}"]
    if judge_config(config) is not None:
        parts.append("GRM judge x1")
    total: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            total[k] = round(total.get(k, 0.0) + v, 3)
    lines.append(f"a slot = one placement group on one node (STRICT_PACK): {', '.join(parts)} = {total}")
    experts = [s for s in config.stages if s.type == "experts"]
    wanted = max([1] + [min(s.parallel or len(s.domains), len(s.domains)) for s in experts])
    placed = plan(config, nodes, wanted)
    granted = [p for p in placed if p["node"] is not None]
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
    if not granted:
        lines.append("WARNING: no node can hold slot 0; the run would wait until one can")
    for stage in config.stages:
        if stage.type == "experts":
            rounds = schedule(expert_jobs(stage), max(1, len(granted)))
            lines.append(
                f"stage {stage.name} (experts): {sum(map(len, rounds))} jobs on {max(1, len(granted))} slot(s):"
            )
            for i, batch in enumerate(rounds, 1):
                lines.append(f"  round {i}: " + ", ".join(f"{job} -> slot {k}" for k, job in enumerate(batch)))
        elif stage.type == "mopd":
            pool = stage.teacher_pool
            where = (
                "teachers in one shared worker actor (hf"
                if pool.backend == "hf"
                else "teachers as one engine actor each (vllm"
            )
            lines.append(
                f"stage {stage.name} (mopd): slot 0; {where}, CPU {pool.num_cpus}, GPU {pool.num_gpus} "
                f"per actor, at most {pool.memory_gib} GiB resident)"
            )
        else:
            lines.append(f"stage {stage.name} ({stage.type}): slot 0")
    return "\n".join(lines)
