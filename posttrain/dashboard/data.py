"""What the dashboard shows, read from run folders only (never from a live process):
metrics.jsonl, run_state.json, config.resolved.yaml, eval.json, rollouts/STAGE.jsonl and
scoreboard.jsonl. The JSON-lines files are read incrementally (series.py, samples.py); the
small JSON and YAML files again when they change. Every reader tolerates a missing file or
key and says what is missing."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import orjson

from posttrain.dashboard import samples as sx
from posttrain.dashboard.health import job_health, thresholds
from posttrain.dashboard.series import MetricsStore, plot_groups
from posttrain.records.checkpoints import checkpoint_disk, human_bytes

DOMAINS = ("general", "coding", "agent")
EFFORTS = ("max", "high", "low")
ROLES = {"sft": "SFT", "expert": "experts (each on its own cell)", "rl": "RL", "student": "student", "base": "base"}


class _Cache:
    """Small files parsed again only when their (size, mtime) changed."""

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


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


def _yaml(path: Path):
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _finite(value):
    """A value the page can take: numbers that are not finite become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Run:
    """One run folder."""

    def __init__(self, path: Path, index: int):
        self.path, self.index = Path(path), index
        self.files = _Cache()
        self.store = MetricsStore(self.path / "metrics.jsonl")
        self.indexes: dict[str, sx.SampleIndex] = {}
        self.board = sx.ScoreboardIndex(self.path / "scoreboard.jsonl")
        self.health_cache: dict = {}
        self.series_cache: dict = {}
        self._disk: tuple[float, dict] | None = None

    def metrics(self) -> MetricsStore:
        self.store.refresh()
        return self.store

    def state(self) -> dict:
        return self.files.get(self.path / "run_state.json", _json) or {}

    def config(self) -> dict:
        return self.files.get(self.path / "config.resolved.yaml", _yaml) or {}

    def name(self) -> str:
        return self.config().get("name") or self.path.name

    def missing(self, *names: str) -> list[str]:
        return [name for name in names if not (self.path / name).exists()]

    # ------------------------------------------------------------ pipeline view

    def pipeline(self) -> dict:
        store, state = self.metrics(), self.state()
        stages_cfg = self.config().get("stages") or []
        entries = state.get("stages") or {}
        names = [s["name"] for s in stages_cfg]
        names += [name for name in entries if name not in names]
        types = {s["name"]: s.get("type") for s in stages_cfg}
        flagged = self.flag_counts()
        stages, experts = [], None
        for name in names:
            entry = entries.get(name, {})
            row = self._latest(name, None)
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
                    "flags": sum(n for (stage, _), n in flagged.items() if stage == name),
                }
            )
            if entry.get("jobs") or types.get(name) == "experts":
                experts = {"stage": name, "cells": self._grid(name, entry.get("jobs") or {})}
        return {
            "run": self.index,
            "name": self.name(),
            "path": str(self.path),
            "run_id": state.get("run_id"),
            "stages": stages,
            "experts": experts,
            "missing": self.missing("config.resolved.yaml", "run_state.json", "metrics.jsonl"),
            "rows": store.rows,
            "disk": self.disk(),
        }

    def disk(self) -> dict:
        """Disk the run's checkpoints take (in all and per stage), measured at most every 10 s."""
        now = time.monotonic()
        if self._disk is None or now - self._disk[0] > 10:
            disk = checkpoint_disk(self.path)
            stages = ", ".join(
                f"{name} {human_bytes(s['bytes'])} ({s['checkpoints']})" for name, s in disk["stages"].items()
            )
            disk["text"] = human_bytes(disk["bytes"]) + (f" ({stages})" if stages else "")
            self._disk = (now, disk)
        return self._disk[1]

    def _latest(self, stage: str, job: str | None) -> dict:
        series = self.store.jobs.get((stage, job))
        return {k: _finite(v) for k, v in series.latest.items()} if series else {}

    def _grid(self, stage: str, jobs: dict) -> list[dict]:
        cells = []
        for domain in DOMAINS:
            for effort in EFFORTS:
                name = f"{domain}-{effort}"
                job = jobs.get(name) or {}
                row = self._latest(stage, name)
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

    # ------------------------------------------------------------ job view

    def jobs(self) -> list[dict]:
        """(stage, job) pairs that have metrics rows, in the order they first appear."""
        return [{"stage": s, "job": j} for s, j in self.metrics().jobs]

    def series(self, stage: str, job: str | None) -> dict:
        """Every key the job logged, in plots (curated first, then by prefix), downsampled."""
        found = self.metrics().jobs.get((stage, job))
        plots = plot_groups(found.keys()) if found else {}
        return {
            "run": self.index,
            "name": self.name(),
            "stage": stage,
            "job": job,
            "steps": len(found) if found else 0,
            "last_step": _finite(found.latest.get("step")) if found else None,
            "plots": {title: {k: found.xy(k) for k in keys} for title, keys in plots.items()},
        }

    def series_json(self, stage: str, job: str | None) -> bytes:
        """`series` as JSON, made again only when the job has new rows (a poll of a finished
        job, or of one that has not stepped since, costs nothing)."""
        found = self.metrics().jobs.get((stage, job))
        key = (self.store.generation, len(found) if found else 0)
        cached = self.series_cache.pop((stage, job), None)
        if cached is None or cached[0] != key:
            cached = (key, orjson.dumps(self.series(stage, job), option=orjson.OPT_SERIALIZE_NUMPY))
        self.series_cache[(stage, job)] = cached  # the newest last: the oldest of 16 jobs goes first
        while len(self.series_cache) > 16:
            self.series_cache.pop(next(iter(self.series_cache)))
        return cached[1]

    # ------------------------------------------------------------ health view

    def health(self) -> dict:
        config, store = self.config(), self.metrics()
        limits, problem = thresholds(config)
        saved = set(self.rollout_stages())
        jobs = []
        for (stage, job), series in store.jobs.items():
            key = f"{stage}/{job}" if job else stage
            rollouts = key if key in saved else None
            jobs.append(job_health(self.health_cache, (stage, job), series, config, limits, rollouts))
        return {
            "run": self.index,
            "name": self.name(),
            "missing": self.missing("metrics.jsonl"),
            "config_problem": problem,
            "jobs": jobs,
        }

    def flag_counts(self) -> dict[tuple, int]:
        """Checks that fired, per (stage, job), for the pipeline view."""
        return {(j["stage"], j["job"]): sum(c["count"] > 0 for c in j["checks"]) for j in self.health()["jobs"]}

    # ------------------------------------------------------------ eval view

    def evaluation(self) -> dict:
        data = self.files.get(self.path / "eval.json", _json)
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            return {"run": self.index, "name": self.name(), "missing": ["eval.json"], "grids": []}
        rows = [r for r in data["rows"] if isinstance(r, dict) and "checkpoint" in r]
        return {"run": self.index, "name": self.name(), "missing": [], "grids": eval_grids(rows)}

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

    def sample_index(self, stage: str) -> sx.SampleIndex:
        if stage not in self.indexes:
            self.indexes[stage] = sx.SampleIndex(self.path / "rollouts" / f"{stage}.jsonl")
        self.indexes[stage].refresh()
        return self.indexes[stage]

    def samples(self, stage: str | None, filters: dict, page: int = 0) -> dict:
        stages = self.rollout_stages()
        if not stages:
            return {"run": self.index, "stages": [], "missing": ["rollouts/STAGE.jsonl"], "samples": [], "sources": []}
        stage = stage if stage in stages else stages[-1]
        index = self.sample_index(stage)
        self.board.refresh()
        if filters.get("flag"):
            filters = {**filters, "flag_steps": self.flag_steps(stage, filters["flag"])}
        matched = sx.select(index, self.board, stage, filters)
        rows = sx.read_page(index, sx.page_of(matched, page))
        counts = self.board.criteria_counts(stage, [sx.sample_key(r.get("sample")) for r in rows])
        return {
            "run": self.index,
            "stages": stages,
            "stage": stage,
            "missing": [],
            "sources": sorted(index.sources.names),
            "total": len(index),
            "matched": len(matched),
            "page": page,
            "pages": max(1, -(-len(matched) // sx.PAGE)),
            "steps": filters.get("flag_steps") or filters.get("steps") or [],
            "samples": [sx.slim(r, counts.get(sx.sample_key(r.get("sample")), 0)) for r in rows],
        }

    def flag_steps(self, rollouts_stage: str, flag: str) -> list[tuple[int, int]]:
        """The steps where a health check fired in the job that saved these rollouts."""
        stage, _, job = rollouts_stage.partition("/")
        for entry in self.health()["jobs"]:
            if (entry["stage"], entry["job"] or "") == (stage, job):
                return next((c["steps"] for c in entry["checks"] if c["name"] == flag), [])
        return []

    def sample(self, stage: str, sample_id: str) -> dict | None:
        if stage not in self.rollout_stages():
            return None
        row = self.sample_index(stage).find(sample_id)
        if row is None:
            return None
        self.board.refresh()
        return sx.plain({"row": row, "scoreboard": self.board.entry(stage, sample_id)})


def eval_grids(rows: list[dict]) -> list[dict]:
    """The domain x effort grids of eval.json: one per checkpoint role (checkpoints scored on a
    single cell, the experts, share one grid; any other checkpoint has its own), then each
    student minus the teacher of every cell."""
    order = list(ROLES)
    by_ckpt: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by_ckpt.setdefault((str(r.get("role", "?")), str(r["checkpoint"])), []).append(r)
    grids: dict[str, dict] = {}
    for (role, ckpt), mine in sorted(by_ckpt.items(), key=lambda kv: (_rank(order, kv[0][0]), kv[0][1])):
        single = len({(r.get("domain"), r.get("effort")) for r in mine}) == 1
        key = f"{role}:*" if single else f"{role}:{ckpt}"
        title = ROLES.get(role, role) if single else f"{ROLES.get(role, role)}: {ckpt}"
        grid = grids.setdefault(key, {"title": title, "role": role, "kind": "score", "cells": {}})
        for r in mine:
            grid["cells"][(r.get("domain"), r.get("effort"))] = _eval_cell(r)
    out = [dict(g, cells=_cells(g["cells"])) for g in grids.values()]
    teacher = next((g for g in grids.values() if g["role"] == "expert"), None)
    for g in list(grids.values()):
        if g["role"] == "student" and teacher is not None:
            out.append(_difference(g, teacher))
    return out


def _rank(order: list[str], role: str) -> int:
    return order.index(role) if role in order else len(order)


def _eval_cell(r: dict) -> dict:
    keys = ("checkpoint", "score", "score_se", "mean_tokens", "n", "unscored", "overlap")
    return {k: _finite(r.get(k)) for k in keys}


def _cells(cells: dict) -> list[dict]:
    return [{"domain": d, "effort": e, **(cells.get((d, e)) or {})} for d in DOMAINS for e in EFFORTS]


def _difference(student: dict, teacher: dict) -> dict:
    cells = {}
    for cell, s in student["cells"].items():
        t = teacher["cells"].get(cell)
        if t is None or s.get("score") is None or t.get("score") is None:
            continue
        ses = [s.get("score_se"), t.get("score_se")]
        cells[cell] = {
            "diff": s["score"] - t["score"],
            "diff_se": math.hypot(*ses) if None not in ses else None,
            "student": s["score"],
            "teacher": t["score"],
            "checkpoint": t.get("checkpoint"),
        }
    return {
        "title": f"{student['title']} minus teacher",
        "role": "difference",
        "kind": "difference",
        "cells": _cells(cells),
    }


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
