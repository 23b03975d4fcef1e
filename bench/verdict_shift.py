"""Which saved samples of a run change verdict between two versions of the verifiers: score
every saved sample of the named stages (RL, MOPD, expert jobs) with the verifiers of the
posttrain on PYTHONPATH (`score`), then compare two such files (`compare`), by source and
by why (the reason each version gives). Answer and code verifiers only: the GRM's
judgements are a model's, replayed from the scoreboard by `posttrain rewards replay`.

    PYTHONPATH=/path/to/old/checkout .venv/bin/python bench/verdict_shift.py score runs/quickstart old.json
    PYTHONPATH=. .venv/bin/python bench/verdict_shift.py score runs/quickstart new.json
    .venv/bin/python bench/verdict_shift.py compare old.json new.json

`posttrain rewards replay` does the same with one version (the run's reward config, this
checkout's verifiers), for runs whose config this version reads.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def saved_rows(run_dir: Path) -> dict[str, list[dict]]:
    """Saved rollouts per stage or job, eval cells left out (an eval stage scores, it does not train)."""
    root = run_dir / "rollouts"
    out = {}
    for path in sorted(root.rglob("*.jsonl")):
        name = str(path.relative_to(root).with_suffix(""))
        if name.startswith("eval/") or name.endswith(".replaced"):
            continue
        out[name] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def score(run_dir: Path, out: Path) -> None:
    import posttrain
    from posttrain.config import ArithmeticTasks, CodingTasks, MixtureTasks, RLStage
    from posttrain.rewards.base import score_sync
    from posttrain.rewards.router import reward_router
    from posttrain.types import Completion, Message, Sample, Task

    sources = [ArithmeticTasks(type="arithmetic", size=1), CodingTasks(type="coding", size=1)]
    stage = RLStage(name="verdicts", type="rl", lr=1e-4, steps=1, tasks=MixtureTasks(type="mixture", sources=sources))
    router = reward_router(stage)
    verdicts = {}
    try:
        for name, rows in saved_rows(run_dir).items():
            rows = [r for r in rows if r["verifier"] != "grm"]
            samples = [
                Sample(
                    Task(
                        task_id=r["task_id"],
                        family=r["family"],
                        messages=tuple(Message(m["role"], m["content"]) for m in r["messages"]),
                        answer=r["answer"],
                        entry=r["entry"] or {},
                        verifier=r["verifier"],
                    ),
                    r["group"],
                    (0,) * r["prompt_tokens"],
                    Completion((0,) * r["response_tokens"], (0.0,) * r["response_tokens"], r["response"], "stop"),
                    r["policy_version"],
                    env=r.get("env"),
                )
                for r in rows
            ]
            for r, result in zip(rows, score_sync(router, samples)):
                key = f"{name}|{r['step']}|{r['task_id']}|{r['group']}|{r.get('index', r.get('sample', ''))}"
                while key in verdicts:
                    key += "'"
                verdicts[key] = {
                    "source": r["verifier"],
                    "ok": result.ok,
                    "score": result.score,
                    "reason": result.reason,
                    "response": r["response"][-200:],
                    "answer": r["answer"],
                }
    finally:
        router.close()
    out.write_text(json.dumps({"posttrain": str(Path(posttrain.__file__).parent), "verdicts": verdicts}))
    print(f"{len(verdicts)} samples scored with {posttrain.__file__}")


def compare(old_path: Path, new_path: Path, examples: int) -> None:
    old, new = (json.loads(p.read_text())["verdicts"] for p in (old_path, new_path))
    keys = sorted(old.keys() & new.keys())
    by_source = Counter(old[k]["source"] for k in keys)
    changed = [k for k in keys if (old[k]["ok"], old[k]["score"]) != (new[k]["ok"], new[k]["score"])]
    print(f"{len(keys)} samples in both; {len(changed)} change verdict ({len(changed) / max(len(keys), 1):.2%})\n")
    print("| source | samples | changed | up | down | unscored -> scored | scored -> unscored |")
    print("|---|---|---|---|---|---|---|")
    for source in sorted(by_source):
        mine = [k for k in changed if old[k]["source"] == source]
        up = sum(new[k]["ok"] and old[k]["ok"] and new[k]["score"] > old[k]["score"] for k in mine)
        down = sum(new[k]["ok"] and old[k]["ok"] and new[k]["score"] < old[k]["score"] for k in mine)
        gained = sum(new[k]["ok"] and not old[k]["ok"] for k in mine)
        lost = sum(old[k]["ok"] and not new[k]["ok"] for k in mine)
        print(f"| {source} | {by_source[source]} | {len(mine)} | {up} | {down} | {gained} | {lost} |")
    why = Counter(
        (old[k]["source"], _gist(old[k]["reason"]), _gist(new[k]["reason"]), old[k]["score"], new[k]["score"])
        for k in changed
    )
    print("\nwhy (old reason -> new reason, old -> new score), most common first:")
    for (source, a, b, x, y), n in why.most_common(examples):
        print(f"  {n:>4}  {source}: {x:g} -> {y:g}  {a!r} -> {b!r}")
    shown = Counter()
    print("\nexamples:")
    for k in changed:
        key = (old[k]["source"], _gist(old[k]["reason"]), _gist(new[k]["reason"]))
        if shown[key]:
            continue
        shown[key] += 1
        print(f"  [{old[k]['source']}] answer {old[k]['answer']!r}, response ...{old[k]['response'][-80:]!r}")
        before, after = (
            f"{old[k]['score']:g} ({old[k]['reason'][:100]})",
            f"{new[k]['score']:g} ({new[k]['reason'][:100]})",
        )
        print(f"      old {before} -> new {after}")
        if sum(shown.values()) >= examples:
            break


def _gist(reason: str) -> str:
    """A reason without its sample-specific values: digits and quoted text folded."""
    import re

    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", reason or "")
    return re.sub(r"-?\d+(\.\d+)?", "N", text)[:90]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score")
    s.add_argument("run_dir", type=Path)
    s.add_argument("out", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    c.add_argument("--examples", type=int, default=12)
    args = parser.parse_args()
    if args.command == "score":
        score(args.run_dir, args.out)
    else:
        compare(args.old, args.new, args.examples)


if __name__ == "__main__":
    main()
