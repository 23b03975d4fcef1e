"""Rollout tokens per second: posttrain's vLLM engine against Hugging Face `generate`,
on the same prompts, and both against the limits of the cores they use.

SmolLM2-135M-Instruct (fp32), reasoning-gym arithmetic prompts in the chat template,
B prompts, every sequence generating exactly T new tokens (EOS ignored, so both sides
produce the same token count). HF `generate` runs first, with torch on every core (what
a user gets by default), then the engine, built exactly as `RolloutEngine` builds it.
Limits, measured in the same run: memory read bandwidth (a decoding step reads every
weight once for the whole batch) and the fp32 matmul rate (2 FLOPs per weight per
token, plus attention).

    .venv/bin/python bench/rollout.py [--prompts 32] [--tokens 128]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time


def prompts(tokenizer, count: int) -> list[list[int]]:
    from posttrain.config import ReasoningGymTasks
    from posttrain.data.chat import render_prompt
    from posttrain.data.tasks import load_tasks

    tasks = load_tasks(
        ReasoningGymTasks(type="reasoning_gym", families=[{"name": "basic_arithmetic"}], size=count, seed=3)
    )
    return [render_prompt(tokenizer, t.messages) for t in tasks]


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the cores it kept busy)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def hf_generate(model_dir, ids: list[list[int]], tokens: int, threads: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    width = max(map(len, ids))
    pad = model.config.pad_token_id or 0
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in ids])  # left padding
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ids])
    model.generate(input_ids=input_ids[:2], attention_mask=attention[:2], max_new_tokens=4, do_sample=True)
    started, cpu = time.perf_counter(), cpu_seconds()
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            pad_token_id=pad,
        )
    wall = time.perf_counter() - started
    generated = (out.shape[1] - width) * len(ids)
    return {"wall": wall, "tokens": generated, "cores": (cpu_seconds() - cpu) / wall}


def engine_generate(model_dir, ids: list[list[int]], tokens: int, threads: int | None) -> dict:
    from posttrain.config import RolloutConfig
    from posttrain.rollout.engine import RolloutEngine, engine_env

    config = RolloutConfig(max_model_len=max(map(len, ids)) + tokens + 8, threads=threads)
    os.environ.update(engine_env(config))
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    engine = RolloutEngine(str(model_dir), config, "float32", seed=0)
    params = SamplingParams(
        n=1, max_tokens=tokens, min_tokens=tokens, ignore_eos=True, temperature=1.0, logprobs=0, detokenize=True
    )
    prompts_in = [TokensPrompt(prompt_token_ids=p) for p in ids]
    engine.llm.generate(prompts_in[:2], SamplingParams(max_tokens=4), use_tqdm=False)
    started, cpu = time.perf_counter(), cpu_seconds()
    outs = engine.llm.generate(prompts_in, params, use_tqdm=False)
    wall = time.perf_counter() - started
    generated = sum(len(o.outputs[0].token_ids) for o in outs)
    return {
        "wall": wall,
        "tokens": generated,
        "cores": (cpu_seconds() - cpu) / wall,
        "threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None,
    }


def read_bandwidth(nbytes: int = 512 * 2**20) -> float:
    """Bytes/s of streaming reads on one core (np.sum over a large fp32 array, warm)."""
    import numpy as np

    array = np.ones(nbytes // 4, dtype=np.float32)
    array.sum()
    best = min(_timed(array.sum) for _ in range(5))
    return nbytes / best


def matmul_rate(threads: int, n: int = 2048) -> float:
    """fp32 FLOP/s of one n x n matmul on `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    return 2 * n**3 / min(_timed(lambda: a @ b) for _ in range(5))


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def model_facts(model_dir) -> dict:
    import json

    cfg = json.loads((model_dir / "config.json").read_text())
    h, layers, inter, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * h // cfg["num_attention_heads"]
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * inter  # q, o, k, v, gate/up/down
    matmul_weights = layers * per_layer + vocab * h  # lm_head (tied to the embedding, still read)
    return {"matmul_weights": matmul_weights, "layers": layers, "hidden": h, "weight_bytes": 4 * matmul_weights}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--hf-threads", type=int, default=os.cpu_count())
    parser.add_argument(
        "--engine-threads",
        type=int,
        default=None,
        help="rollout.threads of the engine (default: unset, vLLM's choice: 1 thread on 2 cores)",
    )
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from posttrain.config import ModelConfig
    from posttrain.models import resolve_model

    model_dir = resolve_model(ModelConfig(name="smollm2-135m-instruct"))
    ids = prompts(AutoTokenizer.from_pretrained(model_dir), args.prompts)
    facts = model_facts(model_dir)
    bandwidth, rate1, rate_all = read_bandwidth(), matmul_rate(1), matmul_rate(os.cpu_count())
    hf = hf_generate(model_dir, ids, args.tokens, args.hf_threads)
    print(f"hf generate: {hf['tokens'] / hf['wall']:.1f} tok/s", flush=True)
    vl = engine_generate(model_dir, ids, args.tokens, args.engine_threads)
    print_table(args, facts, hf, vl, bandwidth, rate1, rate_all, sum(map(len, ids)) / len(ids))
    return 0


def print_table(args, facts, hf, vl, bandwidth, rate1, rate_all, prompt_mean) -> None:
    ctx = prompt_mean + args.tokens / 2  # mean context length while decoding
    flops_token = 2 * facts["matmul_weights"] + 4 * facts["layers"] * facts["hidden"] * ctx
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"workload: SmolLM2-135M-Instruct fp32, {args.prompts} reasoning-gym arithmetic prompts (mean "
        f"{prompt_mean:.0f} tokens), {args.tokens} new tokens each (EOS ignored), temperature 1"
    )
    print(
        f"limits: read bandwidth {bandwidth / 1e9:.1f} GB/s (1 core); fp32 matmul {rate1 / 1e9:.0f} GFLOP/s "
        f"(1 thread), {rate_all / 1e9:.0f} GFLOP/s ({os.cpu_count()} threads); {facts['weight_bytes'] / 2**20:.0f} MiB "
        f"of matmul weights read per decoding step; {flops_token / 1e6:.0f} MFLOP per token\n"
    )
    print(
        "| generator | tokens | wall s | tokens/s | vs HF | cores busy | weight reads GB/s (of limit) | "
        "GFLOP/s (of 1-thread matmul) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    base = hf["tokens"] / hf["wall"]
    for name, res in (("HF generate", hf), ("posttrain vLLM engine", vl)):
        rate = res["tokens"] / res["wall"]
        steps = rate / args.prompts  # one decoding step advances every sequence of the batch by a token
        reads = steps * facts["weight_bytes"]
        gflops = rate * flops_token / 1e9
        print(
            f"| {name} | {res['tokens']} | {res['wall']:.1f} | {rate:.1f} | {rate / base:.2f}x | {res['cores']:.2f} | "
            f"{reads / 1e9:.2f} ({reads / bandwidth:.0%}) | {gflops:.1f} ({gflops * 1e9 / rate1:.0%}) |"
        )


if __name__ == "__main__":
    sys.exit(main())
