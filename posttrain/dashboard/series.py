"""metrics.jsonl held as columns: per job (a stage, or an expert job) one float array per
key, filled as the file grows (only appended bytes are read), and drawn in plots: the
curated ones first, then every other key grouped by its prefix, each series downsampled on
the server to at most MAX_POINTS points that keep every bucket's minimum and maximum."""

from __future__ import annotations

import math
from array import array
from pathlib import Path

import numpy as np

from posttrain.dashboard.rows import metrics_row, read_rows
from posttrain.dashboard.tail import BadRows, JsonlTail
from posttrain.records.health import CHECKS

MAX_POINTS = 2000
NOT_SERIES = {"stage", "job", "step", "time"}

# Curated plots, first in the job view: title -> keys (a trailing "/" or "-" takes every key
# that starts with it). Every other key is drawn in a plot of its prefix (`agent/*`).
CURATED = {
    "reward": ["reward/mean", "reward_source/", "reward/general-", "reward/coding-", "reward/agent-"],
    "response tokens vs budget": [
        "response_tokens/mean",
        "budget/tokens",
        "response_tokens/max",
        "response_tokens/high",
        "response_tokens/low",
    ],
    "policy entropy": ["policy/entropy"],
    "loss": ["loss/nll", "loss/policy", "loss/kl", "loss/distill_kl"],
    "grad norm": ["grad/norm"],
    "reverse KL (MOPD)": ["mopd/reverse_kl", "mopd/reverse_kl/"],
    "logp mismatch": ["logp/mismatch"],
    "queue depth, staleness, off-policy": ["queue/depth", "staleness/mean", "staleness/max", "offpolicy/token_frac"],
    "time split (s)": [
        "time/generate_s",
        "time/env_s",
        "time/score_s",
        "time/train_s",
        "time/teachers_s",
        "time/other_s",
        "time/step_s",
    ],
    "faults (samples)": [
        "env/errors",
        "env/timeouts",
        "reward/raised",
        "reward/timeouts",
        "judge/unreadable",
        "samples/unscored",
    ],
    "dynamic sampling": ["groups/with_signal", "groups/resampled", "groups/short", "groups/draws"],
    "throughput (tokens/s)": ["throughput/tokens_per_s"],
    "sync seconds": ["sync/seconds"],
    "health flags": ["health/"],
}


# The unit of every metric, from its name: (how the name is matched, the text, the unit);
# the first rule that matches wins. The plots' y axes are titled with these, and series of
# different units never share an axis.
UNITS = (
    ("suffix", "_per_s", "tokens/s"),
    ("suffix", "_frac", "fraction"),
    ("suffix", "_s", "seconds"),
    ("suffix", "/seconds", "seconds"),
    ("prefix", "time/", "seconds"),
    ("suffix", "_gib", "GiB"),
    ("exact", "health/flags", "flagged (count)"),
    ("prefix", "staleness/", "policy versions"),
    ("exact", "policy/version", "policy versions"),
    ("prefix", "queue/", "trajectories"),
    ("prefix", "samples/", "samples"),
    ("exact", "groups/draws", "rollout iterations"),
    ("prefix", "groups/", "groups"),
    ("prefix", "grm/score", "reward"),
    ("exact", "grm/cache_hit", "fraction"),
    ("exact", "grm/orders_agree", "fraction"),
    ("exact", "grm/group_std", "reward"),
    ("prefix", "grm/", "samples"),
    ("prefix", "env/", "samples"),
    ("prefix", "judge/", "samples"),
    ("exact", "reward/raised", "samples"),
    ("exact", "reward/timeouts", "samples"),
    ("contains", "tokens", "tokens"),
    ("prefix", "reward", "reward"),
    ("contains", "kl", "nats"),
    ("exact", "policy/entropy", "nats"),
    ("exact", "logp/mismatch", "nats"),
    ("exact", "loss/nll", "nats"),
    ("prefix", "loss/", "loss"),
    ("prefix", "grad/", "L2 norm"),
    ("prefix", "offpolicy/", "importance weight"),
    ("suffix", "_mean", "count"),
    ("prefix", "engine/", "count"),
    ("prefix", "teacher_pool/", "count"),
    ("prefix", "train/skipped", "count"),
    ("prefix", "code/", "count"),
    ("prefix", "sync/", "count"),
    ("exact", "lr", "learning rate"),
)


def unit_of(key: str) -> str:
    check = CHECKS.get(key.removeprefix("health/")) if key.startswith("health/") else None
    if check is not None:  # the value a check measured, in its metric's unit (`health/flags` is the count)
        return unit_of(check.metric)
    for how, text, unit in UNITS:
        if (
            (how == "exact" and key == text)
            or (how == "prefix" and key.startswith(text))
            or (how == "suffix" and key.endswith(text))
            or (how == "contains" and text in key)
        ):
            return unit
    return "value"


def _float(value) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return math.nan  # strings ("nan" as metrics.jsonl writes a non-finite float), lists, null


