"""Held-out greedy accuracy of SmolLM2-135M-Instruct on a few reasoning-gym families,
to choose the time-to-accuracy benchmark's task (one whose accuracy starts between 20
and 60 %: room to learn, and a signal from the first step).

    PYTHONPATH=. .venv/bin/python bench/tta_survey.py [--n 200] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

CANDIDATES = {
    "basic_arithmetic 2-3 terms 1 digit +-": (
        "basic_arithmetic",
        {"min_terms": 2, "max_terms": 3, "max_digits": 1, "operators": ["+", "-"]},
    ),
    "basic_arithmetic 2 terms 1-2 digits +-, no negation": (
        "basic_arithmetic",
        {"min_terms": 2, "max_terms": 2, "max_digits": 2, "operators": ["+", "-"], "allow_negation": False},
    ),
    "chain_sum 2 terms 1-2 digits": ("chain_sum", {"min_terms": 2, "max_terms": 2, "max_digits": 2}),
    "products 1-2 digits": ("products", {"min_digits": 1, "max_digits": 2}),
    "gcd up to 100": ("gcd", {"max_value": 100}),
    "leg_counting 1-2 animals": ("leg_counting", {"min_animals": 1, "max_animals": 2, "max_instances": 5}),
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from bench.tta_sides import SYSTEM, EvalSet, family_source, split_tasks
    from posttrain.config import ModelConfig, RolloutConfig
    from posttrain.models import resolve_model
    from posttrain.rollout.engine import RolloutEngine

    model_dir = resolve_model(ModelConfig(name="smollm2-135m-instruct"))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = RolloutEngine(str(model_dir), RolloutConfig(max_model_len=384, kv_cache_gib=0.5), "float32", 0)
    print(f"system prompt: {SYSTEM!r}; greedy; {args.n} eval problems; max {args.max_tokens} tokens", flush=True)
    for label, (name, params) in CANDIDATES.items():
        if args.only and not any(o in label for o in args.only):
            continue
        started = time.perf_counter()
        train, held_out = split_tasks(family_source(name, params), args.n)
        evalset = EvalSet.build(held_out, args.max_tokens, tokenizer)
        acc, tokens = evalset.run(engine.generate)
        print(
            f"| {label} | {len(train)} train | {acc:.3f} | {tokens:.1f} | {time.perf_counter() - started:.0f} s | "
            f"e.g. {evalset.tasks[0].messages[-1].content[:60]!r} -> {evalset.last_texts[0][:40]!r}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
