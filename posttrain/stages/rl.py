"""The one RL driver loop: generate -> score -> advantage -> train -> sync weights.

Each iteration fills N = prompts_per_step x group_size trajectories (unfinished ones
from the partial-rollout queue first, then fresh groups), generates until a fraction
lambda has finished, and trains on the groups that are now complete: score, budget,
GRPO advantage, one optimizer step with per-token off-policy correction, then the new
weights go to every engine. With lambda = 1 this is synchronous on-policy GRPO. With
`rollout.overlap` the next iteration is sent to the engines before the trainer steps and
collected after it, so generation and training run side by side; the batch is then one
policy version old, corrected per token like any stale trajectory.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from posttrain.algo.advantages import grpo_advantages
from posttrain.algo.entropy import EntropyControl
from posttrain.config import RLStage, RolloutStage
from posttrain.data.chat import with_effort
from posttrain.data.hf import task_sampler
from posttrain.data.tools import render_task
from posttrain.errors import RunStopped
from posttrain.records.checkpoints import retain_checkpoints
from posttrain.records.faults import StepFaults
from posttrain.records.health import HealthMonitor, code_test_counts
from posttrain.records.metrics import Progress
from posttrain.records.rl_metrics import agent_metrics, cell_metrics, grm_metrics, grm_spread
from posttrain.records.rollouts import RolloutLog
from posttrain.records.run_state import ROLLOUT_STATE as STATE_FILE
from posttrain.records.startup import CLOCK, StageStartup
from posttrain.rewards.base import score_safely
from posttrain.rewards.router import reward_router
from posttrain.rollout.agent_loop import AgentLoop
from posttrain.rollout.budget import apply_budget, budget_at, task_budget
from posttrain.rollout.pool import Iteration
from posttrain.rollout.queue import Group, PartialRolloutQueue
from posttrain.runtime.infra import Infra
from posttrain.train.spec import loss_spec
from posttrain.types import (
    Completion,
    LossSpec,
    RewardResult,
    Sample,
    SamplingSettings,
    Task,
    TeacherTopK,
    TrainSequence,
    TrainStepResult,
    TrainSums,
)


def stage_loss_spec(stage: RolloutStage) -> LossSpec:
    """The trainer's loss for a rollout stage: its algo, its off-policy correction and the
    temperature its samples were drawn at, every setting as the config holds it."""
    return loss_spec("pg", stage.algo, stage.partial.correction, stage.temperature, stage.distill_weight())


def current_budget(stage: RolloutStage, step: int) -> int | None:
    b = stage.budget
    if b.anneal:
        return budget_at(step, b.anneal.start, b.anneal.end, b.anneal.steps, b.anneal.kind, b.anneal.every)
    return b.tokens


class RolloutTiming:
    """Generation time of one step. `overlapped` iterations ran while the trainer trained:
    only the wait for them after training counts as generation time."""

    def __init__(self):
        self.generate = self.busy = self.requeued = self.waited = self.hidden = 0.0
        self.engines = self.env = 0.0

    def add(self, timing: dict, overlapped: bool) -> None:
        self.generate += timing["waited"] if overlapped else timing["wall"]
        self.waited += timing["waited"] if overlapped else 0.0
        # engine time (per engine) that ran while the driver scored and trained, not waited for
        per_engine = timing["busy"] / max(timing["engines"], 1.0)
        self.hidden += max(0.0, per_engine - timing["waited"]) if overlapped else 0.0
        self.busy += timing["busy"]
        self.requeued += timing["requeued_by_engine_death"]
        self.engines = timing["engines"]
        self.env += timing["env_s"]

    def metrics(self) -> dict:
        return {
            "engine/busy_s": self.busy,
            "engine/count": self.engines,
            "engine/requeued_by_death": self.requeued,
            "time/generate_s": self.generate,
            "time/overlap_wait_s": self.waited,
            "time/overlap_hidden_s": self.hidden,
            "time/env_s": self.env,
        }


@dataclass
class Scored:
    """The groups a step drew and their scores, in one order: `samples` and `rewards` hold
    every trajectory of `groups`, group by group (with dynamic sampling, also the groups
    with no signal that are set aside)."""

    groups: list[Group]
    samples: list[Sample]
    rewards: list[RewardResult]
    metrics: dict
    timing: RolloutTiming
    draws: int = 0  # extra rollout iterations dynamic sampling drew

    def extend(self, more: Scored) -> None:
        self.groups += more.groups
        self.samples += more.samples
        self.rewards += more.rewards
        self.metrics["time/score_s"] += more.metrics["time/score_s"]


class RLRun:
    """State of one RL stage: the queue, the task sampler and the step counter."""

    def __init__(self, stage, infra: Infra, sampler=None, verifier=None):
        self.stage, self.infra = stage, infra
        self.startup = StageStartup(CLOCK)  # written in the first step's row
        with self.startup.phase("data"):
            self.sampler = sampler or task_sampler(stage.tasks, seed=infra.config.seed)
            self.verifier = verifier or reward_router(stage, infra.judge)
        self.queue = PartialRolloutQueue(stage.partial.max_staleness)
        self.sampling = SamplingSettings(temperature=stage.temperature, top_p=stage.top_p)
        self.agents = AgentLoop(infra.tokenizer, infra.config.rollout.max_model_len)
        self.uses_outcome = True  # rewards drive the advantage: unscored samples cannot be trained on
        self.rollouts = RolloutLog(infra.run_dir, stage.name)
        self.entropy = EntropyControl.of(stage.algo)  # the entropy bonus's weight (algo/entropy.py)
        self.fault_line: str | None = None  # the last step's faults line, for a stop's message
        self.step = 0

    # ------------------------------------------------------------ rollout

    def fill(self, version: int, budget: int | None) -> list:
        stage, tok = self.stage, self.infra.tokenizer
        size = stage.prompts_per_step * stage.group_size
        trajs = self.queue.unfinished(version, size)
        max_len = self.infra.config.rollout.max_model_len
        rejected = 0
        while len(trajs) < size:
            task = self.sampler.draw(1)[0]
            prompt = tuple(render_task(tok, with_effort(task.messages, stage.budget.effort), task.entry.get("tools")))
            if len(prompt) >= max_len:  # a prompt that cannot fit is counted, never a crash
                self.queue.reject(stage.group_size, "prompt_too_long")
                rejected += 1
                if rejected > len(self.sampler.tasks):
                    raise ValueError(f"stage {stage.name}: no task prompt fits rollout.max_model_len={max_len}")
                continue
            reference = len(tok(task.answer, add_special_tokens=False)["input_ids"]) if task.answer else None
            tokens = task_budget(budget, stage.budget.multiple, reference)
            tokens = task.entry.get("budget", tokens)  # a (domain, effort) cell's own budget
            limit = task.entry.get("max_tokens", stage.max_tokens)  # MOPD: the cell's effort sets it
            cap = limit if tokens is None else min(limit, math.ceil(tokens * (1 + stage.budget.margin)))
            trajs += self.queue.add_group(
                task, prompt, stage.group_size, min(cap, max_len - len(prompt)), tokens, version
            )
        return trajs

    def iterate(self, version: int, budget: int | None) -> tuple[list[Group], RolloutTiming]:
        """Groups to train on: those an overlapped iteration completed, else rollout
        iterations until at least one group is complete."""
        timing = RolloutTiming()
        groups = self.queue.pop_complete(version)
        while not groups:
            timing.add(self.land(self.launch(version, budget)), overlapped=False)
            groups = self.queue.pop_complete(version)
        return groups, timing

    def collect(self, version: int, budget: int | None) -> tuple[Scored, Iteration | None]:
        """The step's scored groups, and with overlap the next step's iteration, sent off
        before scoring (dynamic sampling: after its draws, which need the scores)."""
        groups, timing = self.iterate(version, budget)
        if self.stage.dynamic_sampling is None:
            ahead = self.launch_ahead(version)  # overlap: the next batch generates while this one trains
            return self.scored(groups, timing), ahead
        drawn = self.draw_until_signal(self.scored(groups, timing), version, budget)
        return drawn, self.launch_ahead(version)

    def draw_until_signal(self, drawn: Scored, version: int, budget: int | None) -> Scored:
        """Dynamic sampling: more rollout iterations, through the queue (a cut trajectory
        waits there for the next step), until `prompts_per_step` groups have signal or
        `max_draws` iterations were drawn."""
        cap = self.stage.dynamic_sampling.max_draws
        while drawn.draws < cap and self.with_signal(drawn.groups, drawn.rewards) < self.stage.prompts_per_step:
            drawn.draws += 1
            drawn.timing.add(self.land(self.launch(version, budget)), overlapped=False)
            more = self.queue.pop_complete(version)
            drawn.extend(self.scored(more, drawn.timing, start=len(drawn.groups)))
        return drawn

    def resampled(self, drawn: Scored) -> dict:
        """Dynamic sampling's metrics; a step that hit `max_draws` short of its groups with
        signal says so on the console."""
        if self.stage.dynamic_sampling is None:
            return {}
        signal = self.with_signal(drawn.groups, drawn.rewards)
        short = max(0, self.stage.prompts_per_step - signal)
        if short:
            console(
                f"dynamic sampling: {self.stage.name} step {self.step} trains {signal} of "
                f"{self.stage.prompts_per_step} groups with signal after {drawn.draws} extra draws (max_draws)"
            )
        return {
            "groups/resampled": float(len(drawn.groups) - signal),
            "groups/draws": float(drawn.draws),
            "groups/with_signal": float(signal),
            "groups/short": float(short),
        }

    def launch(self, version: int, budget: int | None) -> Iteration:
        """Fill an iteration and send it to the engines, without waiting."""
        trajs = self.fill(version, budget)
        return self.infra.pool.start_iteration(trajs, self.sampling, self.stage.partial.lam, version)

    def land(self, iteration: Iteration) -> dict:
        """Wait for an iteration; agent turns that ended get their tool results (the wait
        on the tools is `env_s`)."""
        timing = self.infra.pool.finish_iteration(iteration)
        started = time.perf_counter()
        self.agents.advance(self.queue, iteration.trajs, iteration.version)  # those episodes go on
        return {**timing, "env_s": time.perf_counter() - started}

    # ------------------------------------------------------------ scoring and batch

    def samples(self, groups: list[Group], start: int = 0) -> list[Sample]:
        """One sample per trajectory; a group's index in the step counts from `start`."""
        out = []
        for index, group in enumerate(groups, start=start):
            for t in group.trajectories:
                text = self.infra.tokenizer.decode(t.response_ids, skip_special_tokens=True)
                completion = Completion(tuple(t.response_ids), tuple(t.logp_behaviour), text, t.finish_reason)
                out.append(
                    Sample(
                        group.task,
                        index,
                        t.prompt_ids,
                        completion,
                        t.oldest_version(0),
                        env=t.env,
                        action_mask=tuple(t.action_mask),
                    )
                )
        return out

    def score(self, groups: list[Group], samples: list[Sample]) -> list[RewardResult]:
        rewards = asyncio.run(score_safely(self.verifier, samples))
        budgets = [g.budget for g in groups for _ in g.trajectories]
        return [apply_budget(r, s.model_tokens, b) for r, s, b in zip(rewards, samples, budgets)]

    def scored(self, groups: list[Group], timing: RolloutTiming, start: int = 0) -> Scored:
        """Samples of the groups, the work before scoring (`prepare`) and their rewards."""
        samples = self.samples(groups, start)
        metrics = self.prepare(groups)
        score_start = time.perf_counter()
        rewards = self.score(groups, samples)
        metrics["time/score_s"] = time.perf_counter() - score_start
        return Scored(groups, samples, rewards, metrics, timing)

    def rows(self, groups: list[Group], rewards: list[RewardResult]) -> list[list[tuple]]:
        """Each group's trainable (trajectory, reward) pairs: flagged samples (ok=False, only
        when the reward is trained on: `uses_outcome`) and empty responses left out."""
        flat, rows = iter(rewards), []
        for group in groups:
            pairs = [(t, next(flat)) for t in group.trajectories]
            rows.append([(t, r) for t, r in pairs if (r.ok or not self.uses_outcome) and t.response_ids])
        return rows

    def advantages(self, rows: list[list[tuple]]) -> list[list[float]]:
        return grpo_advantages(
            [[r.score for _, r in row] for row in rows], self.stage.algo.std_normalize, self.stage.algo.eps
        )

    def with_signal(self, groups: list[Group], rewards: list[RewardResult]) -> int:
        """How many of the groups have a nonzero advantage (rewards not all equal)."""
        return sum(not np.allclose(advs, 0) for advs in self.advantages(self.rows(groups, rewards)))

    def batch(self, groups: list[Group], rewards: list[RewardResult], version: int) -> tuple[list[TrainSequence], dict]:
        """GRPO advantages per group, laid out per token with each token's staleness.
        Flagged samples (ok=False) and empty responses are dropped and counted (flagged
        ones only when the reward is trained on: `uses_outcome`). With dynamic sampling, a
        group whose advantages are all zero is set aside too (`zero_signal`)."""
        rows = self.rows(groups, rewards)
        usable = sum(r.ok or not self.uses_outcome for r in rewards)
        self.queue.dropped["reward_flagged"] += len(rewards) - usable
        self.queue.dropped["empty_response"] += usable - sum(map(len, rows))
        adv_P_G = self.advantages(rows)
        if self.stage.dynamic_sampling is not None:
            for row, advs in zip(rows, adv_P_G):
                if np.allclose(advs, 0):
                    self.queue.dropped["zero_signal"] += len(row)
                    row.clear()
        seqs = []
        for group, row, advs in zip(groups, rows, adv_P_G):
            for (t, _), per_token in zip(row, self.token_advantages(group, [t for t, _ in row], advs)):
                seqs.append(
                    TrainSequence(
                        token_ids=t.prompt_ids + tuple(t.response_ids),
                        prompt_len=len(t.prompt_ids),
                        advantages=tuple(per_token),
                        loss_mask=tuple(map(float, t.action_mask)),
                        logp_engine=tuple(t.logp_behaviour),
                        stale=tuple(float(v < version) for v in t.token_versions),
                        teacher=self.teacher_of(t),
                    )
                )
        staleness = [version - t.oldest_version(version) for row in rows for t, _ in row]
        stats = {
            "groups/zero_advantage_frac": float(np.mean([np.allclose(a, 0) for a in adv_P_G])) if adv_P_G else 1.0,
            "staleness/mean": float(np.mean(staleness)) if staleness else 0.0,
            "staleness/max": float(max(staleness, default=0)),
        }
        return seqs, stats

    def token_advantages(self, group: Group, trajs: list, advs: list[float]) -> list[list[float]]:
        """Per-token advantages of a group's trained trajectories: GRPO's one value per
        response, on every token. MOPD overrides this with the teacher's dense signal."""
        return [[a] * len(t.response_ids) for t, a in zip(trajs, advs)]

    def teacher_of(self, traj) -> TeacherTopK | None:
        """A teacher's top-k next tokens at each of the trajectory's response positions, for
        the loss's distillation term (MOPD with distill_topk); None: no such term."""
        return None

    def prepare(self, groups: list[Group]) -> dict:
        """Work between rollout and scoring (MOPD: the teachers' logprobs); its metrics."""
        return {}

    # ------------------------------------------------------------ the loop

    def run(self) -> None:
        stage, infra = self.stage, self.infra
        spec = stage_loss_spec(stage)
        progress = Progress(stage.name, stage.steps, live=infra.live_progress)
        lengths = (stage.max_tokens, infra.config.rollout.max_model_len)
        health = HealthMonitor(
            infra.config.health, stage.name, stage.partial.max_staleness, outcome=self.uses_outcome, lengths=lengths
        )
        while not self.done():
            startup = self.startup.first_step()  # {} after the first
            started = time.perf_counter()
            before = (lost(self.queue), self.queue.trained)
            version, budget = infra.trainers.version, current_budget(stage, self.step + 1)
            drawn, ahead = self.collect(version, budget)
            groups, samples, rewards = drawn.groups, drawn.samples, drawn.rewards
            rollout, timing = drawn.metrics, drawn.timing
            seqs, batch_stats = self.batch(groups, rewards, version)
            self.queue.mark_trained(len(seqs))
            train_start = time.perf_counter()
            step_spec = replace(spec, entropy_coef=self.entropy.weight())
            trained = infra.trainers.train_step(seqs, step_spec) if seqs else TrainStepResult(empty=True)
            train_seconds = time.perf_counter() - train_start
            if ahead is not None:  # the engines take the new weights once it is in
                timing.add(self.land(ahead), overlapped=True)
            accounting = self.queue.check()
            sync = infra.pool.on_every_engine(infra.trainers.sync_weights) if seqs else {"sync/seconds": 0.0}
            self.step += 1
            row = step_metrics(samples, rewards, seqs, trained, started, train_seconds)
            row.update(rollout, **timing.metrics(), **batch_stats, **accounting, **sync, **self.resampled(drawn))
            row.update(self.step_facts(row, version, budget), **code_test_counts(rewards))
            row.update(sample_shares(rewards, self.queue, before), **{"loss/entropy_coef": step_spec.entropy_coef})
            row.update(self.faults(samples, rewards), **time_remainder(row), **startup)
            self.entropy.update(row["policy/entropy"] if trained.sums.tokens else math.nan)
            row.update(health.step(self.step, row))  # warnings and health/ keys (records/health.py)
            self.record(row, samples, rewards, groups, progress)
            self.after_step()
            self.stop_if_no_signal(health)

    def done(self) -> bool:
        return self.step >= self.stage.steps

    def faults(self, samples: list[Sample], rewards: list[RewardResult]) -> dict:
        """The step's fault counts (records/faults.py); one console line when there are any."""
        found = StepFaults.of(samples, rewards)
        self.fault_line = found.line(self.stage.name, self.step, str(self.infra.run_dir))
        if self.fault_line is not None:
            console(f"faults: {self.fault_line}")
        return found.metrics()

    def stop_if_no_signal(self, health: HealthMonitor) -> None:
        """`health.stop_on`: a run that has learned nothing for `stop_after` steps stops,
        its records and a checkpoint of this step written (so nothing is lost)."""
        reason = health.stop_reason()
        if reason is None:
            return
        if health.fault_flags and self.fault_line:
            reason += f". Faults: {self.fault_line}"
        folder = self.infra.run_dir / "checkpoints" / self.stage.name / f"step_{self.step:06d}"
        if not (folder / STATE_FILE).is_file():
            self.save(folder)
            retain_checkpoints(self.stage, self.infra.run_dir, STATE_FILE)
        raise RunStopped(f"{reason}. Checkpoint: {folder}")

    def launch_ahead(self, version: int) -> Iteration | None:
        """With `rollout.overlap`, start the next step's iteration on the current weights
        (none after the last step)."""
        if not self.infra.config.rollout.overlap or self.step + 1 >= self.stage.steps:
            return None
        return self.launch(version, current_budget(self.stage, self.step + 2))

    def step_facts(self, row: dict, version: int, budget: int | None) -> dict:
        """Idle shares over the whole step, the queue's depth, the budget and the version."""
        step_s = max(row["time/step_s"], 1e-9)
        return {
            "engine/idle_frac": 1.0 - row["engine/busy_s"] / (step_s * max(row["engine/count"], 1.0)),
            "trainer/idle_frac": 1.0 - row["time/train_s"] / step_s,
            "queue/depth": float(sum(not t.finished for g in self.queue.groups.values() for t in g.trajectories)),
            "budget/tokens": float(budget) if budget is not None else float(self.stage.max_tokens),
            "policy/version": float(version),
        }

    def record(self, row: dict, samples, rewards, groups: list[Group], progress: Progress) -> None:
        """Log the step's row and samples; checkpoint every `save_every` steps."""
        stage = self.stage
        self.infra.metrics.log(stage.name, self.step, row)
        budgets = [g.budget for g in groups for _ in g.trajectories]
        self.rollouts.write(self.step, samples, rewards, budgets, stage.budget.effort)
        progress.update(self.step, reward=row["reward/mean"], mismatch=row["logp/mismatch"])
        if stage.save_every and self.step % stage.save_every == 0 and self.step < stage.steps:
            self.save(self.infra.run_dir / "checkpoints" / stage.name / f"step_{self.step:06d}")
            retain_checkpoints(stage, self.infra.run_dir, STATE_FILE)

    def after_step(self) -> None:
        """Called after each step is logged (a benchmark's held-out eval)."""

    def save(self, folder: Path) -> str:
        """Checkpoint with the queue, the data position and the step, in one atomic folder."""
        state = {
            "step": self.step,
            "sampler_position": self.sampler.position,
            "version": self.infra.trainers.version,
            "queue": self.queue.to_json(),
            "entropy": self.entropy.state(),
        }
        return self.infra.trainers.save(str(folder), extra={STATE_FILE: json.dumps(state), **self.extra_files()})

    def extra_files(self) -> dict[str, str]:
        """More files for every checkpoint (MOPD: the teacher manifest)."""
        return {}

    def restore(self, state: dict) -> None:
        self.step = state["step"]
        self.sampler.position = state["sampler_position"]
        self.queue = PartialRolloutQueue.from_json(state["queue"])
        self.entropy.restore(state.get("entropy"))


