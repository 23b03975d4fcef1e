"""Peak memory of one trainer step on CPU, before and after each memory change: logits
for the response window only, the fused chunked log-softmax, gradient checkpointing.

Each variant runs in a fresh process: one DeepSpeed rank (world size 1, ZeRO-2), a warm-up
step (Adam allocates its state there), then the measured step. Its figures are peak RSS
(VmHWM, reset through /proc/self/clear_refs) above the RSS before the step, in its two
phases: the forward and backward passes (what the logprob path and checkpointing change)
and DeepSpeed's optimizer step (the same in every variant). The children run with
MALLOC_MMAP_THRESHOLD_=65536, so glibc returns every freed tensor of 64 KiB or more to
the system at once: RSS then follows the live tensors instead of memory malloc keeps.

    .venv/bin/python bench/train_memory.py --model smollm2-135m-instruct --seqs 8 --prompt 192 --response 64

Variants:
  full        before: logits for every position, log_softmax in fp32 over all of them
              (the trainer's code before this change, kept here to measure it)
  window      logits for the response window only (logits_to_keep), plain fp32 log_softmax
  fused       window + the fused chunked log-softmax: the trainer's default
  fused+ckpt  fused + trainer.gradient_checkpointing
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

VARIANTS = ("full", "window", "fused", "fused+ckpt")


def _plain_logprobs(logits, targets, temperature: float):
    """The trainer's token_logprobs before the change: the whole tensor upcast to fp32."""
    import torch

    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.gather(torch.log_softmax(logits, dim=-1), -1, targets.unsqueeze(-1)).squeeze(-1)


def _forward_full(self, model, batch: dict, temperature: float):
    import torch

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    logp = _plain_logprobs(logits[:, :-1], batch["input_ids"][:, 1:], temperature)
    lo, hi = batch["window"]
    return logp[:, lo:hi], torch.zeros_like(logp[:, lo:hi])  # no entropy before the change


def _forward_window(self, model, batch: dict, temperature: float):
    import torch

    lo, hi = batch["window"]
    keep = torch.arange(lo, hi, device=self.device)
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False, logits_to_keep=keep
    ).logits
    logp = _plain_logprobs(logits, batch["targets"], temperature)
    return logp, torch.zeros_like(logp)


def _memory_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(args) -> dict:
    import random

    from posttrain.config import TrainerConfig
    from posttrain.train.group import free_port
    from posttrain.train.spec import loss_spec
    from posttrain.train.trainer import TrainerWorker
    from posttrain.types import TrainSequence

    model_dir = resolve(args.model)
    length = args.prompt + args.response
    config = TrainerConfig(
        workers=1,
        zero_stage=2,
        micro_batch_tokens=args.seqs * length,
        threads=args.threads,
        gradient_checkpointing=args.variant == "fused+ckpt",
    )
    worker = TrainerWorker(0, 1, free_port(), config, seed=0)
    if args.variant == "full":
        worker._forward_logp = types.MethodType(_forward_full, worker)
    elif args.variant == "window":
        worker._forward_logp = types.MethodType(_forward_window, worker)
    worker.load(str(model_dir), args.dtype, lr=1e-5, warmup_steps=0)
    rng = random.Random(0)
    vocab = worker.engine.module.config.vocab_size
    seqs = [
        TrainSequence(
            tuple(rng.randrange(3, vocab) for _ in range(length)),
            args.prompt,
            tuple(rng.choice((-1.0, 1.0)) for _ in range(args.response)),
            (1.0,) * args.response,
        )
        for _ in range(args.seqs)
    ]
    tokens = args.seqs * args.response
    worker.train_step(seqs, loss_spec("pg"), tokens)  # warm-up: optimizer state
    phases = {}
    optimizer_step = worker._optimizer_step

    def timed_step(nonfinite: bool):
        phases["forward_backward"] = _memory_kib("VmHWM")
        Path("/proc/self/clear_refs").write_text("5")
        out = optimizer_step(nonfinite)
        phases["optimizer_step"] = _memory_kib("VmHWM")
        return out

    worker._optimizer_step = timed_step
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _memory_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    started = time.perf_counter()
    worker.train_step(seqs, loss_spec("pg"), tokens)
    seconds = time.perf_counter() - started
    return {
        "variant": args.variant,
        "fwd_bwd_mib": (phases["forward_backward"] - before) / 1024,
        "opt_step_mib": (phases["optimizer_step"] - before) / 1024,
        "rss_before_mib": before / 1024,
        "step_s": seconds,
    }


def resolve(name: str) -> Path:
    from posttrain.config import ModelConfig
    from posttrain.models import resolve_model

    return resolve_model(ModelConfig(name=name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--seqs", type=int, default=8, help="sequences in the micro-batch")
    parser.add_argument("--prompt", type=int, default=192, help="prompt tokens per sequence")
    parser.add_argument("--response", type=int, default=64, help="response tokens per sequence")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # set in the child processes
    args = parser.parse_args()
    if args.variant:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return 0
    resolve(args.model)  # convert once, before the children
    rows = []
    for variant in args.variants.split(","):
        cmd = [sys.executable, __file__, *sys.argv[1:], "--variant", variant]
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode or not lines:
            print(out.stderr[-3000:], file=sys.stderr)
            return 1
        rows.append(json.loads(lines[0].removeprefix("RESULT ")))
        print(f"  {variant}: {json.dumps(rows[-1])}", flush=True)
    base = rows[0]["fwd_bwd_mib"]
    shape = f"{args.seqs} x ({args.prompt} prompt + {args.response} response) tokens"
    print(f"\n{args.model} {args.dtype}, micro-batch {shape}")
    print("| variant | forward+backward peak (MiB) | vs first | optimizer step peak (MiB) | step (s) |")
    print("|---|---|---|---|---|")
    for r in rows:
        ratio = r["fwd_bwd_mib"] / base
        print(
            f"| {r['variant']} | {r['fwd_bwd_mib']:.0f} | {ratio:.2f}x | {r['opt_step_mib']:.0f} | {r['step_s']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
