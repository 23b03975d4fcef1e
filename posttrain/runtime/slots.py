"""Slots: a placement group holding one job's engines, trainer ranks and judge together.

A slot is reserved whole or not at all (Ray placement groups are atomic), so jobs that
wait for resources hold nothing while they wait and can never deadlock each other. Its
bundles are packed on one node (STRICT_PACK), or, with `trainer.span_nodes`, on as few nodes
as fit (PACK): the trainer ranks meet on rank 0's node address, and the weights go from
rank 0 to the engines by a collective or Ray's object store, within a node or across.

Bundle layout: engines first, then trainer ranks, then the GRM judge when a stage needs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from posttrain.config import PipelineConfig
from posttrain.config.resources import (  # noqa: F401 - the slot arithmetic lives with the config
    MIN_CPU,
    engine_count,
    first_fit,
    judge_config,
    placement_problems,
    slot_bundles,
    slot_need,
    slot_parts,
    slot_strategy,
    take_slot,
)


def slot_cpus(config: PipelineConfig) -> float:
    return slot_need(config)["CPU"]


@dataclass(frozen=True)
class Placement:
    """One bundle of a placement group, for an actor's `.options(...)`."""

    pg: object
    bundle: int

    def options(self) -> dict:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=self.bundle
            )
        }


@dataclass
class Slot:
    """A reserved placement group and the engines and trainer ranks started in it."""

    index: int
    pg: object
    pool: object = None  # EnginePool
    trainers: object = None  # TrainerGroup
    judge: object = None  # JudgeSlot
    node: str = ""
    jobs: list[str] = field(default_factory=list)

    def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        if self.trainers is not None:
            self.trainers.shutdown()
        if self.pool is not None:
            self.pool.shutdown()
        if self.judge is not None:
            self.judge.close()
        try:
            remove_placement_group(self.pg)
        except Exception:  # noqa: BLE001 - already gone with its cluster
            pass


def reserve(config: PipelineConfig, index: int):
    """Ask for a slot's placement group; it is ready when `pg.ready()` resolves."""
    from ray.util.placement_group import placement_group

    return placement_group(slot_bundles(config), strategy=slot_strategy(config), name=f"posttrain-slot-{index}")


def open_slot(config: PipelineConfig, model_dir: Path, index: int, pg) -> Slot:
    """Start the engines and trainer ranks of a ready placement group (they load in the
    background; the first call on them waits)."""
    from posttrain.rollout.engine import RolloutEngine
    from posttrain.rollout.pool import EnginePool
    from posttrain.train.group import TrainerGroup

    engines = engine_count(config)

    def start(i: int):
        return RolloutEngine.remote_actor(
            str(model_dir), config.rollout, config.model.dtype, config.rollout.seed + i, placement=Placement(pg, i)
        )

    pool = EnginePool([start(i) for i in range(engines)], start, config.rollout.start_timeout_s)
    trainers = TrainerGroup(
        config.trainer,
        config.seed,
        placement=[Placement(pg, engines + r) for r in range(config.trainer.workers)],
        rollout=config.rollout,
    )
    pool.on_restart = lambda engine: trainers.sync_weights([engine])
    judge = None
    if judge_config(config) is not None:
        from posttrain.rollout.judge import JudgeSlot

        judge = JudgeSlot(Placement(pg, engines + config.trainer.workers))
    return Slot(index=index, pg=pg, pool=pool, trainers=trainers, judge=judge, node=pg_node(pg))


def open_first_slot(config: PipelineConfig, model_dir: Path, run_dir: Path, metrics, **infra):
    """Slot 0 reserved, ready and opened on a started Ray, and the Infra that stages run on
    (the pipeline and the benches that run stages share this). Returns (slot, infra); the
    caller closes the slot."""
    from transformers import AutoTokenizer

    from posttrain.runtime.infra import Infra

    pg = reserve(config, 0)
    wait_ready(pg, config)
    slot = open_slot(config, model_dir, 0, pg)
    if "tokenizer" not in infra:
        infra["tokenizer"] = AutoTokenizer.from_pretrained(model_dir)
    return slot, Infra(
        config=config,
        run_dir=run_dir,
        trainers=slot.trainers,
        pool=slot.pool,
        metrics=metrics,
        judge=slot.judge,
        pg=pg,
        node=slot.node,
        **infra,
    )


def wait_ready(pg, config: PipelineConfig, every_s: float = 30.0) -> None:
    """Wait until Ray grants a placement group, saying every `every_s` what it waits for."""
    import ray

    ready, waited = pg.ready(), 0.0
    while not ray.wait([ready], timeout=every_s)[0]:
        waited += every_s
        print(
            f"waiting {waited:.0f}s for Ray to grant a slot of {slot_bundles(config)} (the cluster has "
            f"{ray.available_resources()} free): add nodes or lower rollout/trainer num_cpus/num_gpus",
            flush=True,
        )


def pg_node(pg) -> str:
    """The IP address of the node a (ready) placement group's bundles sit on."""
    import ray
    from ray.util import placement_group_table

    try:
        node_id = next(iter(placement_group_table(pg)["bundles_to_node_id"].values()))
        return next(
            (n["NodeManagerAddress"] + ":" + str(n["NodeManagerPort"]) for n in ray.nodes() if n["NodeID"] == node_id),
            node_id,
        )
    except Exception:  # noqa: BLE001 - informative only
        return "?"


def plan(config: PipelineConfig, nodes: list[dict], slots: int) -> list[dict]:
    """Which slot would go on which node, given each node's free resources (first fit,
    as STRICT_PACK places them). Slots that fit nowhere wait: their jobs queue for the
    slots that exist. `nodes`: [{"node": name, "resources": {"CPU": n, ...}}]."""
    free = [dict(n["resources"]) for n in nodes]
    need = slot_need(config)
    out = []
    for index in range(slots):
        where = take_slot(free, config)
        names = [] if where is None else [nodes[k]["node"] for k in sorted(set(where))]
        out.append({"slot": index, "node": " + ".join(names) or None, "resources": need})
    return out


def live_nodes() -> list[dict]:
    """The alive nodes of the connected Ray cluster: name, total and free resources."""
    import ray
    from ray._private.state import available_resources_per_node

    free = available_resources_per_node()  # node id -> resources not yet reserved
    return [
        {
            "node": f"{n['NodeManagerAddress']}:{n['NodeManagerPort']}",
            "total": _plain(n.get("Resources", {})),
            "resources": _plain(free.get(n["NodeID"], n.get("Resources", {}))),
        }
        for n in ray.nodes()
        if n.get("Alive")
    ]


def _plain(resources: dict) -> dict:
    return {
        k: float(v)
        for k, v in resources.items()
        if not k.startswith("node:") and k not in ("memory", "object_store_memory")
    }


def check_placeable(config: PipelineConfig, source: str) -> None:
    """Refuse, before anything starts, a pipeline the connected cluster could never place
    (a slot or a teacher larger than any node, teachers that cannot sit beside slot 0):
    Ray would make it wait forever. One line naming the keys, exit 2."""
    from posttrain.config.files import ConfigError

    nodes = live_nodes()
    problems = placement_problems(config, [n["total"] for n in nodes], whole=True)
    if problems:
        sizes = ", ".join(f"{n['node']} {n['total']}" for n in nodes[:4]) + (" ..." if len(nodes) > 4 else "")
        raise ConfigError(f"{source}: {problems[0]} (this Ray cluster: {len(nodes)} node(s): {sizes})")