def console(line: str) -> None:
    """A line on stderr, above the live progress line (which is rewritten in place)."""
    stream = sys.stderr
    clear = "\r\033[K" if stream.isatty() else ""
    stream.write(f"{clear}{line}\n")
    stream.flush()


def lost(queue: PartialRolloutQueue) -> int:
    """Samples dropped for a fault (unscored, empty, stale, prompt too long): all dropped but
    the groups dynamic sampling set aside by design (`zero_signal`), which are no loss."""
    return sum(queue.dropped.values()) - queue.dropped["zero_signal"]


def sample_shares(rewards: list[RewardResult], queue: PartialRolloutQueue, before: tuple[int, int]) -> dict:
    """This step's shares of samples: unscored (no verifier could score them) and dropped
    (left out of training for a fault: `lost`), of those the step settled (trained or
    dropped for a fault)."""
    dropped = lost(queue) - before[0]
    settled = dropped + queue.trained - before[1]
    return {
        "samples/scored": float(sum(r.ok for r in rewards)),
        "samples/unscored_frac": float(np.mean([not r.ok for r in rewards])) if rewards else 0.0,
        "samples/dropped_frac": dropped / settled if settled else 0.0,
    }


def step_metrics(samples, rewards, seqs, trained: TrainStepResult, started, train_seconds) -> dict:
    """The step's row. A step with nothing to train on (`TrainStepResult(empty=True)`: every
    sample unscored or empty) took no optimizer step and is logged as skipped."""
    scored = [r.score for r in rewards if r.ok]
    lengths = [s.model_tokens for s in samples]
    sums = trained.sums
    tokens = sums.tokens  # of the sequences the passes computed (trainer.skip_zero_gradient leaves some out)
    batch_tokens = float(sum(sum(s.loss_mask) for s in seqs))  # the token mean's divisor
    step_seconds = time.perf_counter() - started
    by_source: dict[str, list[float]] = {}
    for r in rewards:
        if r.ok:
            by_source.setdefault(r.source, []).append(r.score)
    return {
        **{f"reward_source/{name}": float(np.mean(scores)) for name, scores in by_source.items()},
        **agent_metrics(samples),
        **cell_metrics(samples, rewards),
        **grm_metrics(rewards),
        **grm_spread(samples, rewards),
        "reward/mean": float(np.mean(scored)) if scored else 0.0,
        "reward/std": float(np.std(scored)) if scored else 0.0,
        "reward/over_budget_frac": float(np.mean([r.over_budget for r in rewards])) if rewards else 0.0,
        "response_tokens/mean": float(np.mean(lengths)) if lengths else 0.0,
        "response_tokens/p50": float(np.percentile(lengths, 50)) if lengths else 0.0,
        "response_tokens/p90": float(np.percentile(lengths, 90)) if lengths else 0.0,
        "response_tokens/max": float(max(lengths, default=0)),
        "tokens/trained": batch_tokens,
        "response/truncated_frac": float(np.mean([s.completion.finish_reason == "length" for s in samples])),
        "logp/mismatch": logp_mismatch(seqs, trained.logp),
        "offpolicy/token_frac": sums.stale_tokens / max(tokens, 1.0),
        "offpolicy/weight_mean": sums.offpolicy_weight / max(sums.stale_tokens, 1.0),
        "offpolicy/fresh_weight_mean": fresh_weight_mean(sums),
        "policy/entropy": sums.entropy / max(tokens, 1.0),
        "train/padding_frac": 1.0 - sums.sequence_tokens / max(sums.positions, 1.0),
        "loss/policy": sums.loss,
        "loss/clip_frac": sums.clip_tokens / max(tokens, 1.0),
        "loss/kl": sums.kl / max(tokens, 1.0),
        "loss/distill_kl": sums.distill_kl / max(tokens, 1.0),
        "grad/norm": trained.grad_norm,
        "train/skipped_nonfinite": float(trained.skipped),
        "train/skipped_empty": float(trained.empty),
        "train/zero_gradient_frac": trained.left_out / len(seqs) if seqs else 0.0,
        "time/train_s": train_seconds,
        "time/step_s": step_seconds,
        "throughput/tokens_per_s": batch_tokens / step_seconds,
    }


