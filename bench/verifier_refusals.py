"""What a real model's prose costs under the answer verifiers: of a run's saved responses
(rollouts/**.jsonl: RL steps, expert jobs, MOPD, eval), the share each verifier refused as
unreadable (no final value it could read, not in the form asked for) or hedged (two
values, a hedge word), beside those it read and found right or wrong, per domain, with
examples of each refusal.

    .venv/bin/python bench/verifier_refusals.py runs/smollm2 [--examples 3] [--stage experts]

A response over its budget is counted by the verdict its verifier gave before the budget's
penalty (the `was:` of its reason). Verdicts whose reason starts with a phrase this script
does not know are listed under that phrase, never dropped; code and GRM verdicts (tests
run, a judge's score) and an agent's environment checks (`store[...]`) are counted as
`other` with their own phrase.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

UNREADABLE = (
    "not an answer",
    "not a final value",
    "not in the form asked for",
    "no answer found",
    "several final answers",
    "text after the final answer",
    "not a number literal",
    "the slot is modified by what precedes it",
    "no final answer",  # an agent episode that ended on a tool call, or out of turns or tokens
)
DOMAINS = ("general", "coding", "agent")
WAS = re.compile(r"^over budget: .*?\(was: (.*)\)$", re.S)


def verdict_reason(row: dict) -> str:
    """The verifier's own reason: for a response over budget, the one the penalty replaced."""
    reason = str(row.get("reason", ""))
    found = WAS.match(reason) if row.get("over_budget") else None
    return found.group(1) if found else reason


def head(reason: str) -> str:
    """The reason's leading phrase: up to its first `:`, `(`, `[` or quote."""
    return re.split(r"[:(\['\"]", reason, maxsplit=1)[0].strip().lower() or "(no reason)"


def verdict_class(reason: str) -> str:
    phrase = head(reason)
    if phrase.startswith("hedged"):
        return "hedged"
    if phrase in UNREADABLE:
        return "unreadable"
    if phrase in ("correct", "wrong"):
        return phrase
    if phrase == "answer" and " != expected " in reason:  # an agent's final answer, read and compared
        return "wrong"
    return "other"


def domain_of(row: dict) -> str:
    """The row's domain: its cell's (MOPD, eval), or the domain named in its stage or job."""
    entry = row.get("entry") or {}
    if entry.get("domain"):
        return entry["domain"]
    parts = re.split(r"[/-]", str(row.get("stage", "")))
    return next((p for p in parts if p in DOMAINS), "other")


def read_run(run_dir: Path, stage: str | None) -> list[dict]:
    rows = []
    for path in sorted((run_dir / "rollouts").rglob("*.jsonl")):
        if path.name.endswith(".replaced.jsonl"):
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of a crashed write
            if stage is None or str(row.get("stage", "")).split("/")[0] == stage:
                rows.append(row)
    return rows


def tally(rows: list[dict]) -> dict[str, Counter]:
    """Per domain: how many responses fell in each class, and each reason's phrase."""
    out: dict[str, Counter] = defaultdict(Counter)
    for row in rows:
        reason = verdict_reason(row)
        out[domain_of(row)][verdict_class(reason)] += 1
        out[domain_of(row)][f"phrase:{head(reason)}"] += 1
    return out


def report(rows: list[dict], examples: int) -> str:
    counts = tally(rows)
    lines = ["| domain | responses | unreadable | hedged | correct | wrong | other |", "|---|---|---|---|---|---|---|"]
    for domain in sorted(counts):
        c, n = counts[domain], sum(v for k, v in counts[domain].items() if not k.startswith("phrase:"))
        shares = " | ".join(f"{c[k]} ({c[k] / n:.1%})" for k in ("unreadable", "hedged", "correct", "wrong", "other"))
        lines.append(f"| {domain} | {n} | {shares} |")
    for domain in sorted(counts):
        phrases = sorted(((v, k[7:]) for k, v in counts[domain].items() if k.startswith("phrase:")), reverse=True)
        lines.append(f"\n{domain}: reasons by leading phrase: " + "; ".join(f"{k} {v}" for v, k in phrases))
        for kind in ("unreadable", "hedged"):
            found = [r for r in rows if domain_of(r) == domain and verdict_class(verdict_reason(r)) == kind]
            for row in found[:examples]:
                text = " ".join(str(row.get("response", "")).split())
                lines.append(f"  {kind} [{row.get('stage')}] {text[-160:]!r}\n      -> {verdict_reason(row)[:160]}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--examples", type=int, default=3, help="examples of each refusal per domain")
    parser.add_argument("--stage", help="only this stage's responses (an experts stage: all its jobs)")
    args = parser.parse_args(argv)
    if not (args.run_dir / "rollouts").is_dir():
        print(f"{args.run_dir}: no rollouts folder (is it a run folder?)", file=sys.stderr)
        return 2
    rows = read_run(args.run_dir, args.stage)
    if not rows:
        print(
            f"{args.run_dir}: no saved responses" + (f" of stage {args.stage}" if args.stage else ""), file=sys.stderr
        )
        return 2
    print(report(rows, args.examples))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
