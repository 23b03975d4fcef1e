"""A real multi-node Ray cluster on this machine, for tests: a head and worker nodes started
with `ray start` on loopback, each with its own ports, CPUs and a custom resource, token
auth on with a token of the cluster's own. Teardown stops only the nodes it started.

Each node runs `ray start --block` in its own session: SIGTERM to it stops that node's
processes, and anything left carrying the cluster's temp folder is killed after."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


class NodeExited(RuntimeError):
    """A `ray start` that ended while its node should be up."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalCluster:
    """Nodes as {name: (num_cpus, extra resources)}; the first is the head."""

    nodes: dict[str, tuple[int, dict[str, float]]]
    env: dict[str, str] = field(default_factory=dict)
    object_store_bytes: int = 150 * 2**20
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    node_manager_ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        # Short: Ray's unix socket paths live under it (108-byte limit).
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ptc-", dir="/tmp"))
        self.token_file = self.temp_dir / "token"
        self.token_file.write_text(secrets.token_hex(32))
        self.token_file.chmod(0o600)
        self.gcs_port, self.dashboard_port = free_port(), free_port()

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def node_env(self) -> dict[str, str]:
        """Environment of every node: token auth with this cluster's token only (never
        ~/.ray/auth_token), the test's Python first on PATH so jobs find `posttrain`.
        Ray's memory monitor is off: it compares the whole machine's memory, other
        programs' included, with its 95% threshold, and on a shared machine it killed this
        cluster's job supervisor for memory that other runs held."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(self.token_file),
            RAY_USAGE_STATS_ENABLED="0",
            RAY_memory_monitor_refresh_ms="0",
            PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
            **self.env,
        )
        return env

    def start(self, timeout: float = 120, tries: int = 3) -> LocalCluster:
        """Start the head, then the workers one at a time. A node that exits while starting
        is started again (Ray gives a raylet 30 s to register, which a loaded machine can miss)."""
        names = list(self.nodes)
        head = [
            "--head",
            f"--port={self.gcs_port}",
            f"--dashboard-port={self.dashboard_port}",
            "--dashboard-host=127.0.0.1",
            "--include-dashboard=true",
            f"--ray-client-server-port={free_port()}",
        ]
        for attempt in range(tries):
            try:
                self._start_node(names[0], head)
                self._wait_dashboard(timeout)
                break
            except NodeExited:
                if attempt == tries - 1:
                    raise
        for count, name in enumerate(names[1:], start=2):
            for attempt in range(tries):
                try:
                    self._start_node(name, [f"--address=127.0.0.1:{self.gcs_port}"])
                    self.wait_nodes(count, timeout)
                    break
                except NodeExited:
                    if attempt == tries - 1:
                        raise
        return self

    def _start_node(self, name: str, args: list[str]) -> None:
        """Each node gets its own Ray temp folder: nodes that share one also share one
        runtime-env cache, and a node setting up a job's working_dir deletes and unpacks
        it again, under the feet of a job another node runs there (a job's working
        directory vanished mid-import that way)."""
        cpus, resources = self.nodes[name]
        node_temp = self.temp_dir / name
        node_temp.mkdir(exist_ok=True)
        ports = [
            "--node-manager-port",
            "--object-manager-port",
            "--dashboard-agent-listen-port",
            "--dashboard-agent-grpc-port",
            "--metrics-export-port",
            "--runtime-env-agent-port",
        ]
        cmd = [
            RAY,
            "start",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={node_temp}",
            f"--num-cpus={cpus}",
            f"--resources={json.dumps({name: 1, **resources})}",
            f"--object-store-memory={self.object_store_bytes}",
            "--disable-usage-stats",
            *args,
        ]
        for flag in ports:
            cmd += [flag, str(free_port())]
        self.node_manager_ports[name] = int(cmd[cmd.index("--node-manager-port") + 1])
        with open(self.temp_dir / f"{name}.out", "w") as log:  # the child keeps its own copy
            self.procs[name] = subprocess.Popen(
                cmd, env=self.node_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _wait_dashboard(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            self._check_alive()
            try:
                urllib.request.urlopen(f"{self.dashboard}/api/version", timeout=2)
                return
            except urllib.error.HTTPError:  # 401 without a token: the server is up
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"Ray dashboard at {self.dashboard} did not come up in {timeout}s")

    def alive_nodes(self) -> list[dict]:
        """The cluster's alive nodes, through the dashboard's REST API (with the token)."""
        req = urllib.request.Request(
            f"{self.dashboard}/nodes?view=summary", headers={"Authorization": f"Bearer {self.token()}"}
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            summary = json.load(resp)["data"]["summary"]
        return [n for n in summary if n["raylet"]["state"] == "ALIVE"]

    def wait_nodes(self, count: int, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            self._check_alive()
            try:
                if len(self.alive_nodes()) >= count:
                    return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError(f"{count} Ray nodes were not alive after {timeout}s")

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.temp_dir / f"{name}.out").read_text()[-2000:]
                raise NodeExited(f"ray node {name} exited with {proc.returncode}:\n{tail}")

    def node_name(self, address: str) -> str | None:
        """Our name of the node at `IP:NODE_MANAGER_PORT` (how run_state.json records where a
        job ran); every node here shares one IP, so the port tells them apart."""
        port = int(address.rsplit(":", 1)[1]) if ":" in address else -1
        return next((name for name, p in self.node_manager_ports.items() if p == port), None)

    def token(self) -> str:
        return self.token_file.read_text().strip()

    def stop(self) -> None:
        """SIGTERM each node we started (workers first), then kill whatever still carries
        this cluster's temp folder in its command line: only our own processes."""
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in self._leftover_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _leftover_pids(self) -> list[int]:
        mark = str(self.temp_dir).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if mark in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids


def expert_job_nodes(run_dir: Path, cluster: LocalCluster, stage: str = "experts") -> dict[str, str | None]:
    """{job: node name} of an experts stage, from the `node` each job's entry in
    run_state.json records (None for a node that is not one of the cluster's)."""
    state = json.loads((Path(run_dir) / "run_state.json").read_text())
    return {job: cluster.node_name(entry.get("node", "")) for job, entry in state["stages"][stage]["jobs"].items()}


def cli(*args, env=None, timeout=60) -> subprocess.CompletedProcess:
    """`posttrain` in a subprocess, with no Ray token of the caller's unless `env` gives one."""
    root = Path(__file__).resolve().parents[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "posttrain.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, **(env or {})},
        check=False,
    )
