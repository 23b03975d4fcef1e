"""End to end on the real stack (a vLLM engine actor, two DeepSpeed ranks, the partial-rollout
queue, the RL loop; tiny models): stale tokens of a partial-rollout run reach the trainer
with their off-policy weights (tis: min(pi_old / mu, C) exactly on them, 1 elsewhere;
exclude: no gradient from them), and an RL run whose token budget is below the starting
response length ends with its mean response length under the budget."""

import json
import math
import random
import shutil
from dataclasses import replace

import pytest
import ray

from posttrain.config import ExcludeCorrection, PipelineConfig, RLStage, RolloutConfig, TISCorrection, TrainerConfig
from posttrain.train.spec import loss_spec

pytestmark = pytest.mark.slow

TASKS = {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 40, "seed": 3}


def make_rambler(base_dir, target, steps: int = 60, most: int = 14):
    """The tiny model fine-tuned (plain torch, in process) to answer an arithmetic prompt
    with the answer, then 0..`most` filler words (uniformly), then the end of turn: its
    responses vary from 2 to about 16 tokens, so an iteration with lambda < 1 cuts some
    of them, and a budget of a few tokens leaves some of each group under it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.config import ReasoningGymTasks
    from posttrain.data.chat import render_prompt, render_response
    from posttrain.data.tasks import load_tasks

    shutil.copytree(base_dir, target)
    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    tasks = load_tasks(ReasoningGymTasks(families=[{"name": "basic_arithmetic"}], size=16, seed=99))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    rng = random.Random(0)
    for step in range(steps):
        optimizer.zero_grad()
        for k in range(4):
            task = tasks[(4 * step + k) % len(tasks)]
            prompt = render_prompt(tok, task.messages)
            ids = torch.tensor([prompt + render_response(tok, " ".join([task.answer] + ["so"] * rng.randint(0, most)))])
            logits = model(ids).logits[0, len(prompt) - 1 : -1]
            (torch.nn.functional.cross_entropy(logits, ids[0, len(prompt) :]) / 4).backward()
        optimizer.step()
    model.save_pretrained(target, safe_serialization=True)
    return target


@pytest.fixture(scope="module")
def rambler(tiny_dir, tmp_path_factory):
    return make_rambler(tiny_dir, tmp_path_factory.mktemp("rambler") / "m")


@pytest.fixture(scope="module")
def stack(ray_session, rambler):
    from posttrain.rollout.engine import RolloutEngine
    from posttrain.rollout.pool import EnginePool
    from posttrain.train.group import TrainerGroup

    rollout = RolloutConfig(max_model_len=256)
    trainer = TrainerConfig(workers=2, zero_stage=2, micro_batch_tokens=512)
    trainers = TrainerGroup(trainer, seed=0)
    pool = EnginePool([RolloutEngine.remote_actor(str(rambler), rollout, "float32", 0)], None)
    yield {"trainers": trainers, "pool": pool, "rollout": rollout, "trainer": trainer}
    pool.shutdown()
    trainers.shutdown()


def rl_run(stack, stage: RLStage, run_dir, model_dir):
    """An RLRun on the shared engine and ranks; every train_step call is recorded."""
    from transformers import AutoTokenizer

    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import Infra
    from posttrain.stages.rl import RLRun

    config = PipelineConfig(model={"name": "tiny"}, rollout=stack["rollout"], trainer=stack["trainer"], stages=[stage])
    trainers = stack["trainers"]
    calls = []
    real_step = type(trainers).train_step

    def recording(seqs, spec):
        out = real_step(trainers, seqs, spec)
        calls.append((seqs, spec, out))
        return out

    trainers.train_step = recording
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    infra = Infra(config, run_dir, trainers, stack["pool"], MetricsLog(run_dir), tokenizer, live_progress=False)
    return RLRun(stage, infra), calls


def metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def checksum(trainers) -> float:
    return ray.get(trainers.workers[0].parameter_checksum.remote())


def test_stale_tokens_get_tis_weights_and_exclude_removes_their_gradient(stack, rambler, tmp_path):
    from posttrain.stages.rl import train_and_save

    cap = 1.1
    stage = RLStage(
        name="partial",
        type="rl",
        lr=2e-3,
        steps=4,
        prompts_per_step=4,
        group_size=4,
        max_tokens=16,
        tasks=TASKS,
        partial={"lambda": 0.5, "max_staleness": 4, "correction": {"type": "tis", "cap": cap}},
        # the rambler's answers are mostly wrong (0): responses over 8 tokens score -1, so
        # every group has advantages to train on and the weights move between iterations
        budget={"tokens": 8, "margin": 1.0},
    )
    run, calls = rl_run(stack, stage, tmp_path / "run", rambler)
    final = train_and_save(run, rambler)
    rows = metrics(tmp_path / "run")
    stale_steps = moved = 0
    for (seqs, spec, out), row in zip(calls, rows):
        stale_weights = []
        for s, logp_old, weights in zip(seqs, out.logp, out.weights):
            for st, mu, m, lp, w in zip(s.stale, s.logp_engine, s.loss_mask, logp_old, weights):
                if st and m:
                    assert w == pytest.approx(min(math.exp(lp - mu), cap), rel=1e-5, abs=1e-6)
                    stale_weights.append(w)
                    if abs(lp - mu) > 1e-4:  # a token whose probability the steps since changed
                        assert w != 1.0
                        moved += 1
                else:
                    assert w == 1.0  # fresh tokens: no correction unless correction.fresh
        if stale_weights:
            stale_steps += 1
            assert row["offpolicy/weight_mean"] == pytest.approx(sum(stale_weights) / len(stale_weights), rel=1e-5)
            assert row["offpolicy/token_frac"] > 0
    assert stale_steps >= 1 and moved > 0, [r["offpolicy/token_frac"] for r in rows]

    # A batch whose only non-zero advantages sit on stale tokens, trained from the same
    # checkpoint with a fresh optimizer each time (Adam's momentum would move the weights
    # without any gradient): exclude leaves the weights as they were, tis moves them.
    seqs = next(seqs for seqs, _, out in calls if any(any(s.stale) for s in seqs))
    only_stale = [replace(s, advantages=tuple(float(st) for st in s.stale)) for s in seqs]
    trainers = stack["trainers"]
    moved = {}
    corrections = {"exclude": lambda cap: ExcludeCorrection(type="exclude"), "tis": lambda cap: TISCorrection(cap=cap)}
    for kind in ("exclude", "tis"):
        trainers.load(str(final), "float32", lr=1e-2, warmup_steps=0)
        before = checksum(trainers)
        out = trainers.train_step(only_stale, loss_spec("pg", correction=corrections[kind](cap)))
        moved[kind] = (checksum(trainers) != before, out.grad_norm)
    assert moved["exclude"] == (False, 0.0)
    assert moved["tis"][0] and moved["tis"][1] > 0


def test_budget_below_the_starting_length_is_learned(stack, rambler, tmp_path):
    """Budget 5 tokens, generation capped at ceil(5 x 1.25) = 7: most starting responses
    run over it and score -1, the shorter ones of each group score 0 or 1, so GRPO's
    advantage favours stopping early; the run ends with mean length under 5."""
    from posttrain.stages.rl import train_and_save

    stage = RLStage(
        name="budget",
        type="rl",
        lr=5e-3,
        steps=16,
        prompts_per_step=4,
        group_size=8,
        max_tokens=8,
        budget={"tokens": 5, "margin": 0.25},
        tasks=TASKS,
    )
    run, _ = rl_run(stack, stage, tmp_path / "run", rambler)
    train_and_save(run, rambler)
    lengths = [r["response_tokens/mean"] for r in metrics(tmp_path / "run")]
    assert lengths[0] > 5, lengths
    assert sum(lengths[-3:]) / 3 < 5, lengths
