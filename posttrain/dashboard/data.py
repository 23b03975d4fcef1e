"""What the dashboard shows, read from run folders only (never from a live process):
metrics.jsonl, run_state.json, config.resolved.yaml, eval.json, rollouts/STAGE.jsonl and
scoreboard.jsonl. The JSON-lines files are read incrementally (series.py, samples.py); the
small JSON and YAML files again when they change. Every reader tolerates a missing file or
key and says what is missing."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import orjson

from posttrain.dashboard import samples as sx
from posttrain.dashboard.eval_view import DOMAINS, EFFORTS, comparison_table, eval_grids
from posttrain.dashboard.health import job_health, thresholds
from posttrain.dashboard.rows import comparison_row, eval_row, finite
from posttrain.dashboard.series import MetricsStore, layout, plot_groups
from posttrain.dashboard.tail import BadRow, BadRows, read_raw
from posttrain.records.checkpoints import checkpoint_disk, human_bytes
from posttrain.records.startup import PREFIX as STARTUP

RL_TYPES = ("rl", "mopd", "experts")  # stages the reward debugger opens on first (not eval cells)
SAMPLE_LIMIT = 256 << 10  # bytes: a larger sample is sent cut, with a link to the whole
CUT_CHARS = 20_000  # characters of each long text a cut sample keeps
K = TypeVar("K")  # what a row's check keeps


class _Cache:
    """Small files parsed again only when their (size, mtime) changed. `get` gives (the
    parsed value, None), (None, None) for a missing file, or (None, why) for one that
    cannot be read or parsed: the parser's own message, on one line."""

    def __init__(self):
        self.entries: dict[Path, tuple[tuple, object, str | None]] = {}

    def get(self, path: Path, parse) -> tuple[object, str | None]:
        try:
            stat = path.stat()
        except OSError:
            return None, None
        key = (stat.st_size, stat.st_mtime_ns)
        hit = self.entries.get(path)
        if hit is None or hit[0] != key:
            try:
                hit = (key, parse(path), None)
            except Exception as exc:  # noqa: BLE001 - any parser's error is shown, never raised
                hit = (key, None, " ".join(str(exc).split()) or type(exc).__name__)
            self.entries[path] = hit
        return hit[1], hit[2]


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None


def _yaml(path: Path):
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML ({exc})") from None


def _clean_config(data) -> tuple[dict, list[str]]:
    """The resolved config with what the dashboard reads checked: a mapping, `stages` a list
    of mappings with a name. What is wrong is left out and said."""
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [f"a YAML {type(data).__name__}, not a mapping"]
    problems, stages = [], []
    raw = data.get("stages") or []
    if not isinstance(raw, list):
        problems.append("stages: not a list")
        raw = []
    for i, stage in enumerate(raw):
        if isinstance(stage, dict) and isinstance(stage.get("name"), str):
            stages.append(stage)
        else:
            problems.append(f"stages[{i}]: not a mapping with a name; left out")
    name = data.get("name") if isinstance(data.get("name"), str) else None
    return {**data, "stages": stages, "name": name}, problems