STEP_PHASES = ("time/generate_s", "time/env_s", "time/teachers_s", "time/score_s", "time/train_s", "sync/seconds")
"""The phases of an RL step in the driver's wall time (with overlap, generation counts only
its wait after training); what they leave of `time/step_s` is `time/other_s`."""


def time_remainder(row: dict) -> dict:
    """`time/other_s`: the step's wall time not in a named phase (filling the batch, decoding,
    advantages, records): small, or a phase is missing."""
    return {"time/other_s": row["time/step_s"] - sum(row.get(key, 0.0) for key in STEP_PHASES)}


def fresh_weight_mean(sums: TrainSums) -> float:
    """Mean correction weight of the fresh sampled tokens: 1 unless `correction.fresh`."""
    return sums.fresh_weight / sums.fresh_tokens if sums.fresh_tokens else 1.0


def logp_mismatch(seqs: list[TrainSequence], logp_trainer: list[list[float]]) -> float:
    """Mean |logp_trainer - logp_engine| over the fresh sampled tokens (generated by the
    weights the trainer held before this step): the two must agree. Tokens out of the
    loss (tool messages) were never sampled and are left out."""
    diffs = [
        abs(a - b)
        for s, lt in zip(seqs, logp_trainer)
        for a, b, st, m in zip(lt, s.logp_engine, s.stale or [0.0] * len(lt), s.loss_mask)
        if m and not st
    ]
    return float(np.mean(diffs)) if diffs else 0.0


