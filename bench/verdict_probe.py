"""Can the judge model learn the verdict itself? A probe outside the pipeline.

The judge stage's SFT teaches SmolLM2-135M the GRM's formats and reasons, but not the one
token that decides a verdict (bench/RESULTS.md, issue 30). This probe strips the problem to
that token: the GRM's verdict calls on generated cases (`data/judgements.py`, no worked
examples), read at the token after `{"verdict":"`, trained with a two-way cross-entropy over
the "yes" and "no" logits alone (no reply, no reason), on batches balanced half "yes", half
"no" (so the label prior is worth nothing). A plain transformers/AdamW loop in fp32.

Every `--eval-every` steps, on the verdict calls of `--heldout` held-out cases (no subject
shared with training): the accuracy of the decisive verdicts (checks whose verdict differs
between the clean and the defective response), the pairwise accuracy of the GRM's scoring
with the case's own rubric and P(yes) per criterion (per kind), and the share of calls read
as "yes".

    PYTHONPATH=. .venv/bin/python bench/verdict_probe.py [--lr 1e-4] [--steps 60] [--batch 16]

`--pairwise` asks the other question: both responses of a case in one prompt (as A and B,
`judge_prompts.pairwise_messages`), read at the token after `{"better":"`, trained with the
same two-way cross-entropy over "A" and "B". Each batch holds its cases in both orders, so
a position bias is worth nothing. Measured on the held-out cases: the share of judgements
(each case in each order) that prefer the clean response, the share of cases whose two
orders pick the same response, and the accuracy of the two orders combined (the sum of
their margins), per kind.

    PYTHONPATH=. .venv/bin/python bench/verdict_probe.py --pairwise [--lr 1e-4] [--steps 60]
"""

from __future__ import annotations

import argparse
import collections
import math
import random
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from posttrain.config import ModelConfig
from posttrain.data.judge_prompts import DECISION_PREFIXES, PAIRWISE_PREFIX, pairwise_messages, verdict_messages
from posttrain.data.judgements import cases
from posttrain.models import resolve_model
from posttrain.rewards.grm import final_score

VERDICT_PREFIX = DECISION_PREFIXES[0]  # a verdict reply up to its word, as the judge engine makes it write one


def verdict_calls(tok, case_list) -> list[dict]:
    """Each (response, criterion) of each case: the prompt up to the verdict's word, its label."""
    out = []
    for n, case in enumerate(case_list):
        for side, response in (("good", case.good), ("bad", case.bad)):
            for check in case.checks:
                verdict = check.on_good if side == "good" else check.on_bad
                messages = list(verdict_messages(case.task, response, check, examples=False))
                text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                out.append(
                    {
                        "ids": tok(text + VERDICT_PREFIX, add_special_tokens=False).input_ids,
                        "y": int(verdict),
                        "kind": case.kind,
                        "decisive": check.on_good != check.on_bad,
                        "side": side,
                        "case": n,
                    }
                )
    return out


def pairwise_calls(tok, case_list) -> list[dict]:
    """Each case in both orders: the prompt up to the decision's letter; y = 1 when A is the clean one."""
    out = []
    for n, case in enumerate(case_list):
        for order, (first, second) in enumerate(((case.good, case.bad), (case.bad, case.good))):
            text = tok.apply_chat_template(
                list(pairwise_messages(case.task, first, second)), tokenize=False, add_generation_prompt=True
            )
            ids = tok(text + PAIRWISE_PREFIX, add_special_tokens=False).input_ids
            out.append({"ids": ids, "y": 1 - order, "kind": case.kind, "case": n, "order": order})
    return out


def evaluate_pairwise(model, tok, calls, a: int, b: int) -> dict:
    model.eval()
    with torch.no_grad():
        xs = torch.cat([margins(model, tok, calls[i : i + 8], a, b) for i in range(0, len(calls), 8)]).tolist()
    model.train()
    by_case = collections.defaultdict(dict)
    for c, x in zip(calls, xs):
        by_case[c["case"]][c["order"]] = (c["kind"], x)
    right, agree, combined = (collections.defaultdict(list) for _ in range(3))
    for orders in by_case.values():
        kind, x0 = orders[0]
        _, x1 = orders[1]  # order 1 puts the clean response second: it wins when B is read
        right[kind] += [x0 > 0, x1 < 0]
        agree[kind].append((x0 > 0) != (x1 > 0))
        combined[kind].append(x0 - x1 > 0)

    def share(d):
        flat = [v for vs in d.values() for v in vs]
        return round(sum(flat) / len(flat), 3)

    return {
        "judgements right": share(right),
        "orders agree": share(agree),
        "both orders combined": share(combined),
        "per kind (combined)": {k: round(sum(v) / len(v), 2) for k, v in combined.items()},
        "read A": round(sum(x > 0 for x in xs) / len(xs), 3),
    }


