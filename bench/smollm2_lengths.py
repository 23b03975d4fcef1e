"""How long are SmolLM2-135M's responses on the tasks of pipelines/smollm2.yaml? The data
behind its effort budgets.

Two measures, in SmolLM2 tokens, per domain:
- `sft`: the assistant tokens of the SFT conversations (reference answers, half of them
  with a scratchpad line): what the SFT'd model learns to write, so what the `max` budget
  must leave room for and `low` should squeeze;
- `instruct`: responses sampled (temperature 1) from SmolLM2-135M-Instruct itself on a vLLM
  engine, before any training (agent: the first turn only, no tool loop).

    .venv/bin/python bench/smollm2_lengths.py [--per-kind 8] [--max-tokens 384] [--no-generate]
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

PIPELINE = Path(__file__).parent.parent / "pipelines" / "smollm2.yaml"


def stats(values: list[int]) -> dict:
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {
        "n": len(values),
        "mean": round(sum(values) / len(values), 1),
        "p10": pick(0.1),
        "p50": pick(0.5),
        "p90": pick(0.9),
        "max": values[-1],
    }


def sft_lengths(config, tokenizer) -> dict:
    from posttrain.data.tasks import load_tasks
    from posttrain.stages.sft import gold_turns, with_scratchpad

    sft = config.stages[0]
    rng = random.Random(sft.think.seed)
    out = {}
    for source in sft.data.sources:
        tasks = load_tasks(source.model_copy(update={"size": min(source.size, 400)}))
        for think in (None, sft.think):
            lengths = []
            for task in tasks:
                turns = with_scratchpad(task.messages + gold_turns(task), think, task.verifier == "code", rng)
                lengths.append(
                    sum(
                        len(tokenizer(m.content, add_special_tokens=False)["input_ids"]) + 1
                        for m in turns[len(task.messages) :]
                        if m.role == "assistant"
                    )
                )
            out[f"{source.type}/{'with_think' if think else 'reference'}"] = stats(lengths)
    return out


def prompts_per_kind(config, per_kind: int) -> dict:
    from posttrain.data.tasks import load_tasks

    experts, ev = config.stages[1], config.stages[3]
    kinds = {
        "general": experts.domains["general"].sources[0],
        "writing": experts.domains["general"].sources[1],
        "coding": experts.domains["coding"],
        "humaneval": ev.domains["coding"],
        "agent": experts.domains["agent"],
    }
    return {k: load_tasks(s)[:per_kind] for k, s in kinds.items()}


def instruct_lengths(config, model_dir: Path, tokenizer, per_kind: int, max_tokens: int) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from posttrain.data.chat import render_prompt

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    llm = LLM(model=str(model_dir), dtype="float32", max_model_len=1024, enforce_eager=True, seed=0)
    out = {}
    for kind, tasks in prompts_per_kind(config, per_kind).items():
        prompts = [TokensPrompt(prompt_token_ids=render_prompt(tokenizer, t.messages)) for t in tasks]
        params = SamplingParams(temperature=1.0, max_tokens=max_tokens)
        results = llm.generate(prompts, params, use_tqdm=False)
        lengths = [len(r.outputs[0].token_ids) for r in results]
        out[kind] = {
            **stats(lengths),
            "cut_at_max": sum(r.outputs[0].finish_reason == "length" for r in results),
            "prompt_tokens_mean": round(sum(len(p["prompt_token_ids"]) for p in prompts) / len(prompts), 1),
            "example": results[0].outputs[0].text[:160],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-kind", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--no-generate", action="store_true")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from posttrain.config.files import load_pipeline
    from posttrain.models import resolve_model

    config = load_pipeline(PIPELINE)
    model_dir = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    result = {"sft_targets": sft_lengths(config, tokenizer)}
    print(json.dumps(result, indent=1), flush=True)
    if not args.no_generate:
        result["instruct"] = instruct_lengths(config, model_dir, tokenizer, args.per_kind, args.max_tokens)
        print(json.dumps(result["instruct"], indent=1), flush=True)


if __name__ == "__main__":
    main()
