"""The time-to-accuracy bench's numbers (bench/tta_curves.py) on curves small enough to
compute by hand: smoothing, first crossing times, TRL's levels, the ratio and its spread; and
the entropy bonus set alike on both sides."""

import importlib.util
import math
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("tta_curves", Path(__file__).parent.parent / "bench" / "tta_curves.py")
curves = importlib.util.module_from_spec(spec)
spec.loader.exec_module(curves)


def curve(*pairs, n=1000, seconds_per_step=10):
    return [{"train_s": t, "step": t / seconds_per_step, "accuracy": a, "n": n} for t, a in pairs]


def test_evals_are_due_on_fixed_grids_early_then_every():
    due = lambda last, **early: curves.next_eval(last, 60, **early)  # noqa: E731
    assert [due(t) for t in (0, 59.9, 60, 61, 130)] == [60, 60, 120, 120, 180]
    early = {"early_s": 30, "early_until_s": 120}
    assert [due(t, **early) for t in (0, 31, 62, 95, 119, 121, 185)] == [30, 60, 90, 120, 120, 180, 240]


def test_smoothing_is_a_centred_mean_of_three_with_the_start_as_measured():
    got = [p["accuracy"] for p in curves.smooth(curve((0, 0.1), (120, 0.4), (240, 0.1), (360, 0.7)))]
    assert got == pytest.approx([0.1, 0.2, 0.4, 0.4])  # the start is the starting model's: never averaged ahead


def test_first_time_is_linear_between_the_last_point_below_and_the_first_above():
    c = curve((0, 0.2), (120, 0.3), (240, 0.5), (360, 0.4))
    assert curves.first_time(c, 0.4) == pytest.approx(180.0)  # half way from 0.3 (120 s) to 0.5 (240 s)
    assert curves.first_time(c, 0.5) == pytest.approx(240.0)
    assert curves.first_time(c, 0.2) == 0.0
    assert curves.first_time(c, 0.51) is None
    assert curves.first_time(c, 0.4, key="step") == pytest.approx(18.0)


def test_levels_run_from_trl_start_to_the_lowest_best_of_its_seeds():
    a = curve((0, 0.2), (120, 0.2), (240, 0.8), (360, 0.8))  # smoothed 0.2 0.4 0.6 0.8
    b = curve((0, 0.2), (120, 0.2), (240, 0.5), (360, 0.5))  # smoothed 0.2 0.3 0.4 0.5: every seed reaches 0.5
    assert [x["accuracy"] for x in curves.levels([curves.smooth(a), curves.smooth(b)])] == pytest.approx(
        [0.275, 0.35, 0.425, 0.5]
    )
    assert curves.levels([curve((0, 0.3), (120, 0.2))]) == []  # never above its start: no level


def test_ratio_is_of_mean_times_with_the_spread_over_seed_pairs():
    trl = [curve((0, 0.1), (100, 0.1), (200, 0.4), (300, 0.4)), curve((0, 0.1), (200, 0.1), (400, 0.7), (600, 0.7))]
    ours = [curve((0, 0.1), (50, 0.1), (100, 0.4), (150, 0.4)), curve((0, 0.1), (60, 0.1), (120, 0.7), (180, 0.7))]
    # smoothed: trl 0.1 0.2 0.3 0.4 at 0/100/200/300 s and 0.1 0.3 0.5 0.7 at 0/200/400/600 s; ours the same
    # accuracies at 0/50/100/150 s and 0/60/120/180 s. Levels: from 0.1 to 0.4 (the lower best of TRL's seeds)
    rows = curves.ratios(ours, trl)
    assert [r["accuracy"] for r in rows] == pytest.approx([0.175, 0.25, 0.325, 0.4])
    half = rows[1]  # 0.25: trl 150 and 150 s, ours 75 and 45 s
    assert half["trl"] == pytest.approx([150, 150]) and half["posttrain"] == pytest.approx([75, 45])
    assert half["ratio"] == pytest.approx(0.4) and (half["low"], half["high"]) == pytest.approx((0.3, 0.5))
    top = rows[-1]  # 0.4: trl 300 and 300 s, ours 150 and 90 s
    assert top["trl"] == pytest.approx([300, 300]) and top["posttrain"] == pytest.approx([150, 90])
    assert top["ratio"] == pytest.approx(0.4)
    steps = curves.ratios(ours, trl, key="step")[1]  # 10 s per step on every curve: steps are times / 10
    assert steps["posttrain"] == pytest.approx([7.5, 4.5]) and steps["ratio"] == pytest.approx(0.4)


def test_a_level_posttrain_never_reaches_has_no_ratio_and_is_the_worst():
    trl = [curve((0, 0.1), (100, 0.3), (200, 0.5), (300, 0.5))]
    ours = [curve((0, 0.1), (100, 0.2), (200, 0.3), (300, 0.3))]
    rows = curves.ratios(ours, trl)
    assert rows[-1]["ratio"] == math.inf and rows[-1]["posttrain"] == [None]
    # trl smoothed 0.1 0.3 0.433 0.5: levels 0.2 0.3 0.4 0.5; ours smoothed 0.1 0.2 0.267 0.3
    assert curves.worst(rows) is rows[2]  # the lowest level it never reaches (0.4: its smoothed best is 0.3)


