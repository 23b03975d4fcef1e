"""The trainer ranks as one object: shard a batch over them, step, and push weights.

`TrainerGroup.sync_weights` is the weight path, in one of two modes (`rollout.weight_sync`):
`object_store`, rank 0's full weights go once into Ray's object store and every rollout
engine loads that one copy in place; `collective`, vLLM's weight-transfer engine moves them
in buckets from rank 0 to every engine worker (`rollout.transfer_backend`: nccl or ipc on
GPU, posttrain's registered gloo backend on CPU; train/sync.py). Either way it waits for
every engine with a timeout and checks the version each reports, so a stuck or dead engine
is an error (EnginesTimedOut names the stuck ones), never a silent hang.
"""

from __future__ import annotations

import socket
import time
from dataclasses import replace

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from posttrain.algo.schedule import Decay
from posttrain.config import RolloutConfig, TrainerConfig
from posttrain.config.resources import transfer_backend, weight_sync_mode
from posttrain.errors import TrainingDiverged
from posttrain.rollout.pool import EnginesTimedOut
from posttrain.train.trainer import TrainerWorker
from posttrain.types import LoadedModel, LossSpec, TrainSequence, TrainStepResult, TrainSums

SYNC_TIMEOUT_S = 600
PORT_TRIES = 3  # rank processes started again on a new rendezvous port when the picked one was taken


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def shard_balanced(seqs: list[TrainSequence], ranks: int) -> list[list[int]]:
    """Indices per rank, longest first to the lightest rank: token counts stay even."""
    shards: list[list[int]] = [[] for _ in range(ranks)]
    loads = [0] * ranks
    for i in sorted(range(len(seqs)), key=lambda i: -len(seqs[i].token_ids)):
        r = loads.index(min(loads))
        shards[r].append(i)
        loads[r] += len(seqs[i].token_ids)
    return shards


def shard_by_prompt(seqs: list[TrainSequence], ranks: int) -> list[list[int]]:
    """As `shard_balanced`, but a group (the sequences sharing a prompt) stays on one rank,
    so that its prompt is computed once (`trainer.share_prompts`)."""
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(seqs):
        groups.setdefault(s.token_ids[: s.prompt_len], []).append(i)
    shards: list[list[int]] = [[] for _ in range(ranks)]
    loads = [0] * ranks
    for members in sorted(groups.values(), key=lambda m: -sum(len(seqs[i].token_ids) for i in m)):
        r = loads.index(min(loads))
        shards[r] += members
        loads[r] += sum(len(seqs[i].token_ids) for i in members)
    return shards


def split_minibatches(seqs: list[TrainSequence], count: int) -> list[list[int]]:
    """Batch indices in `count` contiguous runs of near-equal size (so a group's samples
    stay together where the sizes allow), never an empty one; fewer when the batch holds
    fewer sequences. The same split serves every epoch."""
    count = max(1, min(count, len(seqs)))
    size, extra = divmod(len(seqs), count)
    runs, start = [], 0
    for m in range(count):
        end = start + size + (m < extra)
        runs.append(list(range(start, end)))
        start = end
    return runs


def zero_gradient(seq: TrainSequence, spec: LossSpec) -> bool:
    """Whether the sequence's loss is exactly 0 at any weights: a policy-gradient loss with
    every advantage 0 (-min(r * 0, clip(r) * 0) = 0, whatever the off-policy weight), no KL
    term, no teacher term and no entropy bonus. Leaving it out of the passes leaves the
    gradient as it was, as long as its tokens still count in the token mean. (An adaptive
    bonus measures the entropy of every sequence, so none is left out even while it rests.)"""
    no_teacher = seq.teacher is None or spec.distill_coef == 0
    no_bonus = spec.entropy_coef == 0 and spec.entropy_target is None
    no_extra_term = spec.kl_beta == 0 and no_bonus and no_teacher
    return spec.kind == "pg" and no_extra_term and not any(seq.advantages)


