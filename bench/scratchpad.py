"""Does thinking longer help the tiny model? Held-out accuracy of each answer form after SFT.

Runs the SFT stage of a pipeline (by default the quickstart's: the tiny model, every form
of answer at random) on the real trainer ranks, then scores the eval part of each domain
(disjoint from training by construction) with each form forced: the scratchpad's opening
(`Work:`, `Short:`) written for the model, or for `none` the first token held to the
answer's own start (a digit; for code, `def`); agent tasks also with the tool episode.
Generation is greedy (transformers, in this process); every response is scored by the
domain's verifier (math, the code sandbox, the agent environment). Prints the table that
bench/RESULTS.md records.

    .venv/bin/python bench/scratchpad.py [--pipeline pipelines/quickstart.yaml] [--tasks 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FORMS = ("full", "short", "none", "tool")


def train_sft(config, out: Path) -> Path:
    """The pipeline's first SFT stage, on its engines and trainer ranks, from the base model."""
    from posttrain.models import resolve_model
    from posttrain.records.metrics import MetricsLog
    from posttrain.runtime.infra import start_ray
    from posttrain.runtime.slots import open_first_slot
    from posttrain.stages.sft import run_sft

    stage = next(s for s in config.stages if s.type == "sft")
    model_dir = resolve_model(config.model)
    start_ray(config, verbose=False)
    slot, infra = open_first_slot(config, model_dir, out, MetricsLog(out), live_progress=False)
    try:
        return run_sft(stage, model_dir, infra)
    finally:
        slot.close()
        import ray

        ray.shutdown()


def opening(task, form: str) -> str:
    from posttrain.data.reasoning import CODE_COMMENT, SCRATCH_PREFIX

    if form in ("full", "short"):
        return (CODE_COMMENT if task.verifier == "code" else "") + SCRATCH_PREFIX[form]
    if form == "tool":
        return "<tool_call>"
    return ""


def generate(model, tok, prompt_ids: list[int], opening_text: str, first_tokens: list[int] | None, limit: int) -> str:
    import torch

    pre = tok(opening_text, add_special_tokens=False)["input_ids"] if opening_text else []
    ids = torch.tensor([prompt_ids + pre])
    kw = {}
    if first_tokens is not None:
        start = ids.shape[1]
        every = list(range(len(tok)))
        kw["prefix_allowed_tokens_fn"] = lambda _b, seq: first_tokens if seq.shape[0] == start else every
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=limit, do_sample=False, pad_token_id=tok.pad_token_id or 0, **kw)
    return opening_text + tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def episode(model, tok, task, form: str, first_tokens, limit: int):
    """The agent task's episode: model turns, each tool call run by the environment."""
    from posttrain.data import builtin_env as env
    from posttrain.data.chat import render_prompt, with_effort
    from posttrain.types import Message

    # the effort line, as every other domain's prompt here and as SFT trained (effort_lines)
    state, messages, used = env.initial_state(task.entry), list(with_effort(task.messages, "max")), 0
    for turn in range(task.entry["max_turns"]):
        text = generate(
            model,
            tok,
            render_prompt(tok, tuple(messages)),
            opening(task, form) if turn == 0 else "",
            first_tokens if turn == 0 else None,
            limit - used,
        )
        used += len(tok(text, add_special_tokens=False)["input_ids"]) + 1
        messages.append(Message("assistant", text))
        reply = env.step(state, text, task.entry["corpus_seed"])
        if reply is None or used >= limit:
            break
        messages.append(Message("tool", reply))
    return state, used


def score(model, tok, tasks: list, form: str, limit: int) -> tuple[list[float], list[int]]:
    from posttrain.data.builtin_env import check_episode
    from posttrain.data.chat import render_prompt, with_effort
    from posttrain.rewards.router import MathVerifier
    from posttrain.types import Completion, Sample

    digits = [tok.convert_tokens_to_ids(str(i)) for i in range(10)]
    code_start = tok("def", add_special_tokens=False)["input_ids"][:1]
    values, lengths = [], []
    code = [t for t in tasks if t.verifier == "code"]
    texts = {}
    for t in tasks:
        first = (code_start if t.verifier == "code" else digits) if form == "none" else None
        if t.verifier == "agent":
            state, used = episode(model, tok, t, form, first, limit)
            values.append(check_episode(t.entry["check"], state)[0])
            lengths.append(used)
            continue
        text = generate(model, tok, render_prompt(tok, with_effort(t.messages, "max")), opening(t, form), first, limit)
        texts[t.task_id] = text
        lengths.append(len(tok(text, add_special_tokens=False)["input_ids"]) + 1)
        if t.verifier == "math":
            values.append(MathVerifier().score_one(Sample(t, 0, (0,), Completion((0,), (0.0,), text, "stop"))).score)
    if code:
        from posttrain.rewards.code import CodeVerifier

        verifier = CodeVerifier(2, 5.0)
        samples = [Sample(t, 0, (0,), Completion((0,), (0.0,), texts[t.task_id], "stop")) for t in code]
        values += [r.score for r in asyncio.run(verifier.score(samples))]
        verifier.close()
    return values, lengths


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline", default=str(ROOT / "pipelines" / "quickstart.yaml"))
    parser.add_argument("--tasks", type=int, default=200, help="eval tasks per domain")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-scratchpad")
    parser.add_argument("--checkpoint", type=Path, help="score this SFT checkpoint instead of training one")
    args = parser.parse_args()

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.config.files import load_pipeline
    from posttrain.data.heldout import eval_tasks

    config = load_pipeline(args.pipeline)
    evaluation = next(s for s in config.stages if s.type == "eval")
    evaluation = evaluation.model_copy(update={"tasks_per_cell": args.tasks})
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    checkpoint = args.checkpoint or train_sft(config, args.out)
    sft_s = time.perf_counter() - started
    torch.set_num_threads(os.cpu_count() or 1)
    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    rows = []
    for domain, tasks in eval_tasks(evaluation, config).items():
        for form in FORMS:
            if form == "tool" and domain != "agent":
                continue
            values, lengths = score(model, tok, tasks, form, 96)
            se = float(np.std(values, ddof=1) / math.sqrt(len(values)))
            rows.append(
                {
                    "domain": domain,
                    "form": form,
                    "score": float(np.mean(values)),
                    "se": se,
                    "mean_tokens": float(np.mean(lengths)),
                    "n": len(values),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
    print("| domain | form | score ± se | mean tokens | n |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['domain']} | {r['form']} | {r['score']:.3f} ± {r['se']:.3f} | {r['mean_tokens']:.1f} | {r['n']} |")
    print(f"SFT {sft_s:.0f} s; checkpoint {checkpoint}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
