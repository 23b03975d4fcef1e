"""The memory plan (posttrain/runtime/memory.py) against measured peaks of real trainer
steps on CPU: tiny models and SmolLM2-135M, several micro-batch sizes, ZeRO stages,
gradient checkpointing on and off, bf16 and fp32, shared prompts and plain rows.

Each case runs in a fresh process: one DeepSpeed rank (world size 1), with
MALLOC_MMAP_THRESHOLD_=65536 so that RSS follows live tensors (bench/train_memory.py). Its
baseline is the RSS once torch, DeepSpeed and the process group are up, before the model
is loaded. Measured: what the rank holds between steps (RSS after a warm-up step, above the
baseline) and the peak of the measured step (VmHWM above the baseline, reset before the
step). The plan's figures for the same settings: its resident parts (weights, master
weights, gradients, optimizer state) and its peak (those plus activations, logits and the
attention mask; the weight export is left out: no sync runs here).

    .venv/bin/python bench/memory_plan.py            # every case, then the table
    .venv/bin/python bench/memory_plan.py --only smol-fp32-z2-2k
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

# name: model, dtype, zero stage, checkpointing, rows, prompt, response, group (shared prompts: G > 1)
CASES = {
    "smol-fp32-z2-2k": ("smollm2", "float32", 2, False, 8, 192, 64, 1),
    "smol-fp32-z2-4k": ("smollm2", "float32", 2, False, 16, 192, 64, 1),
    "smol-fp32-z2-2k-ckpt": ("smollm2", "float32", 2, True, 8, 192, 64, 1),
    "smol-fp32-z2-4k-ckpt": ("smollm2", "float32", 2, True, 16, 192, 64, 1),
    "smol-fp32-z2-sft": ("smollm2", "float32", 2, False, 8, 16, 240, 1),
    "smol-fp32-z0-2k": ("smollm2", "float32", 0, False, 8, 192, 64, 1),
    "smol-fp32-z1-2k": ("smollm2", "float32", 1, False, 8, 192, 64, 1),
    "smol-fp32-z3-2k": ("smollm2", "float32", 3, False, 8, 192, 64, 1),
    "smol-bf16-z2-2k": ("smollm2", "bfloat16", 2, False, 8, 192, 64, 1),
    "smol-bf16-z2-2k-ckpt": ("smollm2", "bfloat16", 2, True, 8, 192, 64, 1),
    "smol-fp32-z2-shared": ("smollm2", "float32", 2, False, 2, 192, 64, 8),
    "smol-fp32-z2-shared-ckpt": ("smollm2", "float32", 2, True, 2, 192, 64, 8),
    "tiny-fp32-z2-4k": ("tiny", "float32", 2, False, 16, 192, 64, 1),
    "tiny-fp32-z2-4k-ckpt": ("tiny", "float32", 2, True, 16, 192, 64, 1),
    "tiny-fp32-z2-shared": ("tiny", "float32", 2, False, 4, 192, 64, 8),
}
# a tiny model large enough that its parts stand above the noise of a process's RSS
TINY = {"layers": 6, "hidden": 512, "heads": 8, "kv_heads": 2, "intermediate": 1536, "vocab_size": 8192}
MIB = 2**20


def _memory_kib(field: str) -> int:
    """A field of /proc/self/status (VmRSS, VmHWM), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def model_config(kind: str):
    from posttrain.config import ModelConfig, TinyModelConfig

    if kind == "tiny":
        return ModelConfig(name="tiny", tiny=TinyModelConfig(**TINY, max_position=2048))
    return ModelConfig(name="smollm2-135m-instruct")


def layout(case):
    """(sequences, micro-batch cap, row length, logit window per row, shared)."""
    _, _, _, _, rows, prompt, response, group = case
    rng = random.Random(0)
    seqs = []
    for _ in range(rows):
        head = tuple(rng.randrange(3, 300) for _ in range(prompt))
        for _ in range(group):
            body = tuple(rng.randrange(3, 300) for _ in range(response))
            seqs.append((head + body, prompt, response))
    if group > 1:
        row = prompt + group * (response + 1)
        return seqs, rows * row, row, group * (response + 1), True
    return seqs, rows * (prompt + response), prompt + response, response, False


def trainer_config(case, cap: int):
    from posttrain.config import TrainerConfig

    _, _, zero, ckpt, _, _, _, group = case
    return TrainerConfig(
        workers=1, zero_stage=zero, micro_batch_tokens=cap, threads=2, gradient_checkpointing=ckpt,
        share_prompts=group > 1,
    )  # fmt: skip


