"""The numbers of bench/time_to_accuracy.py, from its eval points alone: smoothed curves,
the times at which they first reach an accuracy level, the levels TRL's curves reach, and
the time ratio at each level with its spread over seeds.

A curve is a list of eval points `{"step", "train_s", "accuracy", "n"}` in training-time
order (eval time is not training time). Everything here is a pure function of those lists,
so the report can be made again from the saved JSON (`--report`).
"""

from __future__ import annotations

import math
import statistics

FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of TRL's best gain over the start: the levels the ratio is taken at


def next_eval(last_s: float, every_s: float, early_s: float = 0.0, early_until_s: float = 0.0) -> float:
    """The training time of the next eval after one at `last_s`: every `early_s` seconds up
    to `early_until_s` (none if `early_s` is 0), then every `every_s`, on fixed grids from
    the start. Both sides use the same schedule, so neither gets finer points than the other."""
    if early_s > 0:
        due = (math.floor(last_s / early_s) + 1) * early_s
        if due <= early_until_s:
            return due
    return (math.floor(last_s / every_s) + 1) * every_s


def smooth(points: list[dict], window: int = 3) -> list[dict]:
    """Centred moving average of `window` eval points (fewer at the end): each point keeps
    its time and step, its accuracy is the mean of its neighbourhood's. The first point stays
    as measured: it is the starting model, the same on both sides, and averaging it with the
    next would let a curve reach a level at time 0 on what it learned later."""
    half = window // 2
    out = [dict(points[0])] if points else []
    for i, p in enumerate(points[1:], start=1):
        near = points[max(0, i - half) : i + half + 1]
        out.append({**p, "accuracy": statistics.fmean(q["accuracy"] for q in near)})
    return out


def first_time(points: list[dict], level: float, key: str = "train_s") -> float | None:
    """The first time (or step, with key="step") a curve reaches `level`: linear between the
    last point below and the first at or above it; None if it never does."""
    for i, p in enumerate(points):
        if p["accuracy"] >= level:
            if i == 0:
                return float(p[key])
            a, b = points[i - 1], p
            share = (level - a["accuracy"]) / (b["accuracy"] - a["accuracy"])
            return a[key] + share * (b[key] - a[key])
    return None


def levels(trl_curves: list[list[dict]], fractions=FRACTIONS) -> list[dict]:
    """Accuracy levels every TRL seed's smoothed curve reaches: from their mean start, each
    fraction of the way to the lowest of their best accuracies (the 100 % level is that best)."""
    start = statistics.fmean(c[0]["accuracy"] for c in trl_curves)
    top = min(max(p["accuracy"] for p in c) for c in trl_curves)
    if top <= start:
        return []
    return [{"fraction": f, "accuracy": top - (1 - f) * (top - start)} for f in fractions]


def ratios(ours: list[list[dict]], trl: list[list[dict]], key: str = "train_s") -> list[dict]:
    """Per level: each side's first time on each seed's smoothed curve, the ratio of their
    means, and the spread of the ratio over every (posttrain seed, TRL seed) pair. A level
    one posttrain seed never reaches has no ratio (inf); the first such level is the worst."""
    ours_s, trl_s = [smooth(c) for c in ours], [smooth(c) for c in trl]
    rows = []
    for level in levels(trl_s):
        t_ours = [first_time(c, level["accuracy"], key) for c in ours_s]
        t_trl = [first_time(c, level["accuracy"], key) for c in trl_s]
        pairs = [a / b if a is not None and b else math.inf for a in t_ours for b in t_trl]
        reached = all(t is not None for t in t_ours + t_trl)
        mean_trl = statistics.fmean(t_trl) if reached else 0.0
        ratio = statistics.fmean(t_ours) / mean_trl if reached and mean_trl > 0 else math.inf
        rows.append({**level, "posttrain": t_ours, "trl": t_trl, "ratio": ratio, "low": min(pairs), "high": max(pairs)})
    return rows


def worst(rows: list[dict]) -> dict | None:
    """The level whose ratio is largest: the headline."""
    return max(rows, key=lambda r: r["ratio"]) if rows else None


def difference(ours: list[float], trl: list[float], n: int) -> dict:
    """Mean accuracy of each side over its seeds, their difference and its standard error:
    each seed's binomial variance on `n` eval problems plus the variance between seeds (a
    conservative sum: the spread between seeds already holds some of the binomial noise)."""

    def side(values: list[float]) -> tuple[float, float]:
        binomial = statistics.fmean(p * (1 - p) / n for p in values)
        between = statistics.variance(values) if len(values) > 1 else 0.0
        return statistics.fmean(values), (binomial + between) / len(values)

    (a, var_a), (b, var_b) = side(ours), side(trl)
    se = math.sqrt(var_a + var_b)
    return {"posttrain": a, "trl": b, "difference": a - b, "se": se, "z": (a - b) / se if se else math.inf}


def final_gap(ours: list[list[dict]], trl: list[list[dict]]) -> dict:
    """The last raw eval point of each run (`difference`)."""
    n = ours[0][-1]["n"]
    return difference([c[-1]["accuracy"] for c in ours], [c[-1]["accuracy"] for c in trl], n)


def accuracy_at(points: list[dict], t: float) -> float | None:
    """A curve's raw accuracy at training time `t`: linear between the eval points around
    it; None outside the curve."""
    for a, b in zip(points, points[1:]):
        if a["train_s"] <= t <= b["train_s"]:
            span = b["train_s"] - a["train_s"]
            return (
                a["accuracy"] + (t - a["train_s"]) / span * (b["accuracy"] - a["accuracy"]) if span else b["accuracy"]
            )
    return None


def gaps_over_time(ours: list[list[dict]], trl: list[list[dict]], every_s: float = 60.0) -> list[dict]:
    """The accuracy difference (`difference`) at every `every_s` of training time that every
    run reached: not only the end, which depends on the budget chosen."""
    end = min(c[-1]["train_s"] for c in ours + trl)
    rows, t = [], every_s
    while t <= end:
        at_ours, at_trl = [accuracy_at(c, t) for c in ours], [accuracy_at(c, t) for c in trl]
        rows.append({"train_s": t, **difference(at_ours, at_trl, ours[0][0]["n"])})
        t += every_s
    return rows
