"""The one RL driver loop: generate -> score -> advantage -> train -> sync weights.

Every step draws `prompts_per_step` tasks, samples `group_size` responses for each on the
rollout engines, scores them with the task's verifier, turns rewards into per-token
advantages (GRPO), takes one optimizer step on the DeepSpeed ranks, and pushes the new
weights into every engine before the next step, so rollouts are on-policy.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import ray

from posttrain.algo.advantages import grpo_advantages
from posttrain.config import RLStage
from posttrain.data.chat import render_prompt
from posttrain.data.tasks import TaskSampler, load_tasks
from posttrain.infra import Infra
from posttrain.metrics import Progress
from posttrain.rewards.base import score_safely
from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
from posttrain.types import (GenerationRequest, LossSpec, RewardResult, Sample, SamplingSettings, Task,
                             TrainSequence)


def generate(engines: list, tokenizer, tasks: list[Task], stage: RLStage, version: int) -> list[Sample]:
    """Spread the prompts over the engines (round robin) and collect G samples per task."""
    prompts = [tuple(render_prompt(tokenizer, t.messages)) for t in tasks]
    sampling = SamplingSettings(temperature=stage.temperature, top_p=stage.top_p)
    per_engine: list[list[int]] = [[] for _ in engines]
    for i in range(len(tasks)):
        per_engine[i % len(engines)].append(i)
    refs = [e.generate.remote([GenerationRequest(prompts[i], stage.group_size, stage.max_tokens) for i in idx], sampling)
            for e, idx in zip(engines, per_engine) if idx]
    results = ray.get(refs)
    samples: list[Sample] = []
    for idx, outs in zip([p for p in per_engine if p], results):
        for i, completions in zip(idx, outs):
            samples += [Sample(tasks[i], i, prompts[i], c, version) for c in completions]
    return sorted(samples, key=lambda s: s.group_id)


def score(samples: list[Sample], verifier) -> list[RewardResult]:
    return asyncio.run(score_safely(verifier, samples))


def build_batch(samples: list[Sample], rewards: list[RewardResult], stage: RLStage) -> tuple[list[TrainSequence], dict]:
    """Group samples by prompt, compute GRPO advantages, and lay them out per token.
    Flagged samples (ok=False) are left out of their group, never scored 0 by accident."""
    groups: dict[int, list[tuple[Sample, float]]] = {}
    for s, r in zip(samples, rewards):
        if r.ok:
            groups.setdefault(s.group_id, []).append((s, r.score))
    ordered = list(groups.values())
    adv_P_G = grpo_advantages([[r for _, r in g] for g in ordered], stage.algo.std_normalize, stage.algo.eps)
    seqs = []
    for group, advs in zip(ordered, adv_P_G):
        for (s, _), a in zip(group, advs):
            n = len(s.completion.token_ids)
            if n == 0:
                continue
            seqs.append(TrainSequence(token_ids=s.prompt_ids + s.completion.token_ids, prompt_len=len(s.prompt_ids),
                                      advantages=(a,) * n, loss_mask=(1.0,) * n, logp_engine=s.completion.logprobs))
    flat = [a for advs in adv_P_G for a in advs]
    stats = {
        "samples/flagged": float(sum(not r.ok for r in rewards)),
        "groups/zero_advantage_frac": float(np.mean([np.allclose(a, 0) for a in adv_P_G])) if adv_P_G else 1.0,
        "advantage/abs_mean": float(np.mean(np.abs(flat))) if flat else 0.0,
    }
    return seqs, stats


def logp_mismatch(seqs: list[TrainSequence], logp_trainer: list[list[float]]) -> float:
    """Mean |logp_trainer - logp_engine| over every sampled token: the two must agree."""
    diffs = [abs(a - b) for s, lt in zip(seqs, logp_trainer) for a, b in zip(lt, s.logp_engine)]
    return float(np.mean(diffs)) if diffs else 0.0


def run_rl(stage: RLStage, init_dir: Path, infra: Infra) -> Path:
    cfg = infra.config
    tasks = load_tasks(stage.tasks)
    sampler = TaskSampler(tasks, seed=cfg.seed)
    verifier = ReasoningGymVerifier(stage.reward.answer_format)
    spec = LossSpec(kind="pg", clip_eps_lo=stage.algo.clip_eps_lo, clip_eps_hi=stage.algo.clip_eps_hi,
                    kl_beta=stage.algo.kl_beta, temperature=stage.temperature)
    infra.trainers.load(str(init_dir), cfg.model.dtype, stage.lr, stage.warmup_steps, stage.algo.kl_beta)
    sync = infra.trainers.sync_weights(infra.engines)  # engines start from this stage's initial weights
    progress = Progress(stage.name, stage.steps)
    ckpt_root = infra.run_dir / "checkpoints" / stage.name
    for step in range(1, stage.steps + 1):
        started = time.perf_counter()
        samples = generate(infra.engines, infra.tokenizer, sampler.draw(stage.prompts_per_step), stage,
                           infra.trainers.version)
        generated = time.perf_counter()
        rewards = score(samples, verifier)
        seqs, batch_stats = build_batch(samples, rewards, stage)
        trained = infra.trainers.train_step(seqs, spec)
        train_done = time.perf_counter()
        sync = infra.trainers.sync_weights(infra.engines)
        row = _step_metrics(samples, rewards, seqs, trained, batch_stats, sync, infra.trainers.version,
                            started, generated, train_done)
        infra.metrics.log(stage.name, step, row)
        progress.update(step, reward=row["reward/mean"], mismatch=row["logp/mismatch"])
        if stage.save_every and step % stage.save_every == 0 and step < stage.steps:
            infra.trainers.save(str(ckpt_root / f"step_{step:06d}"))
    return Path(infra.trainers.save(str(ckpt_root / "final")))


def _step_metrics(samples, rewards, seqs, trained, batch_stats, sync, version, started, generated, train_done) -> dict:
    ok = [r.score for r in rewards if r.ok]
    lengths = [len(s.completion.token_ids) for s in samples]
    step_seconds = time.perf_counter() - started
    tokens = trained["sums"]["tokens"]
    return {
        "reward/mean": float(np.mean(ok)) if ok else 0.0,
        "reward/std": float(np.std(ok)) if ok else 0.0,
        "response_tokens/mean": float(np.mean(lengths)) if lengths else 0.0,
        "response_tokens/max": float(max(lengths, default=0)),
        "response/truncated_frac": float(np.mean([s.completion.finish_reason == "length" for s in samples])),
        "logp/mismatch": logp_mismatch(seqs, trained["logp"]),
        "loss/policy": trained["sums"]["loss"],
        "loss/clip_frac": trained["sums"]["clip_tokens"] / max(tokens, 1.0),
        "loss/kl": trained["sums"]["kl"] / max(tokens, 1.0),
        "grad/norm": trained["grad_norm"],
        "sync/seconds": sync["sync/seconds"],
        "time/generate_s": generated - started,
        "time/train_s": train_done - generated,
        "time/step_s": step_seconds,
        "throughput/tokens_per_s": float(sum(lengths)) / step_seconds,
        "policy/version": float(version),
        **batch_stats,
    }