def pairwise_main(args, model, tok) -> None:
    a = tok(PAIRWISE_PREFIX + "A", add_special_tokens=False).input_ids[-1]
    b = tok(PAIRWISE_PREFIX + "B", add_special_tokens=False).input_ids[-1]
    train_cases = cases(args.cases, 0, "train")
    held = pairwise_calls(tok, cases(args.heldout, 1, "heldout"))
    print(f"{len(train_cases)} training cases (two orders each), {len(held)} held-out judgements", flush=True)
    print("step 0", evaluate_pairwise(model, tok, held, a, b), flush=True)
    train_two_way(
        model,
        tok,
        args,
        lambda rng: pairwise_calls(tok, rng.sample(train_cases, args.batch // 2)),  # both orders of each
        (a, b),
        lambda: evaluate_pairwise(model, tok, held, a, b),
    )


def train_two_way(model, tok, args, draw, tokens: tuple[int, int], evaluate_now) -> None:
    """AdamW (10 warm-up steps, grad clip 1) on the two-way cross-entropy between the logits
    of `tokens` (label 1: the first) on the batches `draw(rng)` gives; `evaluate_now()` printed
    every `args.eval_every` steps."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    rng, started, running = random.Random(0), time.time(), None
    for step in range(1, args.steps + 1):
        batch = draw(rng)
        x = margins(model, tok, batch, *tokens)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x, torch.tensor([float(c["y"]) for c in batch]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        schedule.step()
        running = loss.item() if running is None else 0.9 * running + 0.1 * loss.item()
        if step % args.eval_every == 0:
            print(f"step {step} {time.time() - started:.0f}s loss {running:.3f}", evaluate_now(), flush=True)


def margins(model, tok, items, yes: int, no: int) -> torch.Tensor:
    """logit(yes) - logit(no) at the last position of each call (left-padded batches)."""
    batch_len = max(len(c["ids"]) for c in items)
    ids = torch.full((len(items), batch_len), tok.pad_token_id or 0)
    mask = torch.zeros_like(ids)
    for j, c in enumerate(items):
        ids[j, batch_len - len(c["ids"]) :] = torch.tensor(c["ids"])
        mask[j, batch_len - len(c["ids"]) :] = 1
    logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits[:, -1].float()
    return logits[:, yes] - logits[:, no]


def evaluate(model, tok, calls, case_list, yes: int, no: int) -> dict:
    model.eval()
    with torch.no_grad():
        xs = torch.cat([margins(model, tok, calls[i : i + 16], yes, no) for i in range(0, len(calls), 16)]).tolist()
    model.train()
    decisive = [(x > 0) == bool(c["y"]) for c, x in zip(calls, xs) if c["decisive"]]
    p_yes = collections.defaultdict(list)  # (case, side): P(yes) of each check, in the rubric's order
    for c, x in zip(calls, xs):
        p_yes[(c["case"], c["side"])].append(1 / (1 + math.exp(-x)))
    per_kind = collections.defaultdict(list)
    for n, case in enumerate(case_list):
        good, bad = (final_score(case.checks, p_yes[(n, side)]) for side in ("good", "bad"))
        per_kind[case.kind].append(good > bad)
    pairs = [won for v in per_kind.values() for won in v]
    return {
        "decisive verdicts": round(sum(decisive) / len(decisive), 3),
        "pairwise": round(sum(pairs) / len(pairs), 3),
        "per kind": {k: round(sum(v) / len(v), 2) for k, v in per_kind.items()},
        "read yes": round(sum(x > 0 for x in xs) / len(xs), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--cases", type=int, default=3000, help="training cases (six verdict calls each)")
    parser.add_argument("--heldout", type=int, default=64, help="held-out cases evaluated")
    parser.add_argument("--eval-every", type=int, default=30)
    parser.add_argument("--pairwise", action="store_true", help="both responses in one prompt: which is better")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    folder = resolve_model(ModelConfig(name="smollm2-135m-instruct"))
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if args.pairwise:
        pairwise_main(args, model, tok)
        return
    yes = tok(VERDICT_PREFIX + "yes", add_special_tokens=False).input_ids[-1]
    no = tok(VERDICT_PREFIX + "no", add_special_tokens=False).input_ids[-1]
    train, held_cases = verdict_calls(tok, cases(args.cases, 0, "train")), cases(args.heldout, 1, "heldout")
    held = verdict_calls(tok, held_cases)
    by_label = [[c for c in train if c["y"] == y] for y in (0, 1)]
    print(f"{len(train)} training calls ({sum(c['y'] for c in train) / len(train):.2f} yes), {len(held)} held out")
    print("step 0", evaluate(model, tok, held, held_cases, yes, no), flush=True)
    train_two_way(
        model,
        tok,
        args,
        lambda rng: [rng.choice(by_label[i % 2]) for i in range(args.batch)],
        (yes, no),
        lambda: evaluate(model, tok, held, held_cases, yes, no),
    )


if __name__ == "__main__":
    main()
