"""The Health view's data: per job, each check of posttrain/records/health.py with its rule
(the run's `health:` thresholds), the steps where it fired and the values it measured. Read
from the `health/...` keys the RL driver logs; for a run that logged none (older runs,
SFT stages) the monitor is run over the job's metrics, feeding only rows new since the last
poll."""

from __future__ import annotations

import math

import numpy as np
from pydantic import ValidationError

from posttrain.config import HealthConfig, PartialRolloutConfig
from posttrain.dashboard.series import JobSeries
from posttrain.records.health import CHECKS, WATCHED, HealthMonitor, enabled, threshold

# model_validate({}): the schemas' defaults (pyright does not read a Field's positional default)
DEFAULT_HEALTH = HealthConfig.model_validate({})
DEFAULT_STALENESS = PartialRolloutConfig.model_validate({}).max_staleness


def thresholds(config: dict) -> tuple[HealthConfig, str | None]:
    """The run's `health:` section, or the defaults (with the problem) when it cannot be read."""
    try:
        return HealthConfig(**(config.get("health") or {})), None
    except (ValidationError, TypeError) as exc:
        return DEFAULT_HEALTH, f"config.resolved.yaml: health: {exc}; the defaults are used"


def max_staleness(config: dict, stage: str) -> int:
    for s in config.get("stages") or []:
        if s.get("name") == stage:
            partial = s.get("partial") or {}
            return int(partial.get("max_staleness", DEFAULT_STALENESS))
    return DEFAULT_STALENESS


def ranges(steps: list[int]) -> list[list[int]]:
    """Sorted steps as runs [first, last]: [1, 2, 3, 7] -> [[1, 3], [7, 7]]."""
    out: list[list[int]] = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def _logged(series: JobSeries) -> dict[str, tuple[list[int], list[float]]]:
    steps = np.array(series.steps)
    fired = {}
    for name in CHECKS:
        col = series.cols.get(f"health/{name}")
        if col is None:
            continue
        at = np.isfinite(np.array(col)) & np.isfinite(steps)
        fired[name] = ([int(s) for s in steps[at]], np.array(col)[at].tolist())
    return fired


def _recomputed(cache: dict, key: tuple, series: JobSeries, limits: HealthConfig, staleness: int):
    """Run the monitor over the rows it has not seen (all of them after a reset)."""
    hit = cache.get(key)
    if hit is None or hit["series"] is not series or hit["limits"] != limits:
        monitor = HealthMonitor(limits, "/".join(filter(None, key)), staleness)
        hit = cache[key] = {"series": series, "limits": limits, "done": 0, "monitor": monitor, "fired": {}}
    cols = {k: series.cols[k] for k in WATCHED if k in series.cols}
    for i in range(hit["done"], len(series)):
        row = {k: col[i] for k, col in cols.items() if math.isfinite(col[i])}
        for flag in hit["monitor"].check(int(series.steps[i]), row):
            steps, values = hit["fired"].setdefault(flag.name, ([], []))
            steps.append(flag.step)
            values.append(flag.value)
    hit["done"] = len(series)
    return hit["fired"]


def job_health(
    cache: dict,
    key: tuple[str, str | None],
    series: JobSeries,
    config: dict,
    limits: HealthConfig,
    rollouts: str | None,
) -> dict:
    """One job's checks: rule, steps fired (as runs), the last value, and whether its metric is logged."""
    stage, job = key
    staleness = max_staleness(config, stage)
    logged = "health/flags" in series.cols
    fired = _logged(series) if logged else _recomputed(cache, key, series, limits, staleness)
    checks = []
    for name, check in CHECKS.items():
        steps, values = fired.get(name, ([], []))
        checks.append(
            {
                "name": name,
                "title": check.title,
                "metric": check.metric,
                "meaning": check.meaning,
                "rule": threshold(name, limits, staleness),
                "enabled": enabled(name, limits, staleness),
                "watched": check.metric in series.cols,
                "count": len(steps),
                "steps": ranges(steps),
                "last_step": steps[-1] if steps else None,
                "last_value": values[-1] if values and math.isfinite(values[-1]) else None,
            }
        )
    return {
        "stage": stage,
        "job": job,
        "rollouts": rollouts,
        "source": "logged" if logged else "recomputed",
        "steps": len(series),
        "checks": checks,
    }
