"""The layout is a contract: the layers (import-linter, `pyproject.toml`) and ruff's lint
and format run in `make test`, and a module that imports a higher layer fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(*cmd: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def test_layers_contract_is_kept():
    proc = _run(str(BIN / "lint-imports"), "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 kept, 0 broken" in proc.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    """The contract can fail: a copy of the package where the config layer imports the
    pipeline (the layer second from the top) is refused, naming the import."""
    shutil.copytree(ROOT / "posttrain", tmp_path / "posttrain", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    base = tmp_path / "posttrain" / "config" / "base.py"
    base.write_text(base.read_text() + "\nfrom posttrain.pipeline import run_pipeline  # noqa\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = _run(str(BIN / "lint-imports"), "--no-cache", cwd=tmp_path, env=env)
    assert proc.returncode != 0, proc.stdout
    assert "BROKEN" in proc.stdout and "posttrain.config.base -> posttrain.pipeline" in proc.stdout, proc.stdout


def test_only_the_cli_imports_the_pipeline_or_the_cli():
    hits = []
    for path in (ROOT / "posttrain").rglob("*.py"):
        if path.name in ("cli.py", "pipeline.py") and path.parent.name == "posttrain":
            continue
        text = path.read_text()
        if "posttrain.pipeline" in text or "posttrain.cli" in text or "from posttrain import cli" in text:
            hits.append(str(path.relative_to(ROOT)))
    assert hits == []


def test_ruff_lint_is_clean():
    proc = _run(str(BIN / "ruff"), "check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr


def test_ruff_format_is_clean():
    proc = _run(str(BIN / "ruff"), "format", "--check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr


def test_every_import_is_declared_and_every_dependency_used():
    """deptry over the package, the benchmarks and the tests, configured in pyproject.toml
    (gguf and accelerate are used by transformers, not imported: it says why)."""
    proc = _run(str(BIN / "deptry"), ".")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_an_undeclared_import_fails_the_dependency_check(tmp_path):
    shutil.copytree(ROOT / "posttrain", tmp_path / "posttrain", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    base = tmp_path / "posttrain" / "config" / "base.py"
    base.write_text(base.read_text() + "\nimport filelock  # noqa\n")  # installed (torch needs it), not declared
    proc = _run(str(BIN / "deptry"), ".", cwd=tmp_path)
    assert (
        proc.returncode != 0 and "'filelock' imported but it is a transitive dependency" in proc.stdout + proc.stderr
    ), proc.stdout + proc.stderr


BROWSER_TEST = """
import pytest

@pytest.mark.browser
def test_drives_a_browser():
    pass
"""


def test_a_browser_test_without_chromium_skips_but_fails_in_ci(tmp_path):
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(ROOT / "tests" / "xdist_scheduling.py", tmp_path / "xdist_scheduling.py")  # conftest imports it
    (tmp_path / "test_b.py").write_text(BROWSER_TEST)
    base = {k: v for k, v in os.environ.items() if k != "CI"} | {"POSTTRAIN_TEST_CHROMIUM": str(tmp_path / "none")}
    cmd = (sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist", "test_b.py")
    local = _run(*cmd, cwd=tmp_path, env=base)
    assert local.returncode == 0 and "1 skipped" in local.stdout, local.stdout[-2000:]
    ci = _run(*cmd, cwd=tmp_path, env=base | {"CI": "true"})
    assert ci.returncode == 1 and "1 error" in ci.stdout, ci.stdout[-2000:]  # failed in setup
    assert "in CI the browser tests must run, not skip" in ci.stdout
