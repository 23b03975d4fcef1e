"""What the dashboard shows, read from run folders only (never from a live process):
metrics.jsonl, run_state.json, config.resolved.yaml, eval.json, rollouts/STAGE.jsonl and
scoreboard.jsonl. Every reader tolerates a missing file or key and says what is missing,
and skips a torn last line (a file being written)."""

from __future__ import annotations

import json
from pathlib import Path

DOMAINS = ("general", "coding", "agent")
EFFORTS = ("max", "high", "low")

# The job view's plots: title -> metric keys (a trailing "/" takes every key under it).
PLOTS = {
    "reward": ["reward/mean", "reward_source/", "reward/general-", "reward/coding-", "reward/agent-"],
    "response tokens vs budget": [
        "response_tokens/mean",
        "budget/tokens",
        "response_tokens/max",
        "response_tokens/high",
        "response_tokens/low",
    ],
    "reverse KL (MOPD)": ["mopd/reverse_kl", "mopd/reverse_kl/"],
    "queue depth, staleness, off-policy": ["queue/depth", "staleness/mean", "staleness/max", "offpolicy/token_frac"],
    "logp mismatch": ["logp/mismatch"],
    "throughput (tokens/s)": ["throughput/tokens_per_s"],
    "sync seconds": ["sync/seconds"],
    "loss": ["loss/nll", "loss/policy", "loss/kl"],
}


class _Cache:
    """Parsed files keyed by (path, size, mtime): a poll re-reads only files that changed."""

    def __init__(self):
        self.entries: dict[Path, tuple[tuple, object]] = {}

    def get(self, path: Path, parse):
        try:
            stat = path.stat()
        except OSError:
            return None
        key = (stat.st_size, stat.st_mtime_ns)
        hit = self.entries.get(path)
        if hit is None or hit[0] != key:
            hit = (key, parse(path))
            self.entries[path] = hit
        return hit[1]


_cache = _Cache()


