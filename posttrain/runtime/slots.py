"""Slots: a placement group holding one job's engines, trainer ranks and judge together.

A slot is reserved whole or not at all (Ray placement groups are atomic), so jobs that
wait for resources hold nothing while they wait and can never deadlock each other. Its
bundles are packed on one node (STRICT_PACK), or, with `trainer.span_nodes`, on as few nodes
as fit (PACK): the trainer ranks meet on rank 0's node address, and the weights go from
rank 0 to the engines by a collective or Ray's object store, within a node or across.

Bundle layout: engines first, then trainer ranks, then the GRM judge when a stage needs one.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.config import PipelineConfig
from posttrain.config.resources import (  # noqa: F401 - the slot arithmetic lives with the config
    MIN_CPU,
    engine_count,
    first_fit,
    judge_config,
    per_stage,
    placement_problems,
    slot_bundles,
    slot_need,
    slot_parts,
    slot_strategy,
    stage_config,
    take_slot,
    trainer_count,
)


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


def reserve(config: PipelineConfig, index: int, stage=None):
    """Ask for a slot's placement group; it is ready when `pg.ready()` resolves. `stage`:
    with `ray.placement: per_stage`, the slot holds that stage's roles only."""
    from ray.util.placement_group import placement_group

    bundles = slot_bundles(config, stage)
    return placement_group(bundles, strategy=slot_strategy(config), name=f"posttrain-slot-{index}")


def open_slot(config: PipelineConfig, model_dir: Path, index: int, pg, stage=None) -> Slot:
    """Start the engines and trainer ranks of a ready placement group (they load in the
    background; the first call on them waits). `stage`: as for `reserve`."""
    from posttrain.rollout.engine import RolloutEngine
    from posttrain.rollout.pool import EnginePool
    from posttrain.train.group import TrainerGroup

    engines, workers = engine_count(config, stage), trainer_count(config, stage)
    trainer = stage_config(config, stage).trainer

    def start(i: int):
        return RolloutEngine.remote_actor(
            str(model_dir), config.rollout, config.model.dtype, config.rollout.seed + i, placement=Placement(pg, i)
        )

    pool = EnginePool([start(i) for i in range(engines)], start, config.rollout.start_timeout_s)
    trainers = None  # a stage's own slot that trains nothing (eval) holds no trainer ranks
    if workers:
        placement = [Placement(pg, engines + r) for r in range(workers)]
        trainers = TrainerGroup(trainer, config.seed, placement=placement, rollout=config.rollout)
        pool.on_restart = lambda engine: trainers.sync_weights([engine])
    judge = None
    if judge_config(config, stage) is not None:
        from posttrain.rollout.judge import JudgeSlot

        judge = JudgeSlot(Placement(pg, engines + workers))
    return Slot(index=index, pg=pg, pool=pool, trainers=trainers, judge=judge, node=pg_node(pg))


def open_first_slot(config: PipelineConfig, model_dir: Path, run_dir: Path, metrics, stage=None, **infra):
    """Slot 0 reserved, ready and opened on a started Ray, and the Infra that stages run on
    (the pipeline and the benches that run stages share this). Returns (slot, infra); the
    caller closes the slot. `stage`: with `ray.placement: per_stage`, that stage's slot,
    sized by its `slot` (the Infra's config carries those sizes)."""
    from transformers import AutoTokenizer

    from posttrain.runtime.infra import Infra

    pg = reserve(config, 0, stage)
    wait_ready(pg, config, stage=stage)
    slot = open_slot(config, model_dir, 0, pg, stage)
    config = stage_config(config, stage)
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


def _granted(pg) -> dict[str, float]:
    """What a placement group holds, from Ray's own record of its bundles."""
    from posttrain.config.resources import total

    return total([{k: v for k, v in b.items() if k in ("CPU", "GPU")} for b in pg.bundle_specs])


class StageSlots:
    """The slot each stage runs on: slot 0 opened once and held through every stage
    (`ray.placement: pipeline`), or a slot of the stage's own roles and sizes opened when it
    starts and closed when it ends (`per_stage`), so the next stage has every GPU it frees."""

    def __init__(self, config: PipelineConfig, model_dir: Path, run_dir: Path, metrics):
        self.config, self.model_dir, self.run_dir, self.metrics = config, model_dir, run_dir, metrics
        self.held: tuple[Slot, object] | None = None
        self.tokenizer = None

    @contextmanager
    def for_stage(self, stage):
        """The Infra `stage` runs on (its slot closed after it, with per_stage)."""
        if not per_stage(self.config):
            self.held = self.held or self._open(None)
            yield self.held[1]
            return
        slot, infra = self._open(stage)
        try:
            yield infra
        finally:
            slot.close()

    def _open(self, stage) -> tuple[Slot, object]:
        from posttrain.records.startup import CLOCK

        extra = {} if self.tokenizer is None else {"tokenizer": self.tokenizer}
        with CLOCK.phase("slot"):  # placement granted, actors sent off (they load in the background)
            slot, infra = open_first_slot(self.config, self.model_dir, self.run_dir, self.metrics, stage, **extra)
        self.tokenizer = infra.tokenizer
        granted = slot_parts(self.config, stage)
        whose = f"[{stage.name}] its own slot" if stage is not None else "slot 0 (every stage)"
        print(f"{whose}: {granted} = {_granted(slot.pg)} on node {slot.node}", flush=True)
        return slot, infra

    def close(self) -> None:
        if self.held is not None:
            self.held[0].close()


def wait_ready(pg, config: PipelineConfig, every_s: float = 30.0, stage=None) -> None:
    """Wait until Ray grants a placement group, saying every `every_s` what it waits for."""
    import ray

    ready, waited = pg.ready(), 0.0
    while not ray.wait([ready], timeout=every_s)[0]:
        waited += every_s
        print(
            f"waiting {waited:.0f}s for Ray to grant a slot of {slot_bundles(config, stage)} (the cluster has "
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
