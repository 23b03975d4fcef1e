"""The trainer side of the GPU path, without Ray or vLLM: one DeepSpeed rank on one device,
on a model shaped like a 1-8B Llama built in code with random weights (nothing is
downloaded). One line per check, then a summary; exit 0 only if every check passed.

Checks (each a real train step or export of that model, bf16, ZeRO-3; --zero 2,3 runs the
step checks under each stage named, the export under the last):
  long_context   gradient checkpointing, one micro-batch of --tokens tokens whose whole
                 length predicts (SFT-shaped: the chunked fused logprobs at long context)
  shared_prompts RL-shaped rows: a prompt and its 8 responses in one row (the 4-D mask);
                 prompts of --tokens/32 tokens, responses of --tokens/64
  no_checkpoint  a shorter micro-batch without checkpointing (the activation term): 4 rows
                 of --tokens/32
  export         the bucketed weight export (a push's packet and a checkpoint's shards):
                 its peak above the weights is about one bucket
Each prints the measured peak device memory beside the memory plan's prediction for the
same settings (posttrain/runtime/memory.py; on a GPU PASS needs them within 20 %), tokens/s, and on
a GPU the step's MFU against --peak-tflops (bf16 dense; about 790 measured on an H200):
6 x parameters x tokens per second, recomputation not counted.

    python bench/gpu_trainer_check.py --device cuda --shape 1b      # through bench/gpu_check.sh
    python bench/gpu_trainer_check.py --device cpu --shape tiny --tokens 512  # the rehearsal in make test
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

SHAPES = {  # Llama-shaped: hidden, layers, heads, kv heads, intermediate, vocab, tied
    "tiny": (256, 4, 4, 2, 704, 4096, True),
    "1b": (2048, 16, 32, 8, 8192, 128256, True),  # Llama-3.2-1B
    "3b": (3072, 28, 24, 8, 8192, 128256, True),  # Llama-3.2-3B
    "8b": (4096, 32, 32, 8, 14336, 128256, False),  # Llama-3-8B
}
TOLERANCE = 0.20


def build_model(shape: str, folder: Path, device: str = "cpu") -> Path:
    """A random-weight bf16 model of that shape, with a config.json (no tokenizer needed),
    initialised on `device` (a GPU draws a 3B model's weights in seconds, 2 cores in minutes)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, heads, kv, inter, vocab, tied = SHAPES[shape]
    config = LlamaConfig(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
        intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=tied, head_dim=hidden // heads,
        max_position_embeddings=65536,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Meter:
    """Peak device memory: CUDA's allocator on a GPU; on CPU, RSS (VmHWM, reset through
    /proc/self/clear_refs) with MALLOC_MMAP_THRESHOLD_ set by the caller."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"

    def now(self) -> float:
        import torch

        if self.cuda:
            return float(torch.cuda.memory_allocated())
        return self._status("VmRSS")

    def reset(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            Path("/proc/self/clear_refs").write_text("5")

    def peak(self) -> float:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return float(torch.cuda.max_memory_allocated())
        return self._status("VmHWM")

    @staticmethod
    def _status(field: str) -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024.0
        raise RuntimeError(field)


def sequences(rows: int, prompt: int, response: int, group: int, vocab: int):
    from posttrain.types import TrainSequence

    rng = random.Random(0)
    out = []
    for _ in range(rows):
        head = tuple(rng.randrange(3, vocab) for _ in range(prompt))
        for _ in range(group):
            body = tuple(rng.randrange(3, vocab) for _ in range(response))
            adv = tuple(rng.choice((-1.0, 1.0)) for _ in range(response))
            out.append(TrainSequence(head + body, prompt, adv, (1.0,) * response))
    return out


def step_check(worker, meter: Meter, shape, model_dir: Path, case, gpu: bool, peak_tflops: float, zero: int = 3):
    """(ok, line) of one measured train step: `case` is (checkpointing, rows, prompt,
    response, group, shared); the rank is reloaded with that case's settings (and ZeRO
    stage `zero`) first."""
    from posttrain.config import TrainerConfig
    from posttrain.runtime.memory import GIB, trainer_memory
    from posttrain.train.release import release_engines
    from posttrain.train.spec import loss_spec

    ckpt, rows, prompt, response, group, shared = case
    window = group * (response + 1) if shared else response
    row = prompt + window
    cap = rows * row
    config = TrainerConfig(
        workers=1, zero_stage=zero, micro_batch_tokens=cap, gradient_checkpointing=ckpt, share_prompts=shared,
        num_gpus=1 if gpu else 0, threads=4,
    )  # fmt: skip
    worker.config = config
    release_engines(worker, "engine", "ref_model")  # the previous case's, so the baseline is without it
    meter.reset()
    base = meter.now()
    worker.load(str(model_dir), "bfloat16", lr=1e-5, warmup_steps=0)
    seqs = sequences(rows, prompt, response, group, shape.vocab)
    tokens = sum(s.response_len for s in seqs)
    worker.train_step(seqs, loss_spec("pg"), tokens)  # warm-up: the optimizer's state
    between = meter.now() - base
    meter.reset()
    t0 = time.perf_counter()
    out = worker.train_step(seqs, loss_spec("pg"), tokens)
    seconds = time.perf_counter() - t0
    peak = meter.peak() - base
    mem = trainer_memory(shape, config, "bfloat16", cap, row, window, False, 256, shared, gpu=gpu)
    mem.phases.pop("weight export")
    planned = mem.peak
    ratio = planned / peak
    rate = sum(len(s.token_ids) for s in seqs) / seconds
    mfu = 6 * shape.params * rate / (peak_tflops * 1e12) if gpu else None
    finite = out.sums.loss == out.sums.loss and abs(out.sums.loss) != float("inf")
    # on a GPU the plan must hold within TOLERANCE; on CPU (the rehearsal, tiny shapes) the
    # process's own memory outweighs the model's and the ratio is only shown
    ok = finite and (abs(ratio - 1) <= TOLERANCE or not gpu)
    return ok, (
        f"peak {peak / GIB:.2f} GiB, plan {planned / GIB:.2f} GiB ({ratio:.2f}x, peak in the {mem.worst}); "
        f"between steps {between / GIB:.2f} GiB, plan {sum(mem.between.values()) / GIB:.2f}; "
        f"{cap} tokens per micro-batch, {rate:.0f} tokens/s"
        + (f", MFU {mfu:.1%}" if mfu is not None else "")
        + ("" if finite else "; loss not finite")
    )


def export_check(worker, meter: Meter, shape, gpu: bool, zero: int = 3):
    """(ok, line) of the export of the last model loaded: about one bucket above the weights."""
    from posttrain.train import export

    bucket = 256 * 2**20
    worker.bucket_bytes = bucket
    meter.reset()
    base = meter.now()
    t0 = time.perf_counter()
    state = export.host_state_dict(worker.engine, 0, zero, bucket)
    seconds = time.perf_counter() - t0
    rise = meter.peak() - base
    whole = sum(t.numel() * t.element_size() for t in {id(t): t for t in state.values()}.values())
    limit = 3 * bucket + 64 * 2**20  # a bucket gathered, its copy on the way out, and slack
    within = rise <= limit or not gpu  # on CPU the host copy it makes is in the same memory
    return within and abs(whole - 2 * shape.params) < 0.01 * whole, (
        f"{whole / 2**30:.2f} GiB of weights out in {seconds:.1f} s; device peak {rise / 2**20:.0f} MiB "
        f"above the weights (a bucket is {bucket / 2**20:.0f} MiB; the old export gathered all "
        f"{whole / 2**20:.0f} MiB and copied it)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--shape", choices=tuple(SHAPES), default="1b")
    parser.add_argument(
        "--tokens",
        type=int,
        default=16384,
        help="long_context: tokens in the micro-batch; the other cases are sized from it",
    )
    parser.add_argument("--zero", default="3", help="ZeRO stages of the step checks, comma-separated (2,3)")
    parser.add_argument("--peak-tflops", type=float, default=790.0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    started = time.perf_counter()
    results = []

    def report(name: str, ok: bool, text: str) -> None:
        results.append({"check": name, "ok": ok, "text": text})
        print(f"{'PASS' if ok else 'FAIL'} {name}: {text}", flush=True)

    try:
        import torch

        from posttrain.config import TrainerConfig
        from posttrain.runtime.memory import ModelShape
        from posttrain.train.trainer import TrainerWorker
    except Exception as exc:  # noqa: BLE001 - one line: what is missing
        report("imports", False, f"{type(exc).__name__}: {exc}")
        print("summary: 0 of 1 checks passed", flush=True)
        return 1
    if args.device == "cuda" and not torch.cuda.is_available():
        report("device", False, "no CUDA device")
        return 1
    gpu = args.device == "cuda"
    meter = Meter(args.device)
    workdir = Path(tempfile.mkdtemp(prefix="gpu-trainer-check-"))
    model_dir = build_model(args.shape, workdir / "model", args.device)
    hidden, layers, heads, kv, inter, vocab, tied = SHAPES[args.shape]
    shape = ModelShape(hidden, layers, heads, kv, hidden // heads, inter, vocab, tied)
    print(
        f"model: {args.shape} ({shape.params / 1e9:.2f}B parameters, random bf16 weights) on {args.device}; "
        f"built in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    # sized from --tokens (the default 16384: 512-token prompts, 256-token responses), so the
    # CPU rehearsal's few hundred tokens take seconds where bf16 has no CPU kernels
    n = args.tokens
    cases = [  # name, checkpointing, rows, prompt, response, group, shared
        ("long_context", True, 1, 16, n - 16, 1, False),
        ("shared_prompts", True, 2, n // 32, n // 64, 8, True),
        ("no_checkpoint", False, 4, n // 64, n // 64, 1, False),
    ]
    stages = [int(z) for z in args.zero.split(",")]
    worker = None
    for zero, (name, *case) in ((z, c) for z in stages for c in cases):
        name = name if stages == [3] else f"{name}_zero{zero}"
        try:
            first = TrainerConfig(workers=1, num_gpus=1 if gpu else 0, threads=4)  # the rank's device and threads
            worker = worker or TrainerWorker(0, 1, free_port(), first, seed=0)
            report(name, *step_check(worker, meter, shape, model_dir, case, gpu, args.peak_tflops, zero))
        except Exception as exc:  # noqa: BLE001 - one line per check
            report(name, False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            traceback.print_exc(file=sys.stderr)
    if worker is not None and worker.engine is not None:
        try:
            report("export", *export_check(worker, meter, shape, gpu, stages[-1]))
        except Exception as exc:  # noqa: BLE001
            report("export", False, f"{type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stderr)
    passed = sum(r["ok"] for r in results)
    print(f"summary: {passed} of {len(results)} checks passed in {time.perf_counter() - started:.0f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