def _jsonl(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line being written
                continue
    return rows


def _metrics(path: Path) -> list[dict]:
    """Metrics rows with `stage` and `job` apart: an expert job's rows say `stage: experts/general-max`."""
    rows = _jsonl(path)
    for r in rows:
        if "job" not in r and "/" in str(r.get("stage", "")):
            r["stage"], r["job"] = r["stage"].split("/", 1)
    return rows


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


def _yaml(path: Path):
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


class Run:
    """One run folder."""

    def __init__(self, path: Path, index: int):
        self.path, self.index = Path(path), index

    def metrics(self) -> list[dict]:
        return _cache.get(self.path / "metrics.jsonl", _metrics) or []

    def state(self) -> dict:
        return _cache.get(self.path / "run_state.json", _json) or {}

    def config(self) -> dict:
        return _cache.get(self.path / "config.resolved.yaml", _yaml) or {}

    def name(self) -> str:
        return self.config().get("name") or self.path.name

    def missing(self, *names: str) -> list[str]:
        return [name for name in names if not (self.path / name).exists()]

    # ------------------------------------------------------------ pipeline view

    def pipeline(self) -> dict:
        rows, state = self.metrics(), self.state()
        stages_cfg = self.config().get("stages") or []
        entries = state.get("stages") or {}
        names = [s["name"] for s in stages_cfg]
        names += [name for name in entries if name not in names]
        types = {s["name"]: s.get("type") for s in stages_cfg}
        latest = _latest_rows(rows)
        stages, experts = [], None
        for name in names:
            entry = entries.get(name, {})
            row = latest.get((name, None), {})
            stages.append(
                {
                    "name": name,
                    "type": types.get(name) or entry.get("type"),
                    "status": entry.get("status", "unknown"),
                    "seconds": _seconds(entry),
                    "step": row.get("step"),
                    "reward": row.get("reward/mean"),
                    "tokens": row.get("response_tokens/mean"),
                    "jobs": _job_counts(entry.get("jobs") or {}),
                }
            )
            if entry.get("jobs") or types.get(name) == "experts":
                experts = {"stage": name, "cells": _grid(name, entry.get("jobs") or {}, latest)}
        return {
            "run": self.index,
            "name": self.name(),
            "path": str(self.path),
            "run_id": state.get("run_id"),
            "stages": stages,
            "experts": experts,
            "missing": self.missing("config.resolved.yaml", "run_state.json", "metrics.jsonl"),
            "rows": len(rows),
        }

    # ------------------------------------------------------------ job view

    def jobs(self) -> list[dict]:
        """(stage, job) pairs that have metrics rows, in the order they first appear."""
        seen: dict[tuple, None] = {}
        for r in self.metrics():
            seen.setdefault((r.get("stage"), r.get("job")), None)
        return [{"stage": s, "job": j} for s, j in seen]

    def series(self, stage: str, job: str | None) -> dict:
        rows = [r for r in self.metrics() if r.get("stage") == stage and r.get("job") == job]
        keys = sorted({k for r in rows for k in r})
        plots = {}
        for title, wanted in PLOTS.items():
            chosen = [k for k in keys if any(k == w or (w.endswith(("/", "-")) and k.startswith(w)) for w in wanted)]
            plots[title] = {
                k: {"x": [r["step"] for r in rows if _number(r.get(k))], "y": [r[k] for r in rows if _number(r.get(k))]}
                for k in chosen
            }
        return {
            "run": self.index,
            "name": self.name(),
            "stage": stage,
            "job": job,
            "steps": len(rows),
            "last_step": rows[-1]["step"] if rows else None,
            "plots": plots,
        }

    # ------------------------------------------------------------ eval view

    def evaluation(self) -> dict:
        data = _cache.get(self.path / "eval.json", _json)
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            return {"run": self.index, "name": self.name(), "missing": ["eval.json"], "checkpoints": [], "cells": []}
        rows = [r for r in data["rows"] if isinstance(r, dict) and "checkpoint" in r]
        order = {"student": 0, "expert": 1, "sft": 2, "rl": 3, "base": 4}
        checkpoints = sorted(
            {(r.get("role", "?"), r["checkpoint"]) for r in rows}, key=lambda c: (order.get(c[0], 3), c[1])
        )
        cells = []
        for domain in DOMAINS:
            for effort in EFFORTS:
                here = [r for r in rows if r.get("domain") == domain and r.get("effort") == effort]
                cells.append(
                    {
                        "domain": domain,
                        "effort": effort,
                        "scores": {
                            r["checkpoint"]: {k: r.get(k) for k in ("score", "mean_tokens", "n", "role")} for r in here
                        },
                    }
                )
        return {
            "run": self.index,
            "name": self.name(),
            "missing": [],
            "checkpoints": [{"role": role, "checkpoint": ckpt} for role, ckpt in checkpoints],
            "cells": cells,
        }

    # ------------------------------------------------------------ reward debugger

    def rollout_stages(self) -> list[str]:
        """Stages (and expert jobs, `experts/general-max`) with saved rollouts, in pipeline order."""
        folder = self.path / "rollouts"
        saved = (
            {
                p.relative_to(folder).with_suffix("").as_posix()
                for p in folder.rglob("*.jsonl")
                if not p.name.endswith(".replaced.jsonl")
            }
            if folder.is_dir()
            else set()
        )
        order = [s["name"] for s in self.config().get("stages") or []]
        rank = {name: i for i, name in enumerate(order)}
        return sorted(saved, key=lambda n: (rank.get(n.split("/")[0], len(order)), n))

    def rollouts(self, stage: str) -> list[dict]:
        return _cache.get(self.path / "rollouts" / f"{stage}.jsonl", _jsonl) or []

    def scoreboard(self) -> dict[tuple, dict]:
        entries = _cache.get(self.path / "scoreboard.jsonl", _jsonl) or []
        return {(e.get("stage"), e.get("sample")): e for e in entries}

    def samples(self, stage: str | None, filters: dict) -> dict:
        stages = self.rollout_stages()
        if not stages:
            return {"run": self.index, "stages": [], "missing": ["rollouts/STAGE.jsonl"], "samples": [], "sources": []}
        stage = stage if stage in stages else stages[-1]
        rows, board = self.rollouts(stage), self.scoreboard()
        sources = sorted({r.get("source") or "?" for r in rows})
        kept = [r for r in rows if _matches(r, board.get((stage, r.get("sample"))), filters)]
        return {
            "run": self.index,
            "stages": stages,
            "stage": stage,
            "missing": [],
            "sources": sources,
            "total": len(rows),
            "matched": len(kept),
            "samples": [_slim(r, board.get((stage, r.get("sample")))) for r in kept[-500:]],
        }

    def sample(self, stage: str, sample_id: str) -> dict | None:
        row = next((r for r in self.rollouts(stage) if r.get("sample") == sample_id), None)
        if row is None:
            return None
        return {"row": row, "scoreboard": self.scoreboard().get((stage, sample_id))}


def _latest_rows(rows: list[dict]) -> dict[tuple, dict]:
    """The last row of each (stage, job), with the newest value of each key it lacks."""
    latest: dict[tuple, dict] = {}
    for r in rows:
        latest.setdefault((r.get("stage"), r.get("job")), {}).update(r)
    return latest


def _grid(stage: str, jobs: dict, latest: dict) -> list[dict]:
    cells = []
    for domain in DOMAINS:
        for effort in EFFORTS:
            name = f"{domain}-{effort}"
            job = jobs.get(name) or {}
            row = latest.get((stage, name), {})
            cells.append(
                {
                    "job": name,
                    "domain": domain,
                    "effort": effort,
                    "status": job.get("status", "missing"),
                    "seconds": _seconds(job),
                    "attempts": job.get("attempts"),
                    "node": job.get("node"),
                    "step": row.get("step"),
                    "reward": row.get("reward/mean"),
                    "tokens": row.get("response_tokens/mean"),
                    "budget": row.get("budget/tokens"),
                }
            )
    return cells


def _job_counts(jobs: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in jobs.values():
        counts[job.get("status", "unknown")] = counts.get(job.get("status", "unknown"), 0) + 1
    return counts


def _seconds(entry: dict) -> float | None:
    if entry.get("seconds") is not None:
        return entry["seconds"]
    if entry.get("status") == "running" and entry.get("started"):
        import time

        return round(time.time() - entry["started"], 1)
    return None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _criteria(entry: dict | None) -> list[str]:
    return [c.get("text", "") for c in (entry or {}).get("rubric") or []]


def _matches(row: dict, entry: dict | None, f: dict) -> bool:
    reward = row.get("reward") if row.get("ok", True) else None
    if f.get("step") is not None and row.get("step") != f["step"]:
        return False
    if f.get("source") and (row.get("source") or "?") != f["source"]:
        return False
    if f.get("min") is not None and (reward is None or reward < f["min"]):
        return False
    if f.get("max") is not None and (reward is None or reward > f["max"]):
        return False
    if f.get("criterion"):
        return any(f["criterion"].lower() in text.lower() for text in _criteria(entry))
    return True


def _slim(row: dict, entry: dict | None) -> dict:
    return {
        "sample": row.get("sample"),
        "step": row.get("step"),
        "source": row.get("source"),
        "reward": row.get("reward"),
        "ok": row.get("ok", True),
        "family": row.get("family"),
        "reason": str(row.get("reason", ""))[:160],
        "tokens": row.get("response_tokens"),
        "criteria": len(_criteria(entry)),
    }
