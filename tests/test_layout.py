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


def import_circles(package: str) -> list[list[str]]:
    """The import circles among `package`'s modules: each strongly connected component of
    the import graph with more than one module, imports inside functions counted (an
    import under `if TYPE_CHECKING:` is a type's name, not an import at run time)."""
    import grimp

    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)
    modules = sorted(graph.modules)
    edges = {m: sorted(set(graph.find_modules_directly_imported_by(m)) & set(modules)) for m in modules}
    order, low, stack, circles = {}, {}, [], []

    def visit(module: str) -> None:  # Tarjan's algorithm
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in edges[module]:
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                circles.append(sorted(component))

    for module in modules:
        if module not in order:
            visit(module)
    return circles


def test_no_import_circle_in_the_package():
    """Dependencies point one way inside a layer too: a table (verifiers, task sources, stage
    types) names the modules that use it by `module:function` (`config/lazy.py`)."""
    assert import_circles("posttrain") == []


def test_an_import_circle_is_found(tmp_path, monkeypatch):
    """The check can fail: two modules that import each other inside functions are one circle."""
    (tmp_path / "circ").mkdir()
    (tmp_path / "circ" / "__init__.py").write_text("")
    (tmp_path / "circ" / "a.py").write_text("def f():\n    from circ.b import g\n    return g\n")
    (tmp_path / "circ" / "b.py").write_text(
        "from circ.c import h\n\n\ndef g():\n    from circ import a\n    return a, h\n"
    )
    (tmp_path / "circ" / "c.py").write_text("def h():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_circles("circ") == [["circ.a", "circ.b"]]


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