def test_final_gap_adds_binomial_and_between_seed_variance():
    ours = [curve((0, 0.1), (100, 0.5), n=100), curve((0, 0.1), (100, 0.7), n=100)]
    trl = [curve((0, 0.1), (100, 0.4), n=100)]
    gap = curves.final_gap(ours, trl)
    var_ours = ((0.25 / 100 + 0.21 / 100) / 2 + 0.02) / 2  # binomial mean + variance of (0.5, 0.7), over 2 seeds
    var_trl = 0.24 / 100
    assert gap["posttrain"] == pytest.approx(0.6) and gap["difference"] == pytest.approx(0.2)
    assert gap["se"] == pytest.approx(math.sqrt(var_ours + var_trl))


def test_the_gap_over_time_is_taken_between_eval_points_up_to_the_shortest_run():
    ours = [curve((0, 0.1), (50, 0.3), (130, 0.5), n=100), curve((0, 0.1), (70, 0.5), (125, 0.5), n=100)]
    trl = [curve((0, 0.1), (90, 0.4), (121, 0.2), n=100)]
    assert curves.accuracy_at(ours[0], 90) == pytest.approx(0.4) and curves.accuracy_at(ours[0], 131) is None
    rows = curves.gaps_over_time(ours, trl, every_s=60)  # the shortest run ends at 121 s: 60 and 120 s
    assert [r["train_s"] for r in rows] == [60, 120]
    # at 60 s, linear between the points around it on each curve
    at60 = curves.difference([0.3 + 0.2 * 10 / 80, 0.1 + 0.4 * 60 / 70], [0.1 + 0.3 * 60 / 90], 100)
    assert rows[0]["difference"] == pytest.approx(at60["difference"]) and rows[0]["se"] == pytest.approx(at60["se"])
    assert rows[1]["trl"] == pytest.approx(0.4 - 0.2 * 30 / 31) and rows[1]["posttrain"] == pytest.approx(
        (0.3 + 0.2 * 70 / 80 + 0.5) / 2
    )


def test_the_entropy_bonus_is_the_same_setting_on_both_sides():
    """`--entropy-*`: posttrain's algo settings and TRL's GRPOConfig fields, one rule (Skywork-OR1)."""
    from argparse import Namespace

    from bench.tta_sides import entropy_settings, trl_entropy

    none = Namespace(entropy_coef=0.0, entropy_target=None, entropy_coef_max=1.0, entropy_coef_step=0.005)
    assert entropy_settings(none) == {} and trl_entropy(none) == {} and trl_entropy(Namespace()) == {}
    fixed = Namespace(**{**vars(none), "entropy_coef": 0.01})
    assert entropy_settings(fixed) == {"entropy_coef": 0.01, "entropy_target": None}
    assert trl_entropy(fixed) == {"entropy_coef": 0.01}
    adaptive = Namespace(**{**vars(none), "entropy_target": 0.3, "entropy_coef_max": 0.05})
    assert entropy_settings(adaptive) == {
        "entropy_coef": 0.0,
        "entropy_target": 0.3,
        "entropy_coef_max": 0.05,
        "entropy_coef_step": 0.005,
    }
    assert trl_entropy(adaptive) == {
        "entropy_coef": 0.0,
        "use_adaptive_entropy": True,
        "entropy_target": 0.3,
        "entropy_coef_min": 0.0,
        "entropy_coef_max": 0.05,
        "entropy_coef_delta": 0.005,
    }


def test_distinct_training_tasks_share_the_held_out_distribution():
    """`--train-tasks distinct`: one training task per distinct prompt, none held out, and the
    make-up (two-digit sums) that of the held-out part; as generated, repeats of the few
    one-digit sums make them half the training part."""
    from bench.tta_sides import FAMILY, _normal, family_source, split_tasks

    def two_digit(tasks):
        return sum(len(str(abs(int(t.entry["answer"])))) >= 2 for t in tasks) / len(tasks)

    source = family_source(*FAMILY, size=1500)
    generated, held_out = split_tasks(source, 200)
    distinct, held_out_too = split_tasks(source, 200, distinct=True)
    assert [t.task_id for t in held_out] == [t.task_id for t in held_out_too]
    prompts = [_normal(t.messages[-1].content) for t in distinct]
    assert len(prompts) == len(set(prompts)) < len(generated)
    assert not set(prompts) & {_normal(t.messages[-1].content) for t in held_out}
    assert set(prompts) == {_normal(t.messages[-1].content) for t in generated}
    assert abs(two_digit(distinct) - two_digit(held_out)) < 0.1 < two_digit(held_out) - two_digit(generated)
