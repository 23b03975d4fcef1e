"""Expected wall time of a pipeline, from shortened runs of it: per-step seconds of each
stage (each expert job: per domain) and the fixed cost around the steps (start-up, data,
checkpoints), scaled to the full pipeline's steps and eval size.

    posttrain run pipelines/smollm2.yaml --run-dir runs/short -o stages[0].steps=3 ...
    .venv/bin/python bench/expected_time.py pipelines/smollm2.yaml runs/short [runs/short2 ...]

A step's seconds are the mean of `time/step_s` after the first step (the first is shown
apart: it warms caches), or the first step's when only one was measured. Fixed seconds
come from a run where the stage (job) finished: its wall time less its steps. Expert
jobs of an effort no run had take the seconds of their domain's first measured job (an
upper bound when that one had the largest budget). A stage without steps (synthesis)
counts its measured time as it is: shorten it in the short run only if it is shortened in
the full one too. Eval scales with cells x tasks per cell.
Several run folders: the first that measured a stage (job) is used. Whatever no run
measured is listed and left out of the total.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


class Measured:
    def __init__(self, runs: list[Path]):
        from posttrain.config.files import load_pipeline

        self.steps: dict[str, list[float]] = {}
        self.fixed: dict[str, float] = {}
        self.eval_per_task: float | None = None
        self.whole: dict[str, float] = {}
        for run in runs:
            config = load_pipeline(run / "config.resolved.yaml")
            state = json.loads((run / "run_state.json").read_text())["stages"]
            rows: dict[str, list[float]] = {}
            for line in (run / "metrics.jsonl").read_text().splitlines():
                row = json.loads(line)
                if "time/step_s" in row:
                    rows.setdefault(row["stage"], []).append(row["time/step_s"])
            units = {}
            for stage in config.stages:
                entry = state.get(stage.name, {})
                if stage.type == "experts":
                    for name, job in entry.get("jobs", {}).items():  # each job, and its domain's first
                        units[f"{stage.name}/{name}"] = (f"{stage.name}/{name}", job)
                        units.setdefault(f"{stage.name}/{name.split('-')[0]}", (f"{stage.name}/{name}", job))
                elif not hasattr(stage, "steps") and stage.type != "eval":
                    if entry.get("status") == "done":  # no steps (synthesis): its time as measured
                        self.whole.setdefault(stage.name, entry["seconds"])
                elif stage.type == "eval" and entry.get("status") == "done" and self.eval_per_task is None:
                    self.eval_per_task = entry["seconds"] / (eval_cells(stage, config) * stage.tasks_per_cell)
                else:
                    units[stage.name] = (stage.name, entry)
            for unit, (name, entry) in units.items():
                if name in rows and unit not in self.steps:
                    self.steps[unit] = rows[name]
                    if entry.get("status") == "done":
                        self.fixed[unit] = entry["seconds"] - sum(rows[name])

    def seconds(self, unit: str, steps: int) -> tuple[str, float | None]:
        if unit not in self.steps:
            return "not measured", None
        measured = self.steps[unit]
        step = sum(measured[1:]) / len(measured[1:]) if len(measured) > 1 else measured[0]
        fixed = self.fixed.get(unit, 0.0)
        note = (
            f"first {measured[0]:.0f}s, then {step:.0f}s/step, fixed {fixed:.0f}s"
            if unit in self.fixed
            else f"{len(measured)} step(s) of {step:.0f}s; fixed cost not measured"
        )
        return note, fixed + measured[0] + (steps - 1) * step


def eval_cells(stage, config) -> int:
    experts = next(s for s in config.stages if s.type == "experts")
    cells = 0
    for ref in stage.checkpoints:
        kind = "model" if ref == "model" else config.stage(ref.split("/")[0]).type
        cells += 1 if kind == "experts" and "/" in ref else len(experts.cells())
    return cells


def main(pipeline: str, *run_dirs: str) -> None:
    from posttrain.config.files import load_pipeline

    full = load_pipeline(pipeline)
    measured = Measured([Path(r) for r in run_dirs])
    total, missing = 0.0, []
    for stage in full.stages:
        if stage.type == "experts":
            units = [
                (f"{stage.name}/{d}-{e}", f"{stage.name}/{d}", stage.efforts[e].steps or stage.steps)
                for d, e in stage.cells()
            ]
        elif not hasattr(stage, "steps") and stage.type != "eval":
            seconds = measured.whole.get(stage.name)
            if seconds is None:
                missing.append(stage.name)
                print(f"{stage.name:<24} not measured")
                continue
            total += seconds
            print(f"{stage.name:<24}{seconds / 3600:6.2f} h  (as measured: the shortened run had its full size)")
            continue
        elif stage.type == "eval":
            cells = eval_cells(stage, full)
            if measured.eval_per_task is None:
                missing.append(stage.name)
                print(f"{stage.name:<24} not measured")
                continue
            seconds = measured.eval_per_task * cells * stage.tasks_per_cell
            total += seconds
            print(
                f"{stage.name:<24}{seconds / 3600:6.2f} h  ({measured.eval_per_task:.1f}s per task, "
                f"{cells} cells x {stage.tasks_per_cell} tasks)"
            )
            continue
        else:
            units = [(stage.name, stage.name, stage.steps)]
        for label, unit, steps in units:
            note, seconds = measured.seconds(label if label in measured.steps else unit, steps)
            if seconds is None:
                missing.append(label)
            else:
                total += seconds
            shown = f"{seconds / 3600:6.2f} h" if seconds is not None else "     - "
            print(f"{label:<24}{shown}  ({steps} steps; {note})")
    print(f"{'total':<24}{total / 3600:6.2f} h" + (f"  without {', '.join(missing)}" if missing else ""))


if __name__ == "__main__":
    main(*sys.argv[1:])
