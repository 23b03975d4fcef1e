"""Would packing pay? Forward + backward time of real RL batches in three layouts.

Takes each step's batch saved in a run folder (`rollouts/**.jsonl`, as bench/padding.py)
and times a forward and backward pass (the sum of the logits of the response window as
the loss) of the run's model, on this process's threads, in three layouts of the same
sequences:

  padded   the trainer's: sorted by length, micro-batches of `micro_batch_tokens`, each
           padded to its longest sequence
  packed   sequences packed first-fit into rows no longer than the longest one, rows into
           micro-batches of the same token size; a block-diagonal causal mask (4-D, SDPA)
  shared   one row per group: its prompt once, then each response, which sees the prompt
           and itself only (a 4-D mask), positions as if alone

Layouts are timed in turn, `--repeats` times; the minimum per layout is reported (the
machine is shared). Token ids are random: timing depends on shapes only.

With `--trainer`, it times the trainer's whole step instead (one DeepSpeed ZeRO-2 rank in
this process: forward, backward, optimizer step) with `trainer.share_prompts` off (the
padded layout) and on (the shared layout), on the same batches.

    .venv/bin/python bench/packing.py RUN_DIR [--stage mopd] [--steps 4] [--repeats 3] [--trainer]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from padding import batches  # noqa: E402


def padded_layout(lengths: list[tuple[int, int]], micro: int) -> list[list[list[tuple[int, int]]]]:
    """Micro-batches of rows, each row a list of (prompt, response) segments (one here)."""
    rows = sorted(lengths, key=sum)
    out, current, longest = [], [], 0
    for seg in rows:
        longest_if = max(longest, sum(seg))
        if current and longest_if * (len(current) + 1) > micro:
            out.append(current)
            current, longest_if = [], sum(seg)
        current.append([seg])
        longest = longest_if
    return out + ([current] if current else [])


def packed_layout(lengths, micro):
    capacity = max(sum(seg) for seg in lengths)
    rows: list[list[tuple[int, int]]] = []
    for seg in sorted(lengths, key=sum, reverse=True):
        row = next((r for r in rows if sum(map(sum, r)) + sum(seg) <= capacity), None)
        if row is None:
            rows.append([seg])
        else:
            row.append(seg)
    per_batch = max(1, micro // capacity)
    return [rows[i : i + per_batch] for i in range(0, len(rows), per_batch)]


def shared_layout(groups: list[tuple[int, list[int]]], micro):
    """Rows: (prompt, [responses]) per group; micro-batches by padded size."""
    rows = sorted(groups, key=lambda g: g[0] + sum(g[1]))
    out, current, longest = [], [], 0
    for g in rows:
        size = g[0] + sum(g[1])
        longest_if = max(longest, size)
        if current and longest_if * (len(current) + 1) > micro:
            out.append(current)
            current, longest_if = [], size
        current.append(g)
        longest = longest_if
    return out + ([current] if current else [])


def tensors_for_rows(rows, layout: str, vocab: int):
    """input ids, mask, position ids, response positions. `padded` gets the trainer's 2-D
    padding mask (Hugging Face builds the causal mask), the others a 4-D boolean one."""
    import torch

    shared = layout == "shared"

    def segments(row):
        if shared:
            prompt, responses = row
            return [("prompt", prompt)] + [("response", r) for r in responses]
        return [item for p, r in row for item in (("prompt", p), ("response", r))]

    length = max(sum(n for _, n in segments(r)) for r in rows)
    ids = torch.randint(3, vocab, (len(rows), length))
    mask = torch.zeros(len(rows), 1, length, length, dtype=torch.bool)
    pos = torch.zeros(len(rows), length, dtype=torch.long)
    keep = torch.zeros(len(rows), length, dtype=torch.bool)
    for b, row in enumerate(rows):
        at, prompt_at, prompt_len = 0, 0, 0
        for kind, n in segments(row):
            causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
            mask[b, 0, at : at + n, at : at + n] = causal
            if kind == "prompt":
                prompt_at, prompt_len = at, n
                pos[b, at : at + n] = torch.arange(n)
            else:
                mask[b, 0, at : at + n, prompt_at : prompt_at + prompt_len] = True  # sees its prompt
                pos[b, at : at + n] = prompt_len + torch.arange(n)
                keep[b, at : at + n] = True
            at += n
        mask[b, 0, at:, at:] = torch.eye(length - at, dtype=torch.bool)  # padding sees itself: no NaN
    if layout == "padded":
        mask = mask[:, 0].diagonal(dim1=-2, dim2=-1).long()  # 1 on the sequence, 0 on padding
        pos = None
    return ids, mask, pos, keep


def step_time(model, micro_batches: list[tuple]) -> float:
    started = time.perf_counter()
    for ids, mask, pos, keep in micro_batches:
        hidden = model.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).last_hidden_state
        logits = model.lm_head(hidden[keep])
        logits.float().logsumexp(-1).sum().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def trainer_times(run_dir: Path, steps: list[list[dict]], repeats: int, threads: int) -> dict[str, float]:
    """Min over `repeats` of the summed train_step time of `steps`, share_prompts off and on."""
    import random

    import yaml

    from posttrain.config import ModelConfig, TrainerConfig
    from posttrain.models import resolve_model
    from posttrain.train.group import free_port
    from posttrain.train.spec import loss_spec
    from posttrain.train.trainer import TrainerWorker
    from posttrain.types import TrainSequence

    config = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    folder = str(resolve_model(ModelConfig(**config["model"])))
    micro = config["trainer"]["micro_batch_tokens"]
    rng = random.Random(0)
    batches = []
    for rows in steps:
        prompts: dict = {}
        seqs = []
        for r in rows:
            prompt = prompts.setdefault(r["group"], tuple(rng.randrange(3, 500) for _ in range(r["prompt_tokens"])))
            n = r["response_tokens"]
            response = tuple(rng.randrange(3, 500) for _ in range(n))
            seqs.append(TrainSequence(prompt + response, len(prompt), (rng.uniform(-1, 1),) * n, (1.0,) * n))
        batches.append(seqs)
    config = TrainerConfig(workers=1, zero_stage=2, micro_batch_tokens=micro, threads=threads)
    worker = TrainerWorker(0, 1, free_port(), config, seed=0)  # one rank; the layout switches per call
    worker.load(folder, "float32", lr=1e-6, warmup_steps=0)
    best = {"padded": float("inf"), "shared": float("inf")}
    for _ in range(repeats):
        for name, share in (("padded", False), ("shared", True)):
            worker.config = config.model_copy(update={"share_prompts": share})
            started = time.perf_counter()
            for seqs in batches:
                worker.train_step(seqs, loss_spec("pg"), int(sum(sum(s.loss_mask) for s in seqs)))
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--stage", help="one stage (default: all RL-like stages)")
    parser.add_argument("--steps", type=int, default=4, help="batches per stage")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trainer", action="store_true", help="time the trainer's whole step")
    args = parser.parse_args()
    if args.trainer:
        print(f"{args.run_dir}: trainer steps, one rank, {args.threads} threads, min of {args.repeats}")
        print("| stage | batches | padded (s) | share_prompts (s) |\n|---|---|---|---|")
        for stage, steps in batches(args.run_dir).items():
            if args.stage and stage != args.stage:
                continue
            best = trainer_times(args.run_dir, steps[: args.steps], args.repeats, args.threads)
            padded, shared = best["padded"], best["shared"]
            count = min(args.steps, len(steps))
            print(f"| {stage} | {count} | {padded:.2f} | {shared:.2f} ({shared / padded:.2f}x) |", flush=True)
        return 0
    import torch
    import yaml
    from transformers import AutoModelForCausalLM

    from posttrain.config import ModelConfig
    from posttrain.models import resolve_model

    torch.set_num_threads(args.threads)
    config = yaml.safe_load((args.run_dir / "config.resolved.yaml").read_text())
    micro = config["trainer"]["micro_batch_tokens"]
    folder = resolve_model(ModelConfig(**config["model"]))
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa")
    vocab = model.config.vocab_size
    print(f"{args.run_dir}: micro_batch_tokens {micro}, {args.threads} threads, min of {args.repeats}")
    print("| stage | batches | padded (s) | packed (s) | shared prompts (s) |\n|---|---|---|---|---|")
    for stage, steps in batches(args.run_dir).items():
        if args.stage and stage != args.stage:
            continue
        layouts = {"padded": [], "packed": [], "shared": []}
        for rows in steps[: args.steps]:
            lengths = [(r["prompt_tokens"], r["response_tokens"]) for r in rows]
            groups: dict = {}
            for r in rows:
                groups.setdefault(r["group"], (r["prompt_tokens"], []))[1].append(r["response_tokens"])
            layouts["padded"].append(padded_layout(lengths, micro))
            layouts["packed"].append(packed_layout(lengths, micro))
            layouts["shared"].append(shared_layout(list(groups.values()), micro))
        inputs = {
            name: [[tensors_for_rows(rows, name, vocab) for rows in mbs] for mbs in per_step]
            for name, per_step in layouts.items()
        }
        best = {name: float("inf") for name in layouts}
        for _ in range(args.repeats):
            for name, per_step in inputs.items():
                best[name] = min(best[name], sum(step_time(model, mbs) for mbs in per_step))
        base = best["padded"]
        packed, shared = best["packed"], best["shared"]
        print(
            f"| {stage} | {len(layouts['padded'])} | {base:.2f} | {packed:.2f} ({packed / base:.2f}x) "
            f"| {shared:.2f} ({shared / base:.2f}x) |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
