"""Ray started beside the pipeline's task-source preflight (runtime/infra.py RayStarting):
Ray stays up after the thread that started it has done its work, a run refused by the
preflight leaves no Ray process and prints its refusal alone, and no idle worker is
prestarted for a job whose actors all have runtime envs of their own."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

STARTS = """
import sys, time, psutil, ray
from posttrain.config import PipelineConfig
from posttrain.runtime.infra import RayStarting

data = {"type": "reasoning_gym", "families": [{"name": "chain_sum"}]}
stage = {"name": "sft", "type": "sft", "steps": 1, "lr": 1e-4, "data": data}
config = PipelineConfig.model_validate({"name": "r", "model": {"name": "tiny"}, "stages": [stage]})
starting = RayStarting(config, verbose=False)
starting.wait()
time.sleep(5)  # the start is over; Ray's processes must outlive it
names = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
print("gcs", sum("gcs_server" in n for n in names), "raylet", sum("raylet/raylet" in n for n in names))
print("idle", sum(n.startswith("ray::IDLE") for n in names))

@ray.remote(num_cpus=0)
def one():
    return 1

print("task", ray.get(one.remote(), timeout=120))
"""


def test_ray_started_in_a_thread_outlives_the_start_and_prestarts_no_idle_worker():
    proc = subprocess.run([sys.executable, "-c", STARTS], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "gcs 1 raylet 1" in lines, proc.stdout + proc.stderr  # killed with the thread, before the keep-alive
    assert "idle 0" in lines, proc.stdout
    assert "task 1" in lines, proc.stdout
    assert "SIGTERM handler is not set" not in proc.stderr  # set in the main thread instead
    assert "Started a local Ray instance" in proc.stderr  # Ray's own line, held back and printed by wait()


BAD = {"max_terms": 1}  # below the family's min_terms
REFUSED_IN_PROCESS = """
import sys, time, psutil, ray, yaml
from posttrain.config.files import ConfigError, load_pipeline
from posttrain.pipeline import run_pipeline

config = load_pipeline(sys.argv[1])
try:
    run_pipeline(config, __import__("pathlib").Path(sys.argv[2]), source=sys.argv[1])
except ConfigError as exc:
    print("refused", exc)
time.sleep(2)
names = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
print("initialized", ray.is_initialized(), "gcs", sum("gcs_server" in n for n in names))
"""


def test_a_run_refused_by_the_source_preflight_leaves_no_ray_and_prints_its_refusal_alone(tmp_path):
    pipeline = {
        "name": "refused",
        "model": {"name": "tiny"},
        "stages": [
            {
                "name": "rl",
                "type": "rl",
                "steps": 1,
                "lr": 1e-4,  # a family parameter only the family itself refuses: found by the source preflight
                "tasks": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic", "params": BAD}]},
            }
        ],
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(pipeline))
    # Ray's sessions of this run only (the processes name it in their arguments); short, as
    # Ray's socket paths must be
    ray_tmp = Path(tempfile.mkdtemp(prefix="rs-", dir="/tmp"))
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "run", str(path), "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_TMPDIR": str(ray_tmp)},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "max_terms" in lines[0], proc.stderr
    assert proc.stdout == "", proc.stdout
    assert any(ray_tmp.rglob("gcs_server.out")), "Ray was not started beside the preflight: nothing was tested"
    left = []
    for p in psutil.process_iter(["cmdline", "create_time"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if str(ray_tmp) in cmdline and p.info["create_time"] >= started - 1:
            left.append(cmdline[:120])
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not left, left

    # in a process that goes on (a test, a notebook): Ray is shut down, not left to the next run
    proc = subprocess.run(
        [sys.executable, "-c", REFUSED_IN_PROCESS, str(path), str(tmp_path / "run2")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "refused" in proc.stdout and "initialized False gcs 0" in proc.stdout, proc.stdout + proc.stderr