def child(name: str) -> dict:
    from posttrain.models import resolve_model
    from posttrain.train.group import free_port
    from posttrain.train.spec import loss_spec
    from posttrain.train.trainer import TrainerWorker
    from posttrain.types import TrainSequence

    case = CASES[name]
    raw, cap, _, _, _ = layout(case)
    model_dir = resolve_model(model_config(case[0]))
    worker = TrainerWorker(0, 1, free_port(), trainer_config(case, cap), seed=0)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    baseline = _memory_kib("VmRSS")
    worker.load(str(model_dir), case[1], lr=1e-5, warmup_steps=0)
    rng = random.Random(1)
    seqs = [TrainSequence(ids, p, tuple(rng.choice((-1.0, 1.0)) for _ in range(r)), (1.0,) * r) for ids, p, r in raw]
    tokens = sum(r for _, _, r in raw)
    worker.train_step(seqs, loss_spec("pg"), tokens)  # warm-up: the optimizer's state is made here
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    resident = _memory_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    started = time.perf_counter()
    worker.train_step(seqs, loss_spec("pg"), tokens)
    return {
        "case": name,
        "resident_mib": (resident - baseline) / 1024,
        "peak_mib": (_memory_kib("VmHWM") - baseline) / 1024,
        "step_s": time.perf_counter() - started,
    }


def predicted(name: str) -> dict:
    """The plan's rank for this case: between steps, and its peak without the weight export
    (no sync runs here), counting buffers as CPU pages do (only what is written)."""
    from posttrain.runtime.memory import shape_of, trainer_memory

    case = CASES[name]
    _, cap, row, window, shared = layout(case)
    mc = model_config(case[0])
    shape, _ = shape_of(mc.name, mc)
    mem = trainer_memory(shape, trainer_config(case, cap), case[1], cap, row, window, False, 0, shared, gpu=False)
    mem.phases.pop("weight export")
    between = sum(mem.between.values())
    return {
        "resident_mib": between / MIB,
        "peak_mib": mem.peak / MIB,
        "worst": mem.worst,
        "phases": {k: sum(v.values()) / MIB for k, v in mem.phases.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # set in the child processes
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--measured", type=Path, help="a --json file: its measured figures against today's plan")
    args = parser.parse_args()
    if args.case:
        print("RESULT " + json.dumps(child(args.case)), flush=True)
        return 0
    names = args.only.split(",") if args.only else list(CASES)
    from posttrain.models import resolve_model

    for kind in {CASES[n][0] for n in names}:
        resolve_model(model_config(kind))  # build or convert once, before the children
    rows = []
    if args.measured:
        names = []
        for old in json.loads(args.measured.read_text()):
            rows.append({"case": old["case"], "measured": old["measured"], "plan": predicted(old["case"])})
    for name in names:
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "2"}
        out = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True, env=env)
        lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if out.returncode or not lines:
            print(f"{name}: failed\n{out.stderr[-3000:]}", file=sys.stderr)
            return 1
        measured = json.loads(lines[0].removeprefix("RESULT "))
        rows.append({"case": name, "measured": measured, "plan": predicted(name)})
        m, p = measured, rows[-1]["plan"]
        print(
            f"  {name}: between steps / peak: measured {m['resident_mib']:.0f}/{m['peak_mib']:.0f} MiB, "
            f"plan {p['resident_mib']:.0f}/{p['peak_mib']:.0f}",
            flush=True,
        )
    print("\n| case | between steps, measured (MiB) | plan | ratio | step peak, measured (MiB) | plan | ratio |")
    print("|---|---|---|---|---|---|---|")
    worst, worst_between = 0.0, 0.0
    for r in rows:
        m, p = r["measured"], r["plan"]
        ra, rb = p["resident_mib"] / m["resident_mib"], p["peak_mib"] / m["peak_mib"]
        worst, worst_between = max(worst, abs(rb - 1)), max(worst_between, abs(ra - 1))
        cells = [r["case"], f"{m['resident_mib']:.0f}", f"{p['resident_mib']:.0f}", f"{ra:.2f}"]
        cells += [f"{m['peak_mib']:.0f}", f"{p['peak_mib']:.0f} ({p['worst']})", f"{rb:.2f}"]
        print("| " + " | ".join(cells) + " |")
    print(f"\npeak: the plan's worst deviation from the measured peak: {worst:.0%} (target: within 20%)")
    print(f"between steps (not what the plan checks): worst deviation {worst_between:.0%}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
