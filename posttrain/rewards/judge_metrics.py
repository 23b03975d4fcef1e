"""The judge measures the field reports, from a pairwise judge's two calls per pair (the better
response shown as A, then as B): accuracy with the two orders' margins summed, right in both
orders, the two orders agreeing, Cohen's kappa of the 2N verdicts against the known labels,
and length bias (how often the longer response wins when it is the worse one), each with its
standard error, for a group of pairs (`bench/grm_agreement.py` groups by source and kind)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PairVerdict:
    """A judged pair: P(the better wins) with the better shown first and shown second, and
    whether each call picked the better; None where a call could not be read."""

    kind: str
    source: str
    as_first: float | None
    as_second: float | None
    picked_first: bool | None  # the call with the better as A picked A
    picked_second: bool | None  # the call with the better as B picked B
    longer_is_worse: bool


@dataclass(frozen=True)
class Rate:
    value: float
    se: float
    n: int

    def __str__(self) -> str:
        return f"{self.value:.2f} ± {self.se:.2f}"


@dataclass(frozen=True)
class JudgeMeasures:
    pairs: int
    unread: int  # pairs with an unreadable call: count 0.5, a miss and a disagreement
    summed: Rate  # margins of both orders summed: 1 right, 0.5 tie, 0 wrong
    both_right: Rate
    orders_agree: Rate
    kappa: Rate  # over the 2N calls, against the known position of the better response
    length_bias: Rate | None  # share of calls the longer, worse response wins; None: no such pair


def rate(points: list[float]) -> Rate:
    """Mean and its standard error (sample variance over n)."""
    n = len(points)
    mean = sum(points) / n
    var = sum((x - mean) ** 2 for x in points) / max(n - 1, 1)
    return Rate(mean, math.sqrt(var / n), n)


def kappa(labels: list[str], verdicts: list[str]) -> Rate:
    """Cohen's kappa of two label lists over {A, B}, with the usual large-sample standard error
    sqrt(po (1 - po) / (n (1 - pe)^2)). A judge that always says one letter scores 0."""
    n = len(labels)
    po = sum(a == b for a, b in zip(labels, verdicts)) / n
    pe = sum((labels.count(c) / n) * (verdicts.count(c) / n) for c in ("A", "B"))
    if pe >= 1.0:
        return Rate(0.0, 0.0, n)
    return Rate((po - pe) / (1 - pe), math.sqrt(po * (1 - po) / (n * (1 - pe) ** 2)), n)


def _summed(v: PairVerdict) -> float:
    if v.as_first is None or v.as_second is None:
        return 0.5
    win = (v.as_first + v.as_second) / 2
    return 0.5 if abs(win - 0.5) < 1e-9 else float(win > 0.5)


def measure(verdicts: list[PairVerdict]) -> JudgeMeasures:
    """Every measure over `verdicts` (at least one pair)."""
    if not verdicts:
        raise ValueError("no judged pairs to measure")
    labels, said, longer_wins = [], [], []
    for v in verdicts:
        for better_at, picked in (("A", v.picked_first), ("B", v.picked_second)):
            labels.append(better_at)
            other = "B" if better_at == "A" else "A"
            said.append("?" if picked is None else better_at if picked else other)
            if v.longer_is_worse:
                longer_wins.append(float(picked is False))
    return JudgeMeasures(
        pairs=len(verdicts),
        unread=sum(v.picked_first is None or v.picked_second is None for v in verdicts),
        summed=rate([_summed(v) for v in verdicts]),
        both_right=rate([float(bool(v.picked_first) and bool(v.picked_second)) for v in verdicts]),
        orders_agree=rate(
            [
                float(None not in (v.picked_first, v.picked_second) and v.picked_first == v.picked_second)
                for v in verdicts
            ]
        ),
        kappa=kappa(labels, said),
        length_bias=rate(longer_wins) if longer_wins else None,
    )


def grouped(verdicts: list[PairVerdict]) -> dict[tuple[str, str], JudgeMeasures]:
    """Measures per (source, kind), per (source, "all") and ("all", "all")."""
    groups: dict[tuple[str, str], list[PairVerdict]] = {}
    for v in verdicts:
        for key in ((v.source, v.kind), (v.source, "all"), ("all", "all")):
            groups.setdefault(key, []).append(v)
    return {key: measure(vs) for key, vs in groups.items()}


def from_comparison(row: dict, kind: str, source: str, longer_is_worse: bool) -> PairVerdict:
    """A pair's verdict from the better response's comparison row of the GRM's pairwise method
    (`rewards/grm_pairwise.py`: `as_first`, `as_second`, and its two `calls`, the better shown
    first, then second); an unreadable comparison (`win` None) reads as unread calls."""
    if row.get("win") is None or "calls" not in row:
        return PairVerdict(kind, source, None, None, None, None, longer_is_worse)
    first, second = row["calls"]
    return PairVerdict(
        kind,
        source,
        row["as_first"],
        row["as_second"],
        first["pick"] == "A",
        second["pick"] == "B",
        longer_is_worse,
    )