class FixedTasks:
    """A sampler that hands out a fixed list of tasks in order (again from the start when
    more are drawn than it holds)."""

    def __init__(self, tasks: list[Task]):
        self.tasks, self.position = list(tasks), 0

    def draw(self, count: int) -> list[Task]:
        out = [self.tasks[(self.position + i) % len(self.tasks)] for i in range(count)]
        self.position += count
        return out


def generate_scored(stage, infra: Infra, tasks: list[Task], verifier, version: int, budget: int | None) -> Scored:
    """Each of `tasks` generated `stage.group_size` times to its end, with the weights the
    engines serve as `version` (every trajectory finished, agent episodes played out), and
    scored by `verifier`: the eval stage's pass over a fixed list. `stage` (an RL stage's
    schema) sets the sampling, the token budgets and the prompts per pass (`len(tasks)`)."""
    run = RLRun(stage.model_copy(update={"prompts_per_step": len(tasks)}), infra, FixedTasks(tasks), verifier)
    trajs = run.fill(version, budget)
    while trajs:
        infra.pool.run_iteration(trajs, run.sampling, 1.0, version)
        run.agents.advance(run.queue, trajs, version)
        trajs = run.queue.unfinished(version, len(tasks) * stage.group_size)
    return run.scored(run.queue.pop_complete(version), RolloutTiming())


