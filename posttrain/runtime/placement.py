"""Slots: a placement group holding one job's engines, trainer ranks and judge together.

A slot is reserved whole or not at all (Ray placement groups are atomic), so jobs that
wait for resources hold nothing while they wait and can never deadlock each other. Its
bundles are packed on one node (STRICT_PACK): the trainer ranks talk over loopback, and
the weights go from rank 0 to the engines through that node's object store.

Bundle layout: engines first, then trainer ranks, then the GRM judge when a stage needs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from posttrain.config import PipelineConfig

MIN_CPU = 0.01  # Ray refuses an empty bundle; an actor asking 0 CPUs still fits in this


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


def judge_config(config: PipelineConfig):
    """The vLLM judge a stage of this pipeline needs (the largest), or None."""
    judges = [
        s.reward.grm.judge
        for s in config.stages
        if s.type in ("rl", "experts", "mopd", "synthesis")
        and s.reward.grm is not None
        and s.reward.grm.judge.type == "vllm"
    ]
    return max(judges, key=lambda j: (j.num_cpus, j.num_gpus), default=None)


def slot_bundles(config: PipelineConfig) -> list[dict[str, float]]:
    def bundle(cpus: float, gpus: float) -> dict[str, float]:
        out = {"CPU": max(cpus, MIN_CPU)}
        if gpus:
            out["GPU"] = gpus
        return out

    r, t = config.rollout, config.trainer
    bundles = [bundle(r.num_cpus, r.num_gpus) for _ in range(engine_count(config))]
    bundles += [bundle(t.num_cpus, t.num_gpus) for _ in range(t.workers)]
    judge = judge_config(config)
    if judge is not None:
        bundles.append(bundle(judge.num_cpus, judge.num_gpus))
    return bundles


def engine_count(config: PipelineConfig) -> int:
    """Engines per slot: none when no stage samples from the policy."""
    sampling = any(s.type in ("rl", "experts", "mopd", "eval") for s in config.stages)
    return config.rollout.engines if sampling else 0


def slot_cpus(config: PipelineConfig) -> float:
    return sum(b["CPU"] for b in slot_bundles(config))


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

    return placement_group(slot_bundles(config), strategy="STRICT_PACK", name=f"posttrain-slot-{index}")


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

    pool = EnginePool([start(i) for i in range(engines)], start)
    trainers = TrainerGroup(
        config.trainer, config.seed, placement=[Placement(pg, engines + r) for r in range(config.trainer.workers)]
    )
    pool.on_restart = lambda engine: trainers.sync_weights([engine])
    judge = None
    if judge_config(config) is not None:
        from posttrain.rollout.judge import JudgeSlot

        judge = JudgeSlot(Placement(pg, engines + config.trainer.workers))
    return Slot(index=index, pg=pg, pool=pool, trainers=trainers, judge=judge, node=pg_node(pg))


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
    need: dict[str, float] = {}
    for b in slot_bundles(config):
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    out = []
    for index in range(slots):
        where = next((i for i, f in enumerate(free) if all(f.get(k, 0.0) + 1e-9 >= v for k, v in need.items())), None)
        if where is not None:
            for k, v in need.items():
                free[where][k] -= v
        out.append({"slot": index, "node": nodes[where]["node"] if where is not None else None, "resources": need})
    return out
