"""The recipe's claims, judged on a run's eval (RUN_DIR/eval.json): one line per target, met
or missed and by how much.

- effort ladder: in each domain, for the experts and the student, low < high < max, each step
  by more than K standard errors of the paired difference (K = 2 for the recipe, 1 for the
  quickstart);
- student lengths: low < high < max in each domain, max at least 3x low;
- experts above SFT: each expert against SFT on its own cell by more than K SE, on at least
  7 of 9 cells;
- the student at its teachers: at least 95 % of the teacher's score, on 9 of 9 cells.

    .venv/bin/python bench/recipe_targets.py runs/recipe [--k 2]
    .venv/bin/python bench/recipe_targets.py runs/quickstart --k 1

The paired comparisons are computed again from the eval's saved samples
(RUN_DIR/rollouts/EVAL/CHECKPOINT/CELL.jsonl, each sample's task id and verdict) with the
eval stage's own `comparisons`, so a run made before a comparison was added is judged the
same way; they must agree with eval.json's wherever both have one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EFFORTS = ("low", "high", "max")


def ladder(comparisons: list[dict], roles: dict[str, str], role: str, k: float) -> list[tuple[bool, str]]:
    """Each domain's two steps (high - low, max - high) for the checkpoints of `role`."""
    out = []
    for c in comparisons:
        if c["kind"] in ("high_minus_low", "max_minus_high") and roles.get(c["a"].split("@")[0]) == role:
            ok = c["diff"] > k * c["se"]
            out.append((ok, f"{c['domain']:<8} {c['kind']:<15} {c['diff']:+.3f} ± {c['se']:.3f} (n={c['n']})"))
    return out


def lengths(rows: list[dict], role: str) -> list[tuple[bool, str]]:
    out = []
    for domain in sorted({r["domain"] for r in rows if r["role"] == role}):
        tokens = {r["effort"]: r["mean_tokens"] for r in rows if r["role"] == role and r["domain"] == domain}
        if not all(e in tokens for e in EFFORTS):
            continue
        low, high, top = (tokens[e] for e in EFFORTS)
        ok = low < high < top and top >= 3 * low
        out.append(
            (ok, f"{domain:<8} low {low:.1f} < high {high:.1f} < max {top:.1f}, max/low {top / max(low, 1e-9):.1f}x")
        )
    return out


def cell_value(row: dict) -> float:
    """A saved eval sample's score, counted by the eval stage's own `cell_score`."""
    from types import SimpleNamespace

    from posttrain.stages.evaluate import cell_score

    result = SimpleNamespace(over_budget=row.get("over_budget", False), source=row.get("source"), score=row["reward"])
    return cell_score(None, result)


def rescored(run_dir: Path, rows: list[dict], stage: str) -> list[dict]:
    """Every paired comparison, from the saved samples of each (checkpoint, cell) of `rows`."""
    from posttrain.stages.evaluate import comparisons

    per_task = {}
    for r in rows:
        cell = f"{r['domain']}-{r['effort']}"
        path = run_dir / "rollouts" / stage / r["checkpoint"] / f"{cell}.jsonl"
        if not path.is_file():
            path = run_dir / "rollouts" / stage / r["checkpoint"] / cell / f"{cell}.jsonl"
        samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        per_task[(r["checkpoint"], r["domain"], r["effort"])] = {
            s["task_id"]: cell_value(s) for s in samples if s.get("ok", True)
        }
    return comparisons(rows, per_task)


def pairs(comparisons: list[dict], kind: str) -> list[dict]:
    return [c for c in comparisons if c["kind"] == kind]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--k", type=float, default=2.0, help="standard errors a step must clear (recipe 2, quickstart 1)"
    )
    args = parser.parse_args(argv)
    path = args.run_dir / "eval.json"
    if not path.is_file():
        print(f"{path}: no eval.json (has the run's eval stage finished?)", file=sys.stderr)
        return 2
    found = json.loads(path.read_text())
    rows = found["rows"]
    comparisons = rescored(args.run_dir, rows, found.get("stage", "eval"))
    saved = {(c["kind"], c["a"], c["b"]): c for c in found["comparisons"]}
    for c in comparisons:  # the same samples, the same arithmetic: they must agree
        old = saved.get((c["kind"], c["a"], c["b"]))
        if old is not None and (abs(old["diff"] - c["diff"]) > 1e-9 or old["n"] != c["n"]):
            print(
                f"rescored {c['kind']} {c['a']} differs from eval.json: {c['diff']} vs {old['diff']}", file=sys.stderr
            )
            return 2
    print(f"{len(comparisons)} paired comparisons from the saved samples ({len(saved)} in eval.json, all equal)")
    by = {(r["role"], r["domain"], r["effort"]): r for r in rows}
    verdicts: list[tuple[str, bool]] = []

    def section(title: str, lines: list[tuple[bool, str]], need: int | None = None) -> None:
        met = sum(ok for ok, _ in lines)
        need = len(lines) if need is None else need
        ok = bool(lines) and met >= need
        verdicts.append((title, ok))
        print(f"{'MET ' if ok else 'MISS'} {title}: {met} of {len(lines)} (need {need})")
        for good, text in lines:
            print(f"     {'ok ' if good else 'no '} {text}")

    roles = {r["checkpoint"]: r["role"] for r in rows}
    for role in ("expert", "student"):
        section(f"{role}: low < high < max, each step > {args.k:g} SE", ladder(comparisons, roles, role, args.k))
    section("student lengths: low < high < max, max >= 3x low", lengths(rows, "student"))
    sft = [
        (c["diff"] > args.k * c["se"], f"{c['a']:<36} {c['diff']:+.3f} ± {c['se']:.3f}")
        for c in pairs(comparisons, "expert_minus_sft")
    ]
    section(f"experts above SFT by > {args.k:g} SE", sft, need=min(7, len(sft)))
    student = []
    for c in pairs(comparisons, "student_minus_teacher"):
        teacher = by.get(("expert", c["domain"], c["effort"]))
        mine = by.get(("student", c["domain"], c["effort"]))
        if teacher is None or mine is None:
            continue
        ratio = mine["score"] / teacher["score"] if teacher["score"] > 0 else float("inf")
        student.append(
            (
                mine["score"] >= 0.95 * teacher["score"],
                f"{c['domain'] + '-' + c['effort']:<13} student {mine['score']:.3f} teacher {teacher['score']:.3f} "
                f"({ratio:.0%}; paired {c['diff']:+.3f} ± {c['se']:.3f})",
            )
        )
    section("student at >= 95 % of its teacher", student)
    print(f"targets met: {sum(ok for _, ok in verdicts)} of {len(verdicts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
