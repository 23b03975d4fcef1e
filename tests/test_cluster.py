"""`posttrain submit`, `status` and `logs` against a real 3-node Ray cluster started on this
machine (a head and two workers, each with its own ports, CPUs and custom resource, token
auth on with the cluster's own token): a submitted SFT -> experts pipeline whose expert
jobs must land on different nodes. Plus unit tests of the token and command plumbing.
The cluster tests are marked `cluster` (deselect with `-m "not cluster"`)."""

import http.server
import json
import os
import threading
from pathlib import Path

import pytest
import yaml
from ray_cluster import LocalCluster, cli, expert_job_nodes

from posttrain.runtime import cluster as cl

ROOT = Path(__file__).resolve().parents[1]
# A slot (one job's placement group) is 1 engine + 1 trainer rank = 2 CPUs, a whole node
# here: the two expert jobs' slots (parallel: 2) can only be granted on two different nodes.
PIPELINE = {
    "name": "onray",
    "model": {"name": "tiny"},
    "rollout": {"max_model_len": 96, "engines": 1, "num_cpus": 1},
    "trainer": {"workers": 1, "num_cpus": 1},
    "stages": [
        {
            "name": "sft",
            "type": "sft",
            "steps": 2,
            "lr": 1e-3,
            "batch_size": 8,
            "data": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}], "size": 20},
        },
        {
            "name": "experts",
            "type": "experts",
            "steps": 1,
            "lr": 1e-4,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_tokens": 8,
            "parallel": 2,
            "efforts": {"max": {"tokens": 6}},
            "domains": {
                "general": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}], "size": 20, "seed": 3},
                "agent": {"type": "agent", "size": 10, "seed": 5, "families": ["calculator"], "system_prompt": ""},
            },
        },
    ],
}


# ---------------------------------------------------------------- units, no cluster


def test_token_sources_in_order(tmp_path):
    env = {"HOME": str(tmp_path)}  # passed, never written into this process (it may hold a live Ray)
    assert cl.read_token(environ=env) is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("home\n")
    assert cl.read_token(environ=env) == cl.Token("home", "~/.ray/auth_token")
    (tmp_path / "path").write_text("frompath")
    env["RAY_AUTH_TOKEN_PATH"] = str(tmp_path / "path")
    assert cl.read_token(environ=env).value == "frompath"
    env["RAY_AUTH_TOKEN_PATH"] = "~/path"
    assert cl.read_token(environ=env).value == "frompath"
    env["RAY_AUTH_TOKEN"] = "fromenv"
    assert cl.read_token(environ=env).value == "fromenv"
    (tmp_path / "file").write_text(" fromfile \n")
    assert cl.read_token(str(tmp_path / "file"), env) == cl.Token("fromfile", f"--token-file {tmp_path / 'file'}")


