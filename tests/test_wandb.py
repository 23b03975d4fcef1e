"""The wandb sink on real wandb (offline): one run per job grouped by pipeline run, the
metrics and the resolved config in its files, no API key written, failures as warnings.
(The same on a real pipeline run: tests/test_dashboard.py.)"""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from wandb_files import history, run_config, run_meta

from posttrain.config import WandbConfig
from posttrain.records.metrics import MetricsLog
from posttrain.records.wandb import WandbSink, numeric, wandb_mode

ROWS = [
    {"stage": "sft", "step": 1, "time": 1.0, "loss": 2.5},
    {"stage": "sft", "step": 2, "time": 2.0, "loss": 2.0},
    {"stage": "experts/general-max", "step": 1, "time": 3.0, "reward/mean": 0.25, "budget/tokens": 64},
    {"stage": "experts/coding-low", "step": 1, "time": 3.1, "reward/mean": -0.5, "budget/tokens": 16},
    {"stage": "experts/general-max", "step": 2, "time": 4.0, "reward/mean": 0.75, "budget/tokens": 64},
    {"stage": "experts", "job": "agent-high", "step": 1, "time": 4.1, "reward/mean": 0.5},  # job apart: same run
    {"stage": "mopd", "step": 1, "time": 5.0, "mopd/reverse_kl": 0.125},
]


def run_files(run_dir):
    return {run_meta(p)["name"]: p for p in (run_dir / "wandb").glob("offline-run-*/run-*.wandb")}


def test_mode_is_offline_unless_the_environment_says_otherwise():
    assert wandb_mode("auto", {}) == "offline"
    assert wandb_mode("auto", {"WANDB_API_KEY": "k"}) == "online"
    assert wandb_mode("auto", {"WANDB_MODE": "disabled", "WANDB_API_KEY": "k"}) == "disabled"
    assert wandb_mode("offline", {"WANDB_API_KEY": "k"}) == "offline"


def test_numeric_keeps_plottable_metrics_only():
    assert numeric({"stage": "a", "job": "b", "step": 3, "time": 1.0, "x": 1, "y": "nan", "z": True, "w": 0.5}) == {
        "x": 1,
        "w": 0.5,
    }


def test_one_offline_run_per_job_holds_its_metrics_and_the_config(tmp_path):
    sink = WandbSink(WandbConfig(mode="offline"), tmp_path, "demo-20261129", {"name": "demo", "seed": 3})
    log = MetricsLog(tmp_path, sink)
    for row in ROWS:
        log.log(row["stage"], row["step"], {k: v for k, v in row.items() if k not in ("stage", "step", "time")})
    log.close()
    files = run_files(tmp_path)
    assert set(files) == {"sft", "experts/general-max", "experts/coding-low", "experts/agent-high", "mopd"}
    for name, path in files.items():
        assert run_meta(path)["group"] == "demo-20261129"
        assert run_config(path)["pipeline"] == {"name": "demo", "seed": 3}
    assert [r["reward/mean"] for r in history(files["experts/general-max"])] == [0.25, 0.75]
    assert [r["budget/tokens"] for r in history(files["experts/coding-low"])] == [16]
    assert run_meta(files["experts/coding-low"])["job_type"] == "experts"
    assert [r["mopd/reverse_kl"] for r in history(files["mopd"])] == [0.125]
    assert [(r["_step"], r["loss"]) for r in history(files["sft"])] == [(1, 2.5), (2, 2.0)]
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == len(ROWS)


# wandb reads the key from its environment and keeps one service process per Python process:
# this run gets a process of its own, so the key reaches neither this test process (which may
# hold a live Ray) nor a later test's wandb.
KEY_RUN = """
import io, sys
from pathlib import Path
from test_wandb import ROWS
from posttrain.config import WandbConfig
from posttrain.records.wandb import WandbSink
stream = io.StringIO()
sink = WandbSink(WandbConfig(), Path(sys.argv[1]), "demo", {"name": "demo"}, stream=stream)
for row in ROWS:
    sink.log(row)
sink.close()
print(stream.getvalue())
"""


def test_the_api_key_is_never_written(tmp_path):
    secret = "posttrain-test-key-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
    path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "WANDB_API_KEY": secret, "WANDB_MODE": "offline", "PYTHONPATH": path}
    run = subprocess.run(
        [sys.executable, "-c", KEY_RUN, str(tmp_path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr
    assert run_files(tmp_path), "no wandb files written"
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) > 5
    for path in written:
        assert secret.encode() not in path.read_bytes(), path
    assert secret not in run.stdout and secret not in run.stderr


def test_a_wandb_failure_is_a_warning_and_metrics_go_on(tmp_path, monkeypatch):
    import wandb

    def broken(**kwargs):
        raise RuntimeError("no wandb today")

    monkeypatch.setattr(wandb, "init", broken)
    stream = io.StringIO()
    log = MetricsLog(tmp_path, WandbSink(WandbConfig(), tmp_path, "demo", {}, stream=stream))
    for step in (1, 2, 3):
        log.log("grpo", step, {"reward/mean": step / 10})
    log.close()
    assert "wandb: RuntimeError: no wandb today; metrics go to metrics.jsonl only" in stream.getvalue()
    assert stream.getvalue().count("wandb:") == 1
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_config_turns_wandb_off(tmp_path):
    from posttrain.config.files import validate_pipeline
    from posttrain.pipeline import wandb_sink

    base = {
        "model": {"name": "tiny"},
        "stages": [
            {
                "name": "s",
                "type": "sft",
                "steps": 1,
                "lr": 1e-3,
                "data": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}]},
            }
        ],
    }
    assert wandb_sink(validate_pipeline({**base, "wandb": {"enabled": False}}, "p.yaml"), tmp_path, "g") is None
    on = wandb_sink(validate_pipeline(base, "p.yaml"), tmp_path, "g")
    on.close()
    with pytest.raises(Exception, match="wandb.mode"):
        validate_pipeline({**base, "wandb": {"mode": "sometimes"}}, "p.yaml")