def _clean_state(data) -> tuple[dict, list[str]]:
    """run_state.json with what the dashboard reads checked: stages and their jobs mappings,
    seconds and started numbers."""
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [f"a JSON {type(data).__name__}, not an object"]
    problems = []

    def entry(where: str, value) -> dict | None:
        if not isinstance(value, dict):
            problems.append(f"{where}: not an object; left out")
            return None
        out = dict(value)
        for key in ("seconds", "started"):
            if out.get(key) is not None and (isinstance(out[key], bool) or not isinstance(out[key], (int, float))):
                problems.append(f"{where}.{key}: {out[key]!r} is not a number")
                out[key] = None
        if not isinstance(out.get("status", ""), str):
            problems.append(f"{where}.status: not a string")
            out["status"] = "unknown"
        return out

    stages = {}
    raw = data.get("stages") or {}
    if not isinstance(raw, dict):
        problems.append("stages: not an object")
        raw = {}
    for name, value in raw.items():
        found = entry(f"stages.{name}", value)
        if found is None:
            continue
        jobs = found.get("jobs") or {}
        if not isinstance(jobs, dict):
            problems.append(f"stages.{name}.jobs: not an object")
            jobs = {}
        found["jobs"] = {j: e for j, v in jobs.items() if (e := entry(f"stages.{name}.jobs.{j}", v)) is not None}
        stages[name] = found
    run_id = data.get("run_id") if isinstance(data.get("run_id"), str) else None
    return {**data, "stages": stages, "run_id": run_id}, problems


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
        self.file_problems: dict[str, list[str]] = {}
        self.eval_bad = BadRows("eval.json")

    def metrics(self) -> MetricsStore:
        self.store.refresh()
        return self.store

    def _file(self, name: str, parse, clean) -> dict:
        data, why = self.files.get(self.path / name, parse)
        data, problems = clean(data)
        self.file_problems[name] = [why] if why else problems
        return data

    def state(self) -> dict:
        return self._file("run_state.json", _json, _clean_state)

    def config(self) -> dict:
        return self._file("config.resolved.yaml", _yaml, _clean_config)

    def name(self) -> str:
        return self.config().get("name") or self.path.name

    def missing(self, *names: str) -> list[str]:
        return [name for name in names if not (self.path / name).exists()]

    def problems(self) -> dict:
        """What could not be read, for the note every view shows: files that cannot be parsed
        (with the parser's message), and per file the rows skipped (line and why)."""
        readers = [self.store, self.board, *self.indexes.values()]
        bad = [b.report() for b in [r.bad for r in readers] + [self.eval_bad] if b.report()]
        files = [{"file": name, "why": why} for name, whys in self.file_problems.items() for why in whys]
        return {"files": files, "bad_rows": bad}

    # ------------------------------------------------------------ pipeline view

    def pipeline(self) -> dict:
        store, state = self.metrics(), self.state()
        stages_cfg = self.config().get("stages") or []
        entries = state.get("stages") or {}
        names = [s["name"] for s in stages_cfg]
        names += [name for name in entries if name not in names]
        names += list(dict.fromkeys(s for s, _ in store.jobs if s not in names))  # config and state unreadable
        types = {s["name"]: s.get("type") for s in stages_cfg}
        flagged = self.flagged_steps()
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
                    "startup": self._startup(name),
                    "link": self._link(name, types.get(name) or entry.get("type")),
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
            "problems": self.problems(),
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

    def _link(self, stage: str, kind: str | None) -> dict | None:
        """Where the stage's name leads: its job view (an experts stage: its first job's), the
        eval view for an eval stage, nowhere when it logged nothing."""
        if (stage, None) in self.store.jobs:
            return {"view": "job", "stage": stage, "job": ""}
        job = next((j for s, j in self.store.jobs if s == stage), None)
        if job is not None:
            return {"view": "job", "stage": stage, "job": job}
        if kind == "eval":
            return {"view": "eval"}
        return None

    def _startup(self, stage: str) -> dict[str, float | None]:
        """The stage's start-up by phase (`startup/PHASE_s`, `total` among them), as its
        newest first step logged it (a resume logs its own); an experts stage: its first
        job's, which holds the run's own start."""
        for (name, _), series in self.store.jobs.items():
            if name == stage and f"{STARTUP}total_s" in series.latest:
                return {
                    key.removeprefix(STARTUP).removesuffix("_s"): finite(value)
                    for key, value in series.latest.items()
                    if key.startswith(STARTUP)
                }
        return {}

    def _latest(self, stage: str, job: str | None) -> dict:
        series = self.store.jobs.get((stage, job))
        return {k: finite(v) for k, v in series.latest.items()} if series else {}

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
        zero = found.zero() if found else set()
        plots = {}
        if found:
            for title, p in layout(plot_groups(found.keys()), zero).items():
                plots[title] = {"series": {k: found.xy(k) for k in p["keys"]}, "axes": p["axes"], "units": p["units"]}
        return {
            "run": self.index,
            "name": self.name(),
            "stage": stage,
            "job": job,
            "steps": len(found) if found else 0,
            "last_step": finite(found.latest.get("step")) if found else None,
            "plots": plots,
            "zero": sorted(zero),
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
        return cached[1][:-1] + b',"problems":' + orjson.dumps(self.problems()) + b"}"

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
            "problems": self.problems(),
        }

    def flagged_steps(self) -> dict[tuple, int]:
        """Steps where any check fired, per (stage, job), for the pipeline view."""
        out = {}
        for j in self.health()["jobs"]:
            steps = set()
            for c in j["checks"]:
                for lo, hi in c["steps"]:
                    steps.update(range(lo, hi + 1))
            out[(j["stage"], j["job"])] = len(steps)
        return out

    # ------------------------------------------------------------ eval view

    def evaluation(self) -> dict:
        """The eval heatmaps and the paired comparisons of eval.json; a file that is there but
        cannot be read is named with the parser's message (torn is not missing)."""
        data, why = self.files.get(self.path / "eval.json", _json)
        self.eval_bad.clear()
        out = {"run": self.index, "name": self.name(), "missing": [], "grids": [], "comparisons": []}
        if data is None and why is None and not self._has_eval_stage():
            return {
                **out,
                "note": "this run has no eval stage (eval.json is written by one)",
                "problems": self.problems(),
            }
        if data is None and why is None:
            return {**out, "missing": ["eval.json"], "problems": self.problems()}
        parts = why or _eval_parts(data)
        self.file_problems["eval.json"] = [parts] if isinstance(parts, str) else []
        if not isinstance(parts, str):
            rows, found = parts
            out.update(
                grids=eval_grids(self._valid(rows, eval_row, "rows")),
                comparisons=comparison_table(self._valid(found, comparison_row, "comparisons")),
            )
        return {**out, "problems": self.problems()}

    def _has_eval_stage(self) -> bool:
        """Whether the run's config has an eval stage (true when the config cannot be read:
        then eval.json is only missing)."""
        if not (self.path / "config.resolved.yaml").exists():
            return True
        stages = self.config().get("stages")
        if not isinstance(stages, list) or self.file_problems.get("config.resolved.yaml"):
            return True
        return any(isinstance(s, dict) and s.get("type") == "eval" for s in stages)

    def _valid(self, rows: list, check: Callable[[object], K], where: str) -> list[K]:
        kept = []
        for i, row in enumerate(rows):
            try:
                kept.append(check(row))
            except BadRow as exc:
                self.eval_bad.add(f"{where}[{i}]", str(exc))
        return kept

    # ------------------------------------------------------------ reward debugger

    def rollout_stages(self) -> list[str]:
        """Stages (and expert jobs, `experts/general-max`) with saved rollouts, newest first
        (the reverse of pipeline order)."""
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
        return sorted(saved, key=lambda n: (rank.get(n.split("/")[0], len(order)), n), reverse=True)

    def default_stage(self, stages: list[str]) -> str:
        """The newest stage of an RL-like type (rl, mopd, experts), else the newest."""
        types = {s["name"]: s.get("type") for s in self.config().get("stages") or []}
        return next((s for s in stages if types.get(s.split("/")[0]) in RL_TYPES), stages[0])

    def sample_index(self, stage: str) -> sx.SampleIndex:
        if stage not in self.indexes:
            self.indexes[stage] = sx.SampleIndex(self.path / "rollouts" / f"{stage}.jsonl", f"rollouts/{stage}.jsonl")
        self.indexes[stage].refresh()
        return self.indexes[stage]

    def samples(self, stage: str | None, filters: dict, page: int = 0) -> dict:
        stages = self.rollout_stages()
        if not stages:
            return {
                "run": self.index,
                "stages": [],
                "missing": ["rollouts/STAGE.jsonl"],
                "samples": [],
                "sources": {},
                "verifiers": {},
                "problems": self.problems(),
            }
        stage = stage if stage in stages else self.default_stage(stages)
        index = self.sample_index(stage)
        self.board.refresh()
        if filters.get("flag"):
            filters = {**filters, "flag_steps": self.flag_steps(stage, filters["flag"])}
        matched = sx.select(index, self.board, stage, filters)
        rows = sx.read_page(index, sx.page_of(matched, page))
        criteria = self.board.criteria_counts(stage, [sx.sample_key(r.get("sample")) for r in rows])
        return {
            "run": self.index,
            "stages": stages,
            "stage": stage,
            "missing": [],
            "sources": dict(sorted(index.counts(index.sources, index.source).items())),
            "verifiers": dict(sorted(index.counts(index.verifiers, index.verifier).items())),
            "total": len(index),
            "matched": len(matched),
            "page": page,
            "pages": max(1, -(-len(matched) // sx.PAGE)),
            "steps": filters.get("flag_steps") or filters.get("steps") or [],
            "samples": [sx.slim(r, n) for r, n in zip(rows, criteria)],
            "problems": self.problems(),
        }

    def flag_steps(self, rollouts_stage: str, flag: str) -> list[tuple[int, int]]:
        """The steps where a health check fired in the job that saved these rollouts."""
        stage, _, job = rollouts_stage.partition("/")
        for entry in self.health()["jobs"]:
            if (entry["stage"], entry["job"] or "") == (stage, job):
                return next((c["steps"] for c in entry["checks"] if c["name"] == flag), [])
        return []

    def sample_raw(self, stage: str, sample_id: str) -> bytes | None:
        """The saved line of one sample, whole."""
        if stage not in self.rollout_stages():
            return None
        index = self.sample_index(stage)
        at = index.position(sample_id)
        return None if at is None else read_raw(index.path, index.offset[at])

    def sample(self, stage: str, sample_id: str) -> dict | None:
        """One sample and its scoreboard entry; one larger than SAMPLE_LIMIT bytes comes with
        its long texts cut to CUT_CHARS and `cut`: its size, for the link to the whole."""
        raw = self.sample_raw(stage, sample_id)
        row = sx.parse(raw) if raw else None
        if raw is None or row is None:
            return None
        self.board.refresh()
        entry = self.board.entry(stage, sample_id)
        out = {"row": row, "scoreboard": entry, "cut": None}
        size = len(raw) + (len(orjson.dumps(entry, option=orjson.OPT_SERIALIZE_NUMPY)) if entry else 0)
        if size > SAMPLE_LIMIT:
            out = {"row": _cut(row), "scoreboard": _cut(entry), "cut": {"bytes": len(raw), "chars": CUT_CHARS}}
        return sx.plain(out)


def _eval_parts(data: object) -> tuple[list, list] | str:
    """eval.json's rows and comparisons (one comparison alone is a list of one), or what is
    wrong with the file."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    rows, found = data.get("rows"), data.get("comparisons") or []
    if not isinstance(rows, list):
        return "rows: not a list"
    return rows, found if isinstance(found, list) else [found]


def _cut(value, items: int = 200):
    """Long texts cut to CUT_CHARS (saying how long they were), long lists to `items`."""
    if isinstance(value, str) and len(value) > CUT_CHARS:
        return value[:CUT_CHARS] + f"\n… [cut: {len(value):,} characters in all]"
    if isinstance(value, dict):
        return {k: _cut(v, items) for k, v in value.items()}
    if isinstance(value, list):
        kept = [_cut(v, items) for v in value[:items]]
        return kept + ([f"… [cut: {len(value):,} items in all]"] if len(value) > items else [])
    return value


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