def test_named_token_file_that_is_missing_or_empty_is_an_error(tmp_path):
    with pytest.raises(cl.ClusterError, match="--token-file .*nope: cannot read token file"):
        cl.read_token(str(tmp_path / "nope"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(cl.ClusterError, match="RAY_AUTH_TOKEN_PATH=.*: token file is empty"):
        cl.read_token(environ={"RAY_AUTH_TOKEN_PATH": str(tmp_path / "empty")})


def test_entrypoint_quotes_and_joins_the_cluster():
    cmd = cl.entrypoint("my pipe.yaml", "/runs/a b", ["stages[1].steps=3"], join_cluster=True)
    assert cmd == "posttrain run 'my pipe.yaml' --run-dir '/runs/a b' -o 'stages[1].steps=3' -o ray.address=auto"
    assert "ray.address" not in cl.entrypoint("p.yaml", "/r", [], join_cluster=False)


def test_env_flags():
    assert cl._parse_env(["POSTTRAIN_CACHE=/nfs/cache", "A=x=y"]) == {"POSTTRAIN_CACHE": "/nfs/cache", "A": "x=y"}
    with pytest.raises(cl.ClusterError, match="expected KEY=VALUE"):
        cl._parse_env(["NOVALUE"])
    with pytest.raises(cl.ClusterError, match="TOKENIZERS_PARALLELISM: posttrain sets this variable"):
        cl._parse_env(["TOKENIZERS_PARALLELISM=true"])


def test_broken_pipeline_is_refused_before_contacting_the_cluster(tmp_path):
    bad = dict(PIPELINE, stages=[dict(PIPELINE["stages"][0], lr=-1)])
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    proc = cli("submit", str(tmp_path / "bad.yaml"), "--address", "http://127.0.0.1:1")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"{tmp_path / 'bad.yaml'}: stages[0].lr: must be > 0")
    assert len(proc.stderr.strip().splitlines()) == 1


class _Dashboard(http.server.BaseHTTPRequestHandler):
    """Answers /api/version as a Ray dashboard does: 401 without a token, 403 with a wrong
    one; with `auth_off`, 200 to anyone."""

    auth_off = False

    def do_GET(self):
        given = self.headers.get("Authorization")
        code = 200 if self.auth_off or given == "Bearer right" else 403 if given else 401
        body = json.dumps({"ray_version": "2.60.0", "version": "4"}).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def dashboard():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    _Dashboard.auth_off = False


def test_connect_checks_the_token(dashboard, tmp_path, capsys):
    address = f"127.0.0.1:{dashboard.server_port}"
    with pytest.raises(cl.ClusterError, match="requires a token and none was found"):
        cl.connect(address, environ={"HOME": str(tmp_path)})
    with pytest.raises(cl.ClusterError, match="rejected the token from RAY_AUTH_TOKEN$"):
        cl.connect(address, environ={"RAY_AUTH_TOKEN": "wrong"})
    assert cl.connect(address, environ={"RAY_AUTH_TOKEN": "right"})._headers["Authorization"] == "Bearer right"
    assert capsys.readouterr().err == ""
    _Dashboard.auth_off = True
    cl.connect(address, environ={"HOME": str(tmp_path)})
    assert "has Ray token auth off" in capsys.readouterr().err


def test_unreachable_cluster_is_one_line(tmp_path):
    proc = cli("status", "--address", "127.0.0.1:1", env={"RAY_AUTH_TOKEN": "x"})
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("http://127.0.0.1:1: cannot reach the Ray dashboard")


# ---------------------------------------------------------------- a real 3-node cluster


@pytest.fixture(scope="module")
def ray_cluster():
    nodes = {"head": (2, {}), "node_a": (2, {"accel_a": 1}), "node_b": (2, {"accel_b": 1})}
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    local = LocalCluster(nodes, env={"PYTHONPATH": pythonpath})
    try:
        yield local.start()
    finally:
        local.stop()


@pytest.mark.cluster
def test_three_nodes_each_with_its_own_resources(ray_cluster):
    nodes = ray_cluster.alive_nodes()
    assert len(nodes) == 3
    totals = [n["raylet"]["resourcesTotal"] for n in nodes]
    assert all(t["CPU"] == 2 for t in totals)
    # the dashboard writes resource names in camelCase
    owned = sorted(k for t in totals for k in t if k in ("head", "nodeA", "nodeB", "accelA", "accelB"))
    assert owned == ["accelA", "accelB", "head", "nodeA", "nodeB"]
    assert len({n["raylet"]["nodeId"] for n in nodes}) == 3
    # run_state.json names a job's node IP:NODE_MANAGER_PORT; one IP here, so the port must tell them apart
    named = {
        ray_cluster.node_name(f"{n['raylet']['nodeManagerAddress']}:{n['raylet']['nodeManagerPort']}") for n in nodes
    }
    assert named == {"head", "node_a", "node_b"}


@pytest.mark.cluster
def test_token_missing_or_wrong_is_refused(ray_cluster, tmp_path):
    missing = cli("status", "--address", ray_cluster.dashboard, env={"HOME": str(tmp_path)})
    assert missing.returncode == 2 and "requires a token and none was found" in missing.stderr
    (tmp_path / "wrong").write_text("not-the-token")
    wrong = cli("status", "--address", ray_cluster.dashboard, "--token-file", str(tmp_path / "wrong"))
    assert wrong.returncode == 2 and "rejected the token from --token-file" in wrong.stderr
    assert "not-the-token" not in wrong.stderr + wrong.stdout


@pytest.mark.cluster
@pytest.mark.timeout(1100)
def test_submit_status_logs_and_expert_jobs_spread_across_nodes(ray_cluster, tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PIPELINE))
    run_dir = tmp_path / "run"
    token = {"RAY_AUTH_TOKEN": ray_cluster.token()}
    sub = cli(
        "submit",
        str(tmp_path / "p.yaml"),
        "--address",
        ray_cluster.dashboard,
        "--run-dir",
        str(run_dir),
        "--token-file",
        str(ray_cluster.token_file),
    )
    assert sub.returncode == 0, sub.stderr[-2000:]
    sid = sub.stdout.split()[1]
    assert sid.startswith("onray-") and f"posttrain logs {sid}" in sub.stdout and str(run_dir) in sub.stdout
    assert ray_cluster.token() not in sub.stdout + sub.stderr

    early = json.loads(cli("status", sid, "--json", "--address", ray_cluster.dashboard, env=token).stdout)
    assert early[0]["status"] in ("PENDING", "RUNNING", "SUCCEEDED") and early[0]["run_dir"] == str(run_dir)

    # the run took 7 minutes here under a load average of 40 on 2 cores
    follow = cli("logs", sid, "--follow", "--address", ray_cluster.dashboard, env=token, timeout=900)
    assert follow.returncode == 0, follow.stdout[-3000:] + follow.stderr[-2000:]
    assert "Connecting to existing Ray cluster" in follow.stdout
    assert "[experts] general-max: done" in follow.stdout and "[experts] agent-max: done" in follow.stdout

    done = json.loads(cli("status", "--json", "--address", ray_cluster.dashboard, env=token).stdout)
    mine = [r for r in done if r["submission_id"] == sid]
    assert mine[0]["status"] == "SUCCEEDED" and mine[0]["start"] and mine[0]["end"]
    table = cli("status", "--address", ray_cluster.dashboard, env=token).stdout
    assert any(line.startswith(sid) and "SUCCEEDED" in line and str(run_dir) in line for line in table.splitlines())
    assert "[sft] step 2/2" in cli("logs", sid, "--address", ray_cluster.dashboard, env=token).stdout

    state = json.loads((run_dir / "run_state.json").read_text())
    assert [s["status"] for s in state["stages"].values()] == ["done", "done"]
    for job in ("general-max", "agent-max"):
        assert (run_dir / "checkpoints" / "experts" / job / "final" / "config.json").is_file()
    resolved = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    assert resolved["ray"]["address"] == "auto"

    # the expert jobs ran on two different nodes of this cluster
    nodes = expert_job_nodes(run_dir, ray_cluster)
    assert set(nodes) == {"general-max", "agent-max"} and None not in nodes.values(), nodes
    assert len(set(nodes.values())) == 2, nodes


@pytest.mark.cluster
def test_unknown_submission(ray_cluster):
    proc = cli("logs", "nope-123", "--address", ray_cluster.dashboard, env={"RAY_AUTH_TOKEN": ray_cluster.token()})
    assert proc.returncode == 2 and "no submission 'nope-123' on this cluster" in proc.stderr
