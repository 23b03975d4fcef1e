"""bench/recipe_targets.py on crafted run folders whose verdicts are known: each of
smollm2.yaml's targets met when the figures meet it, and missed, by how much, when not.

Scores are 0/1 per task: on a domain's 40 tasks a checkpoint solves the tasks below its
threshold, so every paired difference is known (the expert at low solves 10 more than SFT:
+0.250 ± 0.069, over 2 SE)."""

import importlib.util
import json
from pathlib import Path

import pytest

from posttrain.stages.evaluate import comparisons

spec = importlib.util.spec_from_file_location(
    "recipe_targets", Path(__file__).resolve().parent.parent / "bench" / "recipe_targets.py"
)
recipe_targets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recipe_targets)

DOMAINS = ("general", "coding", "agent")
EFFORTS = ("low", "high", "max")
TASKS = 40
SFT = 5
EXPERT = {"low": 15, "high": 25, "max": 35}
STUDENT = {"low": 14, "high": 24, "max": 33}  # headroom 0.9, 0.95, 0.93: mean 0.93
TOKENS = {"low": 10.0, "high": 20.0, "max": 30.0}


def write_cell(folder: Path, checkpoint: str, cell: str, solved: int) -> dict[str, float]:
    path = folder / "rollouts" / "eval" / checkpoint / f"{cell}.jsonl"
    if "/" in checkpoint:  # an expert job: the eval job's folder is named after the cell too
        path = folder / "rollouts" / "eval" / checkpoint / cell / f"{cell}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    values = {f"t{i}": float(i < solved) for i in range(TASKS)}
    samples = [
        {"task_id": t, "reward": v, "ok": True, "over_budget": False, "source": "reasoning_gym"}
        for t, v in values.items()
    ]
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    return values


def row(checkpoint: str, role: str, domain: str, effort: str, solved: int, tokens: float) -> dict:
    return {
        "checkpoint": checkpoint,
        "role": role,
        "domain": domain,
        "effort": effort,
        "score": solved / TASKS,
        "score_se": 0.0,
        "mean_tokens": tokens,
        "n": TASKS,
    }


def crafted_run(tmp_path: Path, tokens=TOKENS, student=STUDENT, mixed: int | None = 10, peak=9.0) -> Path:
    """A smollm2 run folder: eval.json, its saved samples, a mixed run and the memory record."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.resolved.yaml").write_text("name: smollm2\n")
    rows, per_task = [], {}
    for domain in DOMAINS:
        for effort in EFFORTS:
            cell = f"{domain}-{effort}"
            for label, role, solved in (
                ("sft", "sft", SFT),
                (f"experts/{cell}", "expert", EXPERT[effort]),
                ("mopd", "student", student[effort]),
            ):
                rows.append(row(label, role, domain, effort, solved, tokens[effort] if role == "expert" else 12.0))
                per_task[(label, domain, effort)] = write_cell(run, label, cell, solved)
    eval_json = {"stage": "eval", "rows": rows, "comparisons": comparisons(rows, per_task)}
    (run / "eval.json").write_text(json.dumps(eval_json))
    if mixed is not None:
        bench = run / "bench-mopd"
        mixed_rows = []
        for domain in DOMAINS:
            for effort in EFFORTS:
                write_cell(bench, "mixed-rl", f"{domain}-{effort}", mixed)
                mixed_rows.append(row("mixed-rl", "mixed-rl", domain, effort, mixed, 12.0))
        bench.joinpath("bench.json").write_text(json.dumps({"rows": mixed_rows, "mixed_rl_steps": 265}))
    (run / "peak_memory.json").write_text(json.dumps({"peak_gib": peak, "wall_s": 5400.0}))
    return run


def verdicts(run: Path, capsys) -> dict[str, str]:
    assert recipe_targets.main([str(run)]) == 0
    out = capsys.readouterr().out
    return {line[5:]: line[:4] for line in out.splitlines() if line[:4] in ("MET ", "MISS")}


def find(found: dict[str, str], start: str) -> tuple[str, str]:
    (key,) = [k for k in found if k.startswith(start)]
    return key, found[key]


def test_every_smollm2_target_met_on_a_run_that_meets_them(tmp_path, capsys):
    found = verdicts(crafted_run(tmp_path), capsys)
    assert len(found) == 7 and set(found.values()) == {"MET "}, found
    assert find(found, "experts above SFT by > 2 SE")[0].startswith("experts above SFT by > 2 SE: 9 of 9 (need 6)")
    key, _ = find(found, "MOPD captured headroom")
    assert "0.93 over 9 cells" in key  # (14-5)/10, (24-5)/20, (33-5)/30 on each domain
    key, _ = find(found, "student above the mixed RL run")
    # per task, the student's minus mixed's averaged over efforts: 4 tasks 1, 10 tasks 2/3, 9 tasks 1/3
    assert f"{(4 + 10 * 2 / 3 + 9 / 3) / 40:+.3f}" in key and "120 (domain, task) units" in key
    assert "265 steps" in key
    assert find(found, "wall <= 2 h")[0].startswith("wall <= 2 h: 90.0 min")


def test_missed_targets_say_by_how_much(tmp_path, capsys):
    tokens = {"low": 10.0, "high": 40.0, "max": 30.0}  # high longer than max in every domain
    flat = {"low": SFT, "high": SFT, "max": SFT}  # the student keeps none of the experts' gain
    found = verdicts(crafted_run(tmp_path, tokens=tokens, student=flat, mixed=SFT, peak=17.5), capsys)
    assert find(found, "experts' mean tokens")[1] == "MISS"
    assert find(found, "experts' mean tokens")[0].endswith("0 of 3 (need 3; missed by 3)")
    key, verdict = find(found, "MOPD captured headroom")
    assert verdict == "MISS" and "0.00 over 9 cells; missed by 0.80" in key
    key, verdict = find(found, "student above the mixed RL run")
    assert verdict == "MISS" and "+0.000 ± 0.000" in key
    key, verdict = find(found, "peak <= 16 GiB")
    assert verdict == "MISS" and key.endswith("17.50 GiB; over by 1.50 GiB")
    assert find(found, "experts above SFT")[1] == "MET "  # the experts themselves are unchanged


def test_a_missing_mixed_run_is_a_miss_that_names_the_command(tmp_path, capsys):
    found = verdicts(crafted_run(tmp_path, mixed=None), capsys)
    key, verdict = find(found, "student above the mixed RL run")
    assert verdict == "MISS" and "bench/mopd.py" in key and "--steps recipe" in key


def test_a_sample_file_that_disagrees_with_eval_json_is_refused(tmp_path, capsys):
    run = crafted_run(tmp_path)
    write_cell(run, "mopd", "coding-max", 0)  # the saved samples no longer give eval.json's differences
    assert recipe_targets.main([str(run)]) == 2
    assert "differs from eval.json" in capsys.readouterr().err


@pytest.mark.parametrize("name, expected", [("smollm2", "smollm2"), ("smollm2-short", "smollm2"), ("recipe", "recipe")])
def test_the_targets_follow_the_run_s_pipeline_name(tmp_path, name, expected):
    (tmp_path / "config.resolved.yaml").write_text(f"name: {name}\n")
    assert recipe_targets.run_targets(tmp_path) == expected
