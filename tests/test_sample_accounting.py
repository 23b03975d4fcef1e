"""The independent reader of the sample accounting (tests/sample_accounting.py), which every
test module's runs pass through after the module (conftest.py), on run folders written here:
whole books pass, a sample trained twice or a group split fails, rows with a NaN are read."""

import json
import tempfile
from pathlib import Path

import pytest
from sample_accounting import check_runs_under


@pytest.fixture
def folder():
    """Outside pytest's temporary folders, which the after-module sweep reads: these books are
    broken on purpose."""
    with tempfile.TemporaryDirectory(prefix="books-") as path:
        yield Path(path)


def write_run(folder, trained_per_step, groups_per_step, group_size=2):
    (folder / "rollouts").mkdir(parents=True)
    rows, samples, drawn = [], [], 0
    for step, (trained, groups) in enumerate(zip(trained_per_step, groups_per_step), start=1):
        drawn += groups * group_size
        rows.append(
            {"stage": "rl", "step": step, "samples/drawn": drawn, "samples/trained": trained, "samples/queued": 0}
        )
        samples += [{"step": step, "group": g} for g in range(groups) for _ in range(group_size)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "rollouts" / "rl.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))


def test_whole_books_pass_and_broken_ones_are_named(folder):
    write_run(folder / "whole", trained_per_step=[4, 8], groups_per_step=[2, 2])
    write_run(folder / "twice", trained_per_step=[4, 12], groups_per_step=[2, 2])  # step 2 trained 4 twice
    seen = set()
    failures = check_runs_under(folder, seen)
    assert len(failures) == 1 and "twice" in failures[0] and "step 2" in failures[0], failures
    assert check_runs_under(folder, seen) == []  # each run is checked once


def test_a_split_group_fails(folder):
    write_run(folder / "run", trained_per_step=[4], groups_per_step=[2])
    with (folder / "run" / "rollouts" / "rl.jsonl").open("a") as f:
        f.write(json.dumps({"step": 1, "group": 2}) + "\n")  # a third group with one sample of two
    (failure,) = check_runs_under(folder, set())
    assert "groups of other sizes" in failure


def test_a_run_whose_metrics_hold_a_nan_is_still_checked(folder):
    """json.dumps writes a NaN loss as `NaN`, which orjson refuses: such a run is read, not
    skipped as a file broken on purpose."""
    write_run(folder / "run", trained_per_step=[4, 12], groups_per_step=[2, 2])
    rows = (folder / "run" / "metrics.jsonl").read_text().splitlines()
    rows[0] = json.dumps(dict(json.loads(rows[0]), **{"loss": float("nan")}))
    (folder / "run" / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    (failure,) = check_runs_under(folder, set())
    assert "step 2" in failure
