"""`make bench-setup` on a fresh clone leaves an environment as working as `make setup`:
TRL's dependencies bring back PyPI's torchvision, which beside the CPU torch breaks
transformers' tokenizer loading and `import vllm` (`operator torchvision::nms does not
exist`); the target removes it again. Builds a whole venv (about 3 GB, minutes), so it is
left out of `make test` and run by `.ci/run` after the suite: `pytest -m setup`."""

import shutil
import subprocess
from pathlib import Path

import pytest

# minutes: CI runs it after the suite (.ci/run); up to 2400 s for make bench-setup and 600 s to load
pytestmark = [pytest.mark.slow, pytest.mark.setup, pytest.mark.timeout(3100)]

# the venv `make bench-setup` builds measured 3.6 GiB, and pip unpacks wheels beside it
NEEDS_FREE = 5 * 2**30

CHECK = """
import importlib.util, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
import trl, vllm
assert importlib.util.find_spec("torchvision") is None, "torchvision is back"
print("loaded", type(model).__name__, len(tok("2 + 2 =")["input_ids"]), "trl", trl.__version__)
"""


def test_bench_setup_on_a_fresh_clone_loads_a_model_and_its_tokenizer(tmp_path, tiny_dir):
    repo = Path(__file__).resolve().parent.parent
    free = shutil.disk_usage(tmp_path).free
    # fail before minutes of pip with a message that names the cause, not pip's Errno 28 halfway through
    assert free >= NEEDS_FREE, (
        f"make bench-setup needs about {NEEDS_FREE / 2**30:.0f} GiB free for its venv; {tmp_path} has "
        f"{free / 2**30:.1f} GiB (old fresh clones or pytest tmp folders under /tmp?)"
    )
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    try:
        setup = subprocess.run(["make", "bench-setup"], cwd=clone, capture_output=True, text=True, timeout=2400)
        assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
        check = subprocess.run(
            [str(clone / ".venv" / "bin" / "python"), "-c", CHECK, str(tiny_dir)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
        assert "loaded LlamaForCausalLM" in check.stdout
    finally:
        shutil.rmtree(clone, ignore_errors=True)  # a whole venv: do not leave it in pytest's tmp folders
