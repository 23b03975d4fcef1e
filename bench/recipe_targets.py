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

A run of pipelines/smollm2.yaml (or `--targets smollm2`) is judged by that file's targets
instead (the recipe on a real model):

- experts above SFT by > 2 SE on at least 6 of 9 cells;
- in every domain the experts' mean tokens low < high < max; in at least 2 domains their
  score low < high < max, each step by > 1 SE of the paired difference;
- MOPD's captured headroom (student - SFT) / (expert - SFT), averaged over the cells where
  the expert beats SFT by > 2 SE: at least 0.8;
- the student above one RL run on the mixture of all cells by > 2 SE on average: the mixed
  run is `bench/mopd.py RUN_DIR --steps recipe` (its folder, RUN_DIR/bench-mopd, or
  `--mixed DIR`); each (domain, task) is one unit, its student - mixed difference averaged
  over the efforts, so the cells that share tasks are not counted as independent;
- wall <= 2 h and peak <= 16 GiB: from RUN_DIR/peak_memory.json, which
  `bench/peak_memory.py --record RUN_DIR/peak_memory.json -- posttrain run ...` writes
  (without it the wall is the stages' span in run_state.json and the peak is unmeasured).

    .venv/bin/python bench/recipe_targets.py runs/smollm2
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


class Report:
    """The verdicts, printed as they are made: `MET `/`MISS` and the lines behind each."""

    def __init__(self):
        self.verdicts: list[tuple[str, bool]] = []

    def section(self, title: str, lines: list[tuple[bool, str]], need: int | None = None) -> None:
        met = sum(ok for ok, _ in lines)
        need = len(lines) if need is None else need
        ok = bool(lines) and met >= need
        short = "" if ok else f"; missed by {need - met}" if lines else "; nothing to judge"
        self.verdict(f"{title}: {met} of {len(lines)} (need {need}{short})", ok, lines)

    def verdict(self, title: str, ok: bool, lines: list[tuple[bool, str]] = ()) -> None:
        self.verdicts.append((title, ok))
        print(f"{'MET ' if ok else 'MISS'} {title}")
        for good, text in lines:
            print(f"     {'ok ' if good else 'no '} {text}")

    def total(self) -> None:
        print(f"targets met: {sum(ok for _, ok in self.verdicts)} of {len(self.verdicts)}")


def judge_recipe(rows: list[dict], comparisons: list[dict], k: float, report: Report) -> None:
    """pipelines/recipe.yaml's and the quickstart's targets (issue 31)."""
    by = {(r["role"], r["domain"], r["effort"]): r for r in rows}
    roles = {r["checkpoint"]: r["role"] for r in rows}
    for role in ("expert", "student"):
        report.section(f"{role}: low < high < max, each step > {k:g} SE", ladder(comparisons, roles, role, k))
    report.section("student lengths: low < high < max, max >= 3x low", lengths(rows, "student"))
    sft = [
        (c["diff"] > k * c["se"], f"{c['a']:<36} {c['diff']:+.3f} ± {c['se']:.3f}")
        for c in pairs(comparisons, "expert_minus_sft")
    ]
    report.section(f"experts above SFT by > {k:g} SE", sft, need=min(7, len(sft)))
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
    report.section("student at >= 95 % of its teacher", student)


# ---------------------------------------------------------------- smollm2.yaml (issue 59)

SMOLLM2_WALL_S = 2 * 3600
SMOLLM2_PEAK_GIB = 16.0


def cell_of(row: dict) -> str:
    return f"{row['domain']}-{row['effort']}"


def experts_vs_sft(comparisons: list[dict]) -> list[tuple[bool, str, dict]]:
    return [
        (c["diff"] > 2 * c["se"], f"{c['domain'] + '-' + c['effort']:<13} {c['diff']:+.3f} ± {c['se']:.3f}", c)
        for c in pairs(comparisons, "expert_minus_sft")
    ]


def expert_ladders(rows: list[dict], comparisons: list[dict]) -> tuple[list, list]:
    """Per domain: the experts' mean tokens low < high < max, and their score each step > 1 SE."""
    tokens, scores = [], []
    for domain in sorted({r["domain"] for r in rows if r["role"] == "expert"}):
        mine = {r["effort"]: r for r in rows if r["role"] == "expert" and r["domain"] == domain}
        if not all(e in mine for e in EFFORTS):
            tokens.append((False, f"{domain:<8} efforts scored: {sorted(mine)} (needs low, high, max)"))
            continue
        low, high, top = (mine[e]["mean_tokens"] for e in EFFORTS)
        tokens.append((low < high < top, f"{domain:<8} tokens low {low:.1f} < high {high:.1f} < max {top:.1f}"))
        steps = {
            c["kind"]: c
            for c in comparisons
            if c["domain"] == domain
            and c["kind"] in ("high_minus_low", "max_minus_high")
            and c["a"] in expert_refs(rows)
        }
        if len(steps) < 2:
            scores.append((False, f"{domain:<8} a step of the ladder has no paired comparison"))
            continue
        up, top_step = steps["high_minus_low"], steps["max_minus_high"]
        ok = up["diff"] > up["se"] and top_step["diff"] > top_step["se"]
        scores.append(
            (
                ok,
                f"{domain:<8} score low {mine['low']['score']:.3f} high {mine['high']['score']:.3f} max "
                f"{mine['max']['score']:.3f}; high-low {up['diff']:+.3f} ± {up['se']:.3f}, "
                f"max-high {top_step['diff']:+.3f} ± {top_step['se']:.3f}",
            )
        )
    return tokens, scores


def expert_refs(rows: list[dict]) -> set[str]:
    return {f"{r['checkpoint']}@{cell_of(r)}" for r in rows if r["role"] == "expert"}


def captured_headroom(rows: list[dict], comparisons: list[dict], report: Report) -> None:
    """(student - SFT) / (expert - SFT) on each cell where the expert beats SFT by > 2 SE."""
    by = {(r["role"], cell_of(r)): r for r in rows}
    lines, ratios = [], []
    for ok, _, c in experts_vs_sft(comparisons):
        cell = f"{c['domain']}-{c['effort']}"
        sft, expert, student = (by.get((role, cell)) for role in ("sft", "expert", "student"))
        if not ok or student is None:
            continue
        ratio = (student["score"] - sft["score"]) / (expert["score"] - sft["score"])
        ratios.append(ratio)
        lines.append(
            (
                ratio >= 0.8,
                f"{cell:<13} SFT {sft['score']:.3f} expert {expert['score']:.3f} student {student['score']:.3f}: "
                f"{ratio:.2f}",
            )
        )
    if not ratios:
        report.verdict("MOPD captured headroom >= 0.8: undefined, no cell where an expert beats SFT by > 2 SE", False)
        return
    mean = sum(ratios) / len(ratios)
    short = "" if mean >= 0.8 else f"; missed by {0.8 - mean:.2f}"
    report.verdict(f"MOPD captured headroom >= 0.8: {mean:.2f} over {len(ratios)} cells{short}", mean >= 0.8, lines)


def cell_values(folder: Path, stage: str, checkpoint: str, cell: str) -> dict[str, float]:
    """A checkpoint's saved eval samples on one cell: task id -> cell score."""
    path = folder / "rollouts" / stage / checkpoint / f"{cell}.jsonl"
    if not path.is_file():
        path = folder / "rollouts" / stage / checkpoint / cell / f"{cell}.jsonl"
    samples = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {s["task_id"]: cell_value(s) for s in samples if s.get("ok", True)}


def student_vs_mixed(run_dir: Path, rows: list[dict], stage: str, mixed_dir: Path, report: Report) -> None:
    """The student against one RL run on the mixture (bench/mopd.py's `mixed-rl`), paired on
    the eval's tasks; a (domain, task) is one unit, its difference averaged over efforts."""
    title = "student above the mixed RL run by > 2 SE on average"
    bench = mixed_dir / "bench.json"
    if not bench.is_file():
        report.verdict(f"{title}: not measured ({bench} missing: run bench/mopd.py {run_dir} --steps recipe)", False)
        return
    found = json.loads(bench.read_text())
    mixed_rows = [r for r in found["rows"] if r["checkpoint"] == "mixed-rl"]
    students = {cell_of(r): r for r in rows if r["role"] == "student"}
    per_unit: dict[tuple[str, str], list[float]] = {}
    lines = []
    for m in mixed_rows:
        cell, student = cell_of(m), students.get(cell_of(m))
        if student is None:
            continue
        mine = cell_values(run_dir, stage, student["checkpoint"], cell)
        theirs = cell_values(mixed_dir, stage, "mixed-rl", cell)
        diff, se, n = paired(mine, theirs)
        lines.append(
            (
                diff > 2 * se,
                f"{cell:<13} student {student['score']:.3f} mixed {m['score']:.3f}: {diff:+.3f} ± {se:.3f} (n={n})",
            )
        )
        for task in mine.keys() & theirs.keys():
            per_unit.setdefault((m["domain"], task), []).append(mine[task] - theirs[task])
    if not per_unit:
        report.verdict(f"{title}: no cell scored by both the student and {mixed_dir}'s mixed-rl", False)
        return
    mean, se, n = paired({str(u): sum(v) / len(v) for u, v in per_unit.items()}, {str(u): 0.0 for u in per_unit})
    steps = found.get("mixed_rl_steps")
    budget = f"; mixed run {steps} steps" if steps is not None else ""
    ok = mean > 2 * se
    short = "" if ok else f"; missed by {2 * se - mean:.3f}"
    report.verdict(f"{title}: {mean:+.3f} ± {se:.3f} over {n} (domain, task) units{budget}{short}", ok, lines)


def paired(a: dict[str, float], b: dict[str, float]) -> tuple[float, float, int]:
    from posttrain.stages.evaluate import paired as eval_paired

    return eval_paired(a, b)


def wall_and_peak(run_dir: Path, report: Report) -> None:
    """Wall <= 2 h and peak <= 16 GiB: bench/peak_memory.py's record of the run, else the
    stages' span in run_state.json (and no peak)."""
    record = run_dir / "peak_memory.json"
    if record.is_file():
        found = json.loads(record.read_text())
        wall, peak, where = found["wall_s"], found["peak_gib"], f"{record.name}"
    else:
        stages = json.loads((run_dir / "run_state.json").read_text())["stages"].values()
        started = [s["started"] for s in stages if "started" in s]
        finished = [s["finished"] for s in stages if "finished" in s]
        wall, peak, where = (max(finished) - min(started)) if finished else None, None, "run_state.json"
    if wall is None:
        report.verdict("wall <= 2 h: no stage finished", False)
    else:
        short = "" if wall <= SMOLLM2_WALL_S else f"; over by {(wall - SMOLLM2_WALL_S) / 60:.0f} min"
        report.verdict(f"wall <= 2 h: {wall / 60:.1f} min ({where}){short}", wall <= SMOLLM2_WALL_S)
    if peak is None:
        report.verdict(
            f"peak <= {SMOLLM2_PEAK_GIB:g} GiB: not measured (no {record.name}: run under "
            "bench/peak_memory.py --record)",
            False,
        )
    else:
        short = "" if peak <= SMOLLM2_PEAK_GIB else f"; over by {peak - SMOLLM2_PEAK_GIB:.2f} GiB"
        report.verdict(f"peak <= {SMOLLM2_PEAK_GIB:g} GiB: {peak:.2f} GiB{short}", peak <= SMOLLM2_PEAK_GIB)


def judge_smollm2(
    run_dir: Path, rows: list[dict], comparisons: list[dict], stage: str, mixed_dir: Path, report: Report
) -> None:
    """pipelines/smollm2.yaml's targets (issue 59)."""
    report.section("experts above SFT by > 2 SE", [(ok, text) for ok, text, _ in experts_vs_sft(comparisons)], need=6)
    tokens, scores = expert_ladders(rows, comparisons)
    report.section("experts' mean tokens low < high < max in every domain", tokens)
    report.section("experts' score low < high < max, each step > 1 SE", scores, need=2)
    captured_headroom(rows, comparisons, report)
    student_vs_mixed(run_dir, rows, stage, mixed_dir, report)
    wall_and_peak(run_dir, report)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--k", type=float, default=2.0, help="standard errors a step must clear (recipe 2, quickstart 1)"
    )
    parser.add_argument(
        "--targets",
        choices=("recipe", "smollm2"),
        help="whose targets: recipe.yaml's and the quickstart's, or smollm2.yaml's (default: by the run's name)",
    )
    parser.add_argument("--mixed", type=Path, help="smollm2: the mixed RL run's folder (default RUN_DIR/bench-mopd)")
    args = parser.parse_args(argv)
    path = args.run_dir / "eval.json"
    if not path.is_file():
        print(f"{path}: no eval.json (has the run's eval stage finished?)", file=sys.stderr)
        return 2
    found = json.loads(path.read_text())
    rows = found["rows"]
    stage = found.get("stage", "eval")
    try:
        comparisons = rescored(args.run_dir, rows, stage)
    except FileNotFoundError as exc:
        print(f"{args.run_dir}: a saved eval sample file is missing: {exc.filename}", file=sys.stderr)
        return 2
    saved = {(c["kind"], c["a"], c["b"]): c for c in found["comparisons"]}
    for c in comparisons:  # the same samples, the same arithmetic: they must agree
        old = saved.get((c["kind"], c["a"], c["b"]))
        if old is not None and (abs(old["diff"] - c["diff"]) > 1e-9 or old["n"] != c["n"]):
            print(
                f"rescored {c['kind']} {c['a']} differs from eval.json: {c['diff']} vs {old['diff']}", file=sys.stderr
            )
            return 2
    print(f"{len(comparisons)} paired comparisons from the saved samples ({len(saved)} in eval.json, all equal)")
    report = Report()
    if (args.targets or run_targets(args.run_dir)) == "smollm2":
        mixed = args.mixed or args.run_dir / "bench-mopd"
        judge_smollm2(args.run_dir, rows, comparisons, stage, mixed, report)
    else:
        judge_recipe(rows, comparisons, args.k, report)
    report.total()
    return 0


def run_targets(run_dir: Path) -> str:
    """`smollm2` for a run of pipelines/smollm2.yaml (its resolved config's name), else `recipe`."""
    import yaml

    config = run_dir / "config.resolved.yaml"
    name = (yaml.safe_load(config.read_text()) or {}).get("name", "") if config.is_file() else ""
    return "smollm2" if str(name).startswith("smollm2") else "recipe"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