def merge_results(results: list[TrainStepResult], order: list[list[int]], count: int) -> TrainStepResult:
    """The ranks' results as one, for a batch of `count` sequences: per-sequence lists back
    in batch order (`order[r]`: the batch index of each of rank r's sequences), sums added,
    the slowest rank's time. Skipping, applied steps and the grad norm (all-reduced) are
    every rank's alike: rank 0's."""
    logp: list[list[float]] = [[] for _ in range(count)]
    weights: list[list[float]] = [[] for _ in range(count)]
    sums = TrainSums()
    for idx, res in zip(order, results):
        for i, values, w in zip(idx, res.logp, res.weights):
            logp[i], weights[i] = values, w
        sums = sums + res.sums
    first = results[0]
    return replace(first, logp=logp, weights=weights, sums=sums, seconds=max(r.seconds for r in results))


RESTART_BYTES = 256 * 2**20


def weights_bytes(model_dir: str) -> int:
    from pathlib import Path

    return sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors"))


def get_all(refs: list, timeout: float | None = None, skip: tuple = ()) -> list:
    """`ray.get` of every rank's result, raising as soon as one rank fails: the others may be
    blocked in a collective with the dead rank and would never return. Refs in `skip` are
    waited for but not fetched here (a weight packet stays in the object store)."""
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=timeout, fetch_local=False)
        if not done:
            raise TimeoutError(f"trainer ranks gave no result within {timeout} s")
        if done[0] not in skip:
            try:
                ray.get(done[0])  # raises the rank's error (RayActorError if it died)
            except RayActorError:
                raise
            except Exception:
                _raise_death_first(pending)  # a collective failed because a peer rank died: say so
                raise
    return [None if r in skip else ray.get(r) for r in refs]


def engine_results(refs: list, engines: list, timeout: float, what: str) -> list:
    """`ray.get` of one call per engine (`refs[i]` on `engines[i]`); the engines that gave no
    answer within `timeout` are an EnginesTimedOut naming them (the pool replaces them)."""
    _, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=False)
    if pending:
        stuck = [engine for engine, ref in zip(engines, refs) if ref in pending]
        message = f"{what}: {len(stuck)} of {len(refs)} engines gave no answer within {timeout:.0f} s"
        raise EnginesTimedOut(message, stuck)
    return ray.get(refs)


def wait_sync(refs: list, timeout: float, engines: list | None = None, named: list | None = None) -> list:
    """Results of a weight-sync step on trainer ranks and engines together (`engines`: the
    engine of each of the last refs; `named`: the engines a member's EngineCallTimeout
    counts in). A peer that died is raised as its RayActorError (preferred over the errors it
    caused in the others); nothing within `timeout` is a GetTimeoutError naming how many
    never answered, an EnginesTimedOut when engines did not or a member names them."""
    engines = engines or []
    owner = dict(zip(refs[len(refs) - len(engines) :], engines))
    pending, deadline = list(refs), time.monotonic() + timeout
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not done:
            message = (
                f"weight sync: {len(pending)} of {len(refs)} trainer ranks and engines gave no answer within "
                f"{timeout:.0f} s (an engine or rank is stuck)"
            )
            stuck = [owner[ref] for ref in pending if ref in owner]
            raise EnginesTimedOut(message, stuck) if stuck else GetTimeoutError(message)
        try:
            ray.get(done[0])
        except RayActorError:
            raise
        except Exception as exc:
            _raise_death_first(pending)  # a broken collective: a peer that died is the cause to report
            if isinstance(getattr(exc, "cause", None), RayActorError):  # an engine rank 0 drove died
                raise exc.cause from exc  # type: ignore[attr-defined]
            if isinstance(exc, TimeoutError):  # a member's collective timed out: a peer is stuck
                cause = getattr(exc, "cause", None) or exc  # the member's own error, not Ray's traceback
                stuck = [named[i] for i in getattr(cause, "engine_indices", [])] if named else []
                if stuck:
                    raise EnginesTimedOut(f"{cause}; an engine is stuck", stuck) from exc
                raise GetTimeoutError(
                    f"weight sync: a collective timed out ({cause}); an engine or rank is stuck"
                ) from exc
            raise
    return ray.get(refs)


