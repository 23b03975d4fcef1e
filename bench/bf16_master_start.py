"""Where fp32 master weights start decides whether a bf16 model moves in its first steps.

SmolLM2-135M-Instruct, 8 AdamW steps (lr 2e-5) of supervised loss on one batch of 8 sums,
fp32 master weights, a bf16 copy rounded from them after each step (as DeepSpeed's ZeRO
optimizers do). Three starts of the master: on the bf16 grid (DeepSpeed's: copied from the
bf16 module), the checkpoint's own fp32 values, and dithered (posttrain's: a seeded uniform
point inside each bf16 value's rounding interval, train/optim.py). Prints, per step, the
loss of the fp32 master and of the bf16 copy, and the share of bf16 elements changed.

    PYTHONPATH=. .venv/bin/python bench/bf16_master_start.py
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STARTS = ("on the bf16 grid", "the checkpoint's fp32", "dithered")
SUMS = [(12, 34), (56, 7), (23, 45), (81, 9), (14, 62), (33, 48), (70, 21), (5, 88)]


def main() -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.config import ModelConfig
    from posttrain.models import resolve_model
    from posttrain.train.optim import rounding_interval_point

    torch.manual_seed(0)
    folder = resolve_model(ModelConfig(name="smollm2-135m-instruct"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenizer([f"What is {a} + {b}? Answer: {a + b}" for a, b in SUMS], return_tensors="pt", padding=True)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)

    def loss(model) -> float:
        with torch.no_grad():
            return float(model(**batch, labels=labels).loss)

    for start in STARTS:
        master = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        for index, p in enumerate(master.parameters()):
            if start != "the checkpoint's fp32":
                p.data.copy_(p.data.bfloat16().float())
            if start == "dithered":
                p.data.copy_(rounding_interval_point(p.data, torch.bfloat16, torch.Generator().manual_seed(index)))
        low = copy.deepcopy(master).bfloat16()
        first = [p.detach().clone() for p in low.parameters()]
        optimizer = torch.optim.AdamW(master.parameters(), lr=2e-5, weight_decay=0.0)
        print(f"master {start}: start loss fp32 {loss(master):.4f}, bf16 {loss(low):.4f}", flush=True)
        for step in range(1, 9):
            optimizer.zero_grad()
            master(**batch, labels=labels).loss.backward()
            optimizer.step()
            changed = total = 0
            for p, q, p0 in zip(low.parameters(), master.parameters(), first):
                p.data.copy_(q.data.bfloat16())
                changed, total = changed + int((p.data != p0).sum()), total + p.numel()
            print(
                f"  step {step}: loss fp32 master {loss(master):.4f}, bf16 copy {loss(low):.4f}; "
                f"bf16 elements changed {changed / total:.1%}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
