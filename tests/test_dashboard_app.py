"""The dashboard's JSON endpoints and guards, through Starlette's test client (no browser):
missing files are named, torn lines skipped, bad queries answered 400, the token enforced,
and a non-loopback bind refused without one."""

import json

import pytest
from starlette.testclient import TestClient

from posttrain.dashboard.app import DashboardError, check_bind, create_app


def client(*folders, token=None) -> TestClient:
    return TestClient(create_app([str(f) for f in folders], token))


def test_an_empty_folder_names_what_is_missing(tmp_path):
    c = client(tmp_path)
    pipeline = c.get("/api/pipeline").json()[0]
    assert pipeline["missing"] == ["config.resolved.yaml", "run_state.json", "metrics.jsonl"]
    assert pipeline["stages"] == [] and pipeline["experts"] is None
    assert c.get("/api/eval").json()[0]["missing"] == ["eval.json"]
    assert c.get("/api/samples").json()["missing"] == ["rollouts/STAGE.jsonl"]
    assert c.get("/").status_code == 200 and c.get("/static/plotly.min.js").status_code == 200


def test_a_torn_last_line_is_skipped_and_the_series_follow_the_file(tmp_path):
    rows = [{"stage": "grpo", "step": s, "time": 0.0, "reward/mean": s / 10, "logp/mismatch": 1e-7} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"stage": "grpo", "st')
    c = client(tmp_path)
    series = c.get("/api/job?stage=grpo").json()[0]
    assert series["last_step"] == 2
    assert series["plots"]["reward"] == {"reward/mean": {"x": [1, 2], "y": [0.1, 0.2]}}
    assert series["plots"]["reverse KL (MOPD)"] == {}
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('ep": 3, "time": 0.0, "reward/mean": 0.3}\n')
    assert c.get("/api/job?stage=grpo").json()[0]["plots"]["reward"]["reward/mean"]["y"] == [0.1, 0.2, 0.3]


def test_bad_queries_get_a_clear_400(tmp_path):
    c = client(tmp_path)
    assert c.get("/api/samples?run=3").json() == {"error": "run must be 0..0"}
    assert c.get("/api/samples?min=abc").json() == {"error": "min must be a number, got 'abc'"}
    assert c.get("/api/job").status_code == 400
    assert c.get("/api/sample?stage=grpo&id=1-0").status_code == 404


def test_the_token_is_required_on_every_request(tmp_path):
    c = client(tmp_path, token="s3cret")
    assert c.get("/api/pipeline").status_code == 401
    assert c.get("/static/app.js").status_code == 401
    assert c.get("/api/pipeline", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert c.get("/?token=s3cret").status_code == 200  # sets the cookie the page's requests carry
    assert c.get("/api/pipeline").status_code == 200


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_binds_need_no_token(host):
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.org"])
def test_other_binds_need_a_token(host):
    with pytest.raises(DashboardError, match=f"--host {host} is reachable from other machines: give --token"):
        check_bind(host, None)
    check_bind(host, "t")


def test_a_missing_run_folder_is_refused(tmp_path):
    with pytest.raises(DashboardError, match="no such run folder"):
        create_app([str(tmp_path / "nope")])


RAY_WITH_DASHBOARD = """
from posttrain.config.files import validate_pipeline
from posttrain.runtime.infra import start_ray
config = validate_pipeline({"model": {"name": "tiny"}, "ray": {"dashboard": True, "num_cpus": 1}, "stages": [
    {"name": "s", "type": "sft", "steps": 1, "lr": 1e-3,
     "data": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}]}}]})
start_ray(config, verbose=False)
"""


def test_a_run_prints_the_ray_dashboard_url():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", RAY_WITH_DASHBOARD], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("Ray dashboard"))
    assert line.startswith("Ray dashboard (local): http://127.0.0.1:"), line