def run_rl(stage: RLStage, init_dir: Path, infra: Infra, resume_dir: Path | None = None) -> Path:
    """Run an RL stage from `init_dir`, or continue it from one of its own checkpoints."""
    return train_and_save(RLRun(stage, infra), init_dir, resume_dir)


def train_and_save(run: RLRun, init_dir: Path, resume_dir: Path | None = None) -> Path:
    """Load the trainer (from `init_dir`, or a checkpoint of this stage), run, save `final`."""
    stage, infra = run.stage, run.infra
    per_step = stage.algo.minibatches * stage.algo.epochs  # optimizer steps per RL step
    with run.startup.phase("trainers"):
        load_trainers(run, init_dir, resume_dir, per_step)
    run.verifier.start()  # a judge engine loads while the first rollouts run
    if resume_dir is not None:
        state = json.loads((resume_dir / STATE_FILE).read_text())
        infra.trainers.version = state["version"]
        run.restore(state)
        grm = run.verifier.sources.get("grm")
        if grm is not None:  # judgements made before the crash are not asked for again
            grm.preload(run.rollouts.scoreboard_entries())
    with run.startup.phase("engines"):  # what is left of their load once the trainer ranks are in
        infra.pool.wait_ready()
    with run.startup.phase("first_push"):
        infra.pool.on_every_engine(infra.trainers.sync_weights)  # engines start from this stage's weights
    try:
        run.run()
    finally:
        run.verifier.close()
    return Path(run.save(infra.run_dir / "checkpoints" / stage.name / "final"))


def load_trainers(run: RLRun, init_dir: Path, resume_dir: Path | None, per_step: int) -> None:
    """The trainer ranks load the stage's start (or its checkpoint, optimizer state included)."""
    stage, infra = run.stage, run.infra
    infra.trainers.load(
        str(resume_dir or init_dir),
        infra.config.model.dtype,
        stage.lr,
        stage.warmup_steps * per_step,  # warm-up counts RL steps
        stage.algo.kl_beta,
        resume=resume_dir is not None,
        ref_dir=str(init_dir),  # the KL reference stays the stage's start after a resume
        decay=stage.lr_decay,
        total_steps=stage.steps * per_step,
        min_lr_ratio=stage.min_lr_ratio,
    )
