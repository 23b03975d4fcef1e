"""The eval's numbers, against values computed by hand: a cell's score, the standard error of
a mean, the paired difference of two checkpoints on the same tasks with its standard error
(the SE of the per-task differences, not of two independent means), and the comparisons the
recipe is judged by (max - low, expert - SFT, student - teacher)."""

import math

import pytest

from posttrain.stages.evaluate import by_source, cell_score, comparisons, paired, standard_error
from posttrain.types import RewardResult


def test_a_cell_score_is_the_reward_in_0_1_and_0_over_budget():
    assert cell_score(None, RewardResult(1.0, "", "math")) == 1.0
    assert cell_score(None, RewardResult(-1.0, "", "math")) == 0.0  # clipped to [0, 1]
    assert cell_score(None, RewardResult(0.5, "", "grm")) == 0.75  # the GRM's [-1, 1] mapped to [0, 1]
    assert cell_score(None, RewardResult(1.0, "", "math", over_budget=True)) == 0.0


def test_standard_error_of_a_mean_by_hand():
    # [1, 0, 1, 1]: mean 0.75; deviations 0.25, -0.75, 0.25, 0.25; sample variance 0.75 / 3 = 0.25;
    # SD 0.5; SE 0.5 / sqrt(4) = 0.25
    assert standard_error([1, 0, 1, 1]) == pytest.approx(0.25)
    # [2, 4, 9]: mean 5; squares 9, 1, 16 -> variance 26 / 2 = 13; SE sqrt(13 / 3)
    assert standard_error([2, 4, 9]) == pytest.approx(math.sqrt(13 / 3))
    assert standard_error([1.0]) == 0.0 and standard_error([]) == 0.0


def test_the_paired_difference_and_its_se_by_hand():
    a = {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 1.0, "only_a": 1.0}
    b = {"t1": 0.0, "t2": 1.0, "t3": 0.0, "t4": 0.0, "only_b": 0.0}
    diff, se, n = paired(a, b)
    # the four tasks both scored: differences 1, 0, 0, 1; mean 0.5; sample variance 1 / 3;
    # SE sqrt(1/3) / 2 = 0.2887 (two independent means would give sqrt(0.25^2 + 0.25^2) = 0.3536)
    assert n == 4 and diff == pytest.approx(0.5) and se == pytest.approx(math.sqrt(1 / 3) / 2)
    # identical scores on every task: the difference is known exactly, SE 0 however noisy the scores
    assert paired({"x": 1.0, "y": 0.0, "z": 1.0}, {"x": 1.0, "y": 0.0, "z": 1.0}) == (0.0, 0.0, 3)
    assert paired({"x": 1.0}, {"y": 1.0}) == (0.0, 0.0, 0)  # no common task: nothing compared


def test_the_recipes_comparisons_by_hand():
    tasks = ["t1", "t2", "t3", "t4"]
    scores = {  # (checkpoint, domain, effort) -> per-task scores
        ("experts/general-max", "general", "max"): [1, 1, 1, 0],
        ("experts/general-high", "general", "high"): [1, 1, 0, 0],
        ("experts/general-low", "general", "low"): [0, 1, 0, 0],
        ("sft", "general", "max"): [0, 1, 0, 0],
        ("sft", "general", "low"): [0, 0, 0, 0],
        ("mopd", "general", "max"): [1, 1, 0, 0],
        ("mopd", "general", "low"): [0, 1, 0, 0],
    }
    per_task = {k: dict(zip(tasks, v)) for k, v in scores.items()}
    role = {
        "experts/general-max": "expert",
        "experts/general-high": "expert",
        "experts/general-low": "expert",
        "sft": "sft",
        "mopd": "student",
    }
    rows = [{"checkpoint": c, "role": role[c], "domain": d, "effort": e} for (c, d, e) in scores]
    found = {(c["kind"], c["a"], c["b"]): (c["diff"], c["se"], c["n"]) for c in comparisons(rows, per_task)}

    def se(diffs):
        mean = sum(diffs) / len(diffs)
        return math.sqrt(sum((x - mean) ** 2 for x in diffs) / (len(diffs) - 1) / len(diffs))

    expected = {
        # expert max - low: 1,0,1,0 -> 0.5
        ("max_minus_low", "experts/general-max@general-max", "experts/general-low@general-low"): [1, 0, 1, 0],
        # the ladder's two steps, where a high cell was scored: max - high 0,0,1,0; high - low 1,0,0,0
        ("max_minus_high", "experts/general-max@general-max", "experts/general-high@general-high"): [0, 0, 1, 0],
        ("high_minus_low", "experts/general-high@general-high", "experts/general-low@general-low"): [1, 0, 0, 0],
        # student max - low: 1,0,0,0 -> 0.25
        ("max_minus_low", "mopd@general-max", "mopd@general-low"): [1, 0, 0, 0],
        # sft max - low: 0,1,0,0
        ("max_minus_low", "sft@general-max", "sft@general-low"): [0, 1, 0, 0],
        # each expert against SFT on its own cell
        ("expert_minus_sft", "experts/general-max@general-max", "sft@general-max"): [1, 0, 1, 0],
        ("expert_minus_sft", "experts/general-low@general-low", "sft@general-low"): [0, 1, 0, 0],
        # the student against each teacher on the teacher's cell
        ("student_minus_teacher", "mopd@general-max", "experts/general-max@general-max"): [0, 0, -1, 0],
        ("student_minus_teacher", "mopd@general-low", "experts/general-low@general-low"): [0, 0, 0, 0],
    }
    assert set(found) == set(expected)
    for key, diffs in expected.items():
        diff, error, n = found[key]
        assert n == 4 and diff == pytest.approx(sum(diffs) / 4) and error == pytest.approx(se(diffs)), key
    # the student 0.25 under its max teacher, SE 0.25: not beyond 2 SE
    assert found[("student_minus_teacher", "mopd@general-max", "experts/general-max@general-max")][:2] == (
        pytest.approx(-0.25),
        pytest.approx(0.25),
    )


def test_a_cell_score_per_verifier_by_hand():
    # a general cell mixing reasoning tasks and GRM-judged writing: each part its own mean and SE
    found = by_source(["reasoning_gym", "grm", "reasoning_gym", "reasoning_gym"], [1.0, 0.75, 0.0, 1.0])
    assert found["grm"] == {"score": 0.75, "score_se": 0.0, "n": 1}
    # [1, 0, 1]: mean 2/3; sample variance 1/3; SE sqrt(1/3 / 3) = 1/3
    assert found["reasoning_gym"]["score"] == pytest.approx(2 / 3)
    assert found["reasoning_gym"]["score_se"] == pytest.approx(1 / 3) and found["reasoning_gym"]["n"] == 3


def test_the_student_is_compared_with_an_rl_stage_on_every_cell():
    rows = [
        {"checkpoint": "mopd", "role": "student", "domain": "coding", "effort": "low"},
        {"checkpoint": "mixed", "role": "rl", "domain": "coding", "effort": "low"},
    ]
    per_task = {("mopd", "coding", "low"): {"a": 1.0, "b": 1.0}, ("mixed", "coding", "low"): {"a": 0.0, "b": 1.0}}
    (found,) = comparisons(rows, per_task)
    assert found["kind"] == "student_minus_rl" and found["a"] == "mopd@coding-low" and found["b"] == "mixed@coding-low"
    assert (found["diff"], found["n"]) == (0.5, 2)