class JobSeries:
    """One job's rows as columns: `steps`, and per key a float array (NaN where a row lacks it)."""

    def __init__(self):
        self.steps = array("d")
        self.cols: dict[str, array] = {}
        self.latest: dict = {}  # the newest value of every key, as logged

    def add(self, row: dict, step: float) -> None:
        n = len(self.steps)
        self.steps.append(step)
        for key, value in row.items():
            if key not in NOT_SERIES and key not in self.cols:
                self.cols[key] = array("d", [math.nan]) * n
        for key, col in self.cols.items():
            col.append(_float(row.get(key)))
        self.latest.update({k: v for k, v in row.items() if isinstance(v, (int, float, str)) or v is None})
        self.latest["step"] = step if step != int(step) else int(step)

    def __len__(self) -> int:
        return len(self.steps)

    def keys(self) -> list[str]:
        """Keys with at least one finite value, sorted."""
        return sorted(k for k, col in self.cols.items() if np.isfinite(np.asarray(col)).any())

    def zero(self) -> set[str]:
        """Keys whose every finite value is 0."""
        found = set()
        for k, col in self.cols.items():
            y = np.asarray(col)
            finite = y[np.isfinite(y)]
            if len(finite) and not finite.any():
                found.add(k)
        return found

    def xy(self, key: str, limit: int = MAX_POINTS) -> dict[str, np.ndarray]:
        """The key's finite points (steps as integers where they are), downsampled; numpy
        arrays, which the app serializes with orjson."""
        y = np.array(self.cols[key])
        x = np.array(self.steps)
        keep = np.isfinite(y) & np.isfinite(x)
        x, y = downsample(x[keep], y[keep], limit)
        return {"x": x.astype(np.int64) if np.all(x == np.round(x)) else x, "y": y}


def downsample(x: np.ndarray, y: np.ndarray, limit: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most `limit` points: the series cut into limit/2 - 1 buckets of consecutive points,
    each giving its minimum and its maximum (in step order), plus the first and last points.
    Spikes survive, whatever the length."""
    n = len(y)
    if n <= limit:
        return x, y
    buckets = limit // 2 - 1
    bucket = np.arange(n) * buckets // n
    order = np.lexsort((y, bucket))  # by bucket, then by value within it
    starts = np.searchsorted(bucket[order], np.arange(buckets))
    ends = np.append(starts[1:], n) - 1
    keep = np.unique(np.concatenate([order[starts], order[ends], [0, n - 1]]))
    return x[keep], y[keep]


def plot_groups(keys: list[str]) -> dict[str, list[str]]:
    """Title -> keys: the curated plots that have data, then one plot per prefix of the rest
    (`agent/*`; a key without a prefix is its own plot). Every key lands in exactly one."""
    plots: dict[str, list[str]] = {}
    left = list(keys)
    for title, wanted in CURATED.items():
        chosen = [k for k in left if any(k == w or (w.endswith(("/", "-")) and k.startswith(w)) for w in wanted)]
        if chosen:
            plots[title] = chosen
            left = [k for k in left if k not in chosen]
    for key in left:
        prefix, slash, _ = key.rpartition("/")
        plots.setdefault(f"{prefix}/*" if slash else key, []).append(key)
    return plots


def layout(plots: dict[str, list[str]], zero: set[str]) -> dict[str, dict]:
    """The plots as drawn: the keys that stay at 0 left out (the page names them in one
    line), a plot of one or two units with one y axis per unit (left, then right), and a
    plot of more units cut into one plot per unit, titled `title (unit)`.
    Title -> {"keys": [...], "axes": [unit, ...], "units": {key: unit}}."""
    out: dict[str, dict] = {}
    for title, keys in plots.items():
        moving = [k for k in keys if k not in zero]
        units = {k: unit_of(k) for k in moving}
        axes = list(dict.fromkeys(units.values()))
        if len(axes) <= 2:
            if moving:
                out[title] = {"keys": moving, "axes": axes, "units": units}
            continue
        for unit in axes:
            mine = [k for k in moving if units[k] == unit]
            out[f"{title} ({unit})"] = {"keys": mine, "axes": [unit], "units": {k: unit for k in mine}}
    return out


class MetricsStore:
    """metrics.jsonl of one run folder as JobSeries per (stage, job), read incrementally."""

    def __init__(self, path: Path):
        self.tail = JsonlTail(path)
        self.bad = BadRows(Path(path).name)
        self.jobs: dict[tuple[str, str | None], JobSeries] = {}
        self.rows = 0
        self.generation = 0  # counts resets: what was computed from older rows is stale

    def refresh(self) -> None:
        reset, lines = self.tail.poll()
        if reset:  # replaced (a resume set rows aside): read again from the start
            self.jobs, self.rows = {}, 0
            self.bad.clear()
            self.generation += 1
        read_rows(lines, self.bad, lambda row: (row, *metrics_row(row)), self._take)

    def _take(self, offset: int, kept: tuple) -> None:
        row, stage, job, step = kept
        self.jobs.setdefault((stage, job), JobSeries()).add(row, step)
        self.rows += 1
