"""What `posttrain run` prints at the end: each stage (and expert job) with its status,
time, checkpoint and reward trend, and where the eval table is."""

from __future__ import annotations

from pathlib import Path


def print_summary(state: dict, run_dir: Path) -> None:
    from posttrain.records.metrics import read_metrics

    rows = read_metrics(run_dir) if (Path(run_dir) / "metrics.jsonl").exists() else []
    for name, entry in state["stages"].items():
        where = entry.get("checkpoint") or entry.get("output") or ""
        line = f"{name}: {entry['status']} in {entry.get('seconds', 0)}s" + (f" -> {where}" if where else "")
        _print_stage(line, [r for r in rows if r["stage"] == name])
        for job, info in entry.get("jobs", {}).items():
            job_line = f"  {name}/{job}: {info['status']} in {info.get('seconds', 0)}s on {info.get('node', '?')}"
            if info.get("attempts"):
                job_line += f" after {info['attempts']} restarts"
            _print_stage(job_line, [r for r in rows if r["stage"] == f"{name}/{job}"], indent="    ", sources=False)
    print(f"run folder: {run_dir}")


def _print_stage(line: str, stage_rows: list[dict], indent: str = "  ", sources: bool = True) -> None:
    keys = ["reward/mean"] + sorted({k for r in stage_rows for k in r if k.startswith("reward_source/")})
    trend = [trend_line(key, [r[key] for r in stage_rows if key in r]) for key in keys]
    if trend[0]:
        line += f" ({trend[0]})"
    print(line)
    if sources and len([t for t in trend if t]) > 2:  # several reward sources: one line each
        for t in trend[1:]:
            print(f"{indent}{t}")


def trend_line(key: str, values: list[float]) -> str:
    """`KEY: first k steps X, last k steps Y` (k up to 10), or '' with too few values."""
    if len(values) < 2:
        return ""
    k = min(10, len(values) // 2)
    return f"{key}: first {k} steps {sum(values[:k]) / k:.3f}, last {k} steps {sum(values[-k:]) / k:.3f}"