def _raise_death_first(others: list, grace_s: float = 15.0) -> None:
    """When a rank fails in a collective (gloo: connection closed), the cause is often a
    peer that died; its death surfaces a moment later. Raise that death if it comes."""
    done, _ = ray.wait(others, num_returns=len(others), timeout=grace_s, fetch_local=False)
    for ref in done:
        try:
            ray.get(ref)
        except RayActorError:
            raise
        except Exception:  # noqa: BLE001 - another rank's own error; the caller raises the first
            pass


class TrainerGroup:
    def __init__(
        self,
        config: TrainerConfig,
        seed: int,
        env: dict | None = None,
        placement: list | None = None,
        rollout: RolloutConfig | None = None,
    ):
        self.config, self.seed, self.env = config, seed, env or {}
        self.placement = placement or [None] * config.workers  # a placement-group bundle per rank
        self.workers = self._start()
        self.loaded = False
        self.version = 0
        self.nonfinite_in_a_row = 0
        rollout = rollout or RolloutConfig()  # how weights reach the engines (`rollout.weight_sync`)
        self.weight_sync = weight_sync_mode(rollout)
        self.bucket_bytes = int(rollout.sync_bucket_mib * 2**20)
        self.backend = transfer_backend(rollout)
        self.sync_timeout_s = rollout.sync_timeout_s
        self.sync_members: tuple | None = None  # the engines of the current weight-transfer group

    def _start(self) -> list:
        """Start the ranks; they meet at an address rank 0 picks on its own node (so a group
        can span nodes). Nothing here waits: `load` waits for the rendezvous."""
        workers = [
            TrainerWorker.remote_actor(
                r, self.config.workers, None, self.config, self.seed, self.env, self.placement[r]
            )
            for r in range(self.config.workers)
        ]
        address = self._address(workers[0])
        self.joining = [w.join.remote(address) for w in workers]
        self.ranks: list[dict] = []
        return workers

    def _address(self, rank0):
        """Where the ranks meet: (host, port) from rank 0's node, as a ref that Ray resolves
        before any rank's `join` runs."""
        return rank0.rendezvous.remote()

    def _joined(self) -> None:
        """Wait for the rendezvous; the first time, say where the ranks run if on several nodes."""
        if self.ranks:
            return
        self.ranks = get_all(self.joining)
        nodes = [r["node_id"] for r in self.ranks]
        if len(set(nodes)) > 1:
            named = {n["NodeID"]: f"{n['NodeManagerAddress']}:{n['NodeManagerPort']}" for n in ray.nodes()}
            where = ", ".join(f"rank {r['rank']} on {named.get(r['node_id'], r['node_id'])}" for r in self.ranks)
            print(
                f"[trainer] {len(self.ranks)} ranks on {len(set(nodes))} nodes, meeting at "
                f"{self.ranks[0]['address']}: {where}",
                flush=True,
            )

    def load(
        self,
        model_dir: str,
        dtype: str,
        lr: float,
        warmup_steps: int,
        kl_beta: float = 0.0,
        resume: bool = False,
        ref_dir: str | None = None,
        decay: Decay = "constant",
        total_steps: int = 0,
        min_lr_ratio: float = 1.0,
    ) -> LoadedModel:
        """Build the model and optimizer on every rank (the lr schedule: algo/schedule.py). A
        load after the first starts fresh rank processes (`restart_on_load`; auto: for models
        over 256 MB): a DeepSpeed engine dropped in place does not give its memory back
        (measured: SmolLM2 ranks grew from 3.3 to 9 GB over 5 loads and were OOM-killed); a
        small model's leftovers cost less than the seconds of a restart."""
        mode = self.config.restart_on_load
        if self.loaded and (mode == "always" or (mode == "auto" and weights_bytes(model_dir) > RESTART_BYTES)):
            self.restart()
        for attempt in range(PORT_TRIES):
            try:
                self._joined()
                break
            except Exception as exc:
                # the rendezvous port was free when picked and taken before rank 0 bound it
                # (another group starting on that node): new ranks on another port
                if "EADDRINUSE" not in str(exc) or attempt == PORT_TRIES - 1:
                    raise
                self.restart()
        schedule = (decay, total_steps, min_lr_ratio)
        args = (model_dir, dtype, lr, warmup_steps, kl_beta, resume, ref_dir, *schedule)
        refs = [w.load.remote(*args) for w in self.workers]
        facts = get_all(refs)
        self.sync_members = None  # another model: a new source, a new group
        self.loaded = True
        self.dtype = dtype
        return facts[0]

    def restart(self) -> None:
        """Fresh rank processes (after a rank died, or to free a dropped engine's memory)."""
        self.shutdown()
        self.workers = self._start()
        self.sync_members = None

    def train_step(self, seqs: list[TrainSequence], spec: LossSpec) -> TrainStepResult:
        """One RL step on all ranks: `spec.minibatches` optimizer steps per epoch (one by
        default), each minibatch sharded over the ranks. The policy version advances once
        (one weight sync follows), if any step was applied. Returns summed metrics and,
        per sequence, the trainer's logprobs of its response tokens before the first step
        and their off-policy weights (empty lists for a sequence left out of the passes:
        `trainer.skip_zero_gradient`)."""
        per_rank: list[list[list[TrainSequence]]] = [[] for _ in self.workers]
        order: list[list[int]] = [[] for _ in self.workers]  # batch index of each rank's results
        tokens, keep = [], self._kept(seqs, spec)
        for minibatch in split_minibatches(seqs, spec.minibatches):
            tokens.append(int(sum(sum(seqs[i].loss_mask) for i in minibatch)))  # the token mean's divisor
            minibatch = [i for i in minibatch if keep[i]]  # an empty minibatch still steps (Adam's moments move)
            shard = shard_by_prompt if self.config.share_prompts else shard_balanced
            for rank, idx in enumerate(shard([seqs[i] for i in minibatch], len(self.workers))):
                per_rank[rank].append([seqs[minibatch[j]] for j in idx])
                order[rank] += [minibatch[j] for j in idx]
        results = get_all(
            [w.train_minibatches.remote(shards, spec, tokens) for w, shards in zip(self.workers, per_rank)]
        )
        merged = replace(merge_results(results, order, len(seqs)), left_out=keep.count(False))
        self._count_nonfinite(merged.skipped)
        if merged.applied:
            self.version += 1
        return merged

    def _kept(self, seqs: list[TrainSequence], spec: LossSpec) -> list[bool]:
        """Which sequences the passes compute: all, or (`skip_zero_gradient`) those with a
        gradient, and at least one, so that every step measures the trainer's logprobs
        against the engine's (`logp/mismatch`) and the entropy."""
        keep = [not (self.config.skip_zero_gradient and zero_gradient(s, spec)) for s in seqs]
        if seqs and not any(keep):
            keep[0] = True
        return keep

    def _count_nonfinite(self, skipped: bool) -> None:
        """A step whose loss was NaN or inf on any rank was skipped by every rank (weights and
        optimizer state untouched); `max_nonfinite_steps` of them in a row stop the run."""
        self.nonfinite_in_a_row = self.nonfinite_in_a_row + 1 if skipped else 0
        if not skipped:
            return
        limit = self.config.max_nonfinite_steps
        print(
            f"[trainer] loss is NaN or inf: optimizer step skipped, weights unchanged "
            f"({self.nonfinite_in_a_row} in a row; the run stops at {limit})",
            flush=True,
        )
        if self.nonfinite_in_a_row >= limit:
            raise TrainingDiverged(
                f"training stopped: the loss was NaN or inf in {self.nonfinite_in_a_row} optimizer steps in a row "
                f"(trainer.max_nonfinite_steps={limit}); every one was skipped, so the weights are those "
                "of the last finite step. Lower the learning rate, check rewards and "
                "advantages for NaN/inf, or resume from the last checkpoint"
            )

    def logprobs(self, seqs: list[TrainSequence], temperature: float = 1.0) -> list[list[float]]:
        shards = shard_balanced(seqs, len(self.workers))
        results = get_all(
            [w.logprobs.remote([seqs[i] for i in idx], temperature) for w, idx in zip(self.workers, shards)]
        )
        out: list[list[float]] = [[] for _ in seqs]
        for idx, res in zip(shards, results):
            for i, values in zip(idx, res):
                out[i] = values
        return out

    def sync_weights(self, engines: list) -> dict:
        """Push the current weights into every engine; returns seconds and bytes moved."""
        if self.weight_sync == "collective":
            return self.broadcast_weights(engines)
        started = time.perf_counter()
        refs = [w.get_weights.remote(self.version) for w in self.workers]
        packet_ref = refs[0]
        get_all(refs, skip=(packet_ref,))
        refs = [e.update_weights.remote(packet_ref) for e in engines]
        versions = engine_results(refs, engines, SYNC_TIMEOUT_S, "weight sync")
        if any(v != self.version for v in versions):
            raise RuntimeError(f"weight sync: engines report versions {versions}, expected {self.version}")
        seconds = time.perf_counter() - started
        return {"sync/seconds": seconds, "sync/collective": 0.0}

    def broadcast_weights(self, engines: list) -> dict:
        """The collective push through vLLM's weight-transfer engine: rank 0 sends bucketed
        weights to every engine worker, which loads them in place. The group is formed again
        whenever its engines change (a replaced engine) or a push failed. Every step has a
        deadline (`rollout.sync_timeout_s`); an engine that died surfaces as its
        RayActorError, one that hangs as an EnginesTimedOut naming it (EnginePool.on_every_engine
        replaces either and pushes again)."""
        started = time.perf_counter()
        members = tuple(e._actor_id.hex() for e in engines)
        try:
            # an engine already dead is found here, before any engine has begun to load (a
            # reload cut short would cost the live engines a restart too)
            engine_results([e.info.remote() for e in engines], engines, self.sync_timeout_s, "weight sync: a ping")
            if self.sync_members != members:
                self._connect(engines)
                self.sync_members = members
            refs = [w.sync_send.remote(self.version) for w in self.workers]
            versions = wait_sync(refs, SYNC_TIMEOUT_S, named=engines)[0]
        except BaseException:
            self.sync_members = None
            raise
        if versions != [self.version] * len(engines):
            raise RuntimeError(f"weight sync: engines report versions {versions}, expected {self.version}")
        return {"sync/seconds": time.perf_counter() - started, "sync/collective": 1.0}

    def _connect(self, engines: list) -> None:
        """Every rank's vLLM `trainer_init`; rank 0's brings every engine worker into the group."""
        workers = engine_results(
            [e.transfer_workers.remote() for e in engines], engines, self.sync_timeout_s, "weight sync: a handshake"
        )
        refs = [
            w.sync_connect.remote(engines, workers, self.backend, self.bucket_bytes, self.sync_timeout_s)
            for w in self.workers
        ]
        wait_sync(refs, self.sync_timeout_s + 30, named=engines)

    def save(self, folder: str, extra: dict[str, str] | None = None) -> str:
        return get_all([w.save.remote(folder, extra) for w in self.workers])[0]

    def shutdown(self) -> None:
        for w in self.workers:
            ray.kill(w)
        self.workers = []
