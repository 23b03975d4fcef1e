"""How much of a real RL batch the trainer spends on padding, and on repeated prompts.

Replays the trainer's own batching (`shard_balanced` over the ranks, then each rank's
`micro_batches` without shared prompts: sorted by length, padded to the longest) on every step's batch saved in
a run folder (`rollouts/**.jsonl`: prompt and response tokens of every trained sample),
with the run's `trainer.workers` and `micro_batch_tokens`. Per stage it reports the
positions the model runs over: padded (today), packed (no padding: the bound of packing
micro-batches by tokens), and packed with each group's prompt computed once.

    .venv/bin/python bench/padding.py runs/quickstart [--workers N] [--micro-batch-tokens T]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def batches(run_dir: Path) -> dict[str, list[list[dict]]]:
    """{stage: [one step's trained samples]}."""
    steps: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for path in sorted((run_dir / "rollouts").rglob("*.jsonl")):
        if path.name.endswith(".replaced.jsonl") or "eval" in path.relative_to(run_dir / "rollouts").parts:
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("ok", True) and row.get("response_tokens", 0) > 0:
                steps[(row["stage"], row["step"])].append(row)
    out: dict[str, list[list[dict]]] = defaultdict(list)
    for (stage, _), rows in sorted(steps.items()):
        out[stage].append(rows)
    return out


def positions(rows: list[dict], workers: int, micro_batch_tokens: int) -> tuple[int, int, int]:
    """(padded, packed, packed with shared prompts) positions of one batch over all ranks."""
    from posttrain.train.batching import micro_batches
    from posttrain.train.group import shard_balanced
    from posttrain.types import TrainSequence

    seqs = [TrainSequence((0,) * (r["prompt_tokens"] + r["response_tokens"]), r["prompt_tokens"], (), ()) for r in rows]
    padded = 0
    for shard in shard_balanced(seqs, workers):
        local = [seqs[i] for i in shard]
        for mb in micro_batches(local, micro_batch_tokens, share_prompts=False):
            padded += len(mb) * max(len(local[i].token_ids) for i in mb)
    packed = sum(len(s.token_ids) for s in seqs)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["step"], r["group"])].append(r)
    shared = sum(g[0]["prompt_tokens"] + sum(r["response_tokens"] for r in g) for g in groups.values())
    return padded, packed, shared


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--workers", type=int, help="default: the run's trainer.workers")
    parser.add_argument("--micro-batch-tokens", type=int, help="default: the run's trainer.micro_batch_tokens")
    args = parser.parse_args()
    import yaml

    trainer = yaml.safe_load((args.run_dir / "config.resolved.yaml").read_text())["trainer"]
    workers = args.workers or trainer["workers"]
    micro = args.micro_batch_tokens or trainer["micro_batch_tokens"]
    print(f"{args.run_dir}: {workers} ranks, micro_batch_tokens {micro}")
    print("| stage | steps | samples/step | padded positions | padding share | packed | shared prompts |")
    print("|---|---|---|---|---|---|---|")
    total = [0, 0, 0]
    for stage, steps in batches(args.run_dir).items():
        sums = [0, 0, 0]
        for rows in steps:
            for k, v in enumerate(positions(rows, workers, micro)):
                sums[k] += v
        total = [a + b for a, b in zip(total, sums)]
        padded, packed, shared = sums
        print(
            f"| {stage} | {len(steps)} | {sum(map(len, steps)) / len(steps):.0f} | {padded} | "
            f"{1 - packed / padded:.1%} | {packed / padded:.2f}x | {shared / padded:.2f}x |"
        )
    padded, packed, shared = total
    print(f"| all | | | {padded} | {1 - packed / padded:.1%} | {packed / padded:.2f}x | {shared / padded:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
