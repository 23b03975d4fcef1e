"""No test and no library code changes the process environment while Ray may be live in it:
setenv and unsetenv race with Ray's native threads reading the environment (a test worker
crashed so), and a value one test set reaches whatever a later test starts. Tests pass the
values they mean (`environ=` arguments, a subprocess's `env=`). Read from the syntax tree,
so a comment or a string that names these calls is not a write."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Where a write is the design, each with why no live Ray can race with it.
ALLOWED = {
    "tests/conftest.py": "once, at import: before any test starts Ray",
    "tests/xdist_scheduling.py": "once, at pytest_configure: before any test starts Ray",
    "tests/test_grm_http.py": "once, at import (collection): before any test starts Ray",
    "posttrain/train/trainer.py": "a trainer rank, in its own actor, before its process group reads them",
}

ENVIRON_METHODS = {"update", "pop", "setdefault", "clear", "popitem", "__setitem__", "__delitem__"}


def _is_os_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def writes(tree: ast.AST) -> list[int]:
    """Line numbers of environment writes: monkeypatch.setenv/delenv, os.putenv/unsetenv,
    os.environ's mutating methods, and assignment to or deletion of os.environ[...]."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr in ("setenv", "delenv"):
                lines.append(node.lineno)
            elif func.attr in ("putenv", "unsetenv") and isinstance(func.value, ast.Name) and func.value.id == "os":
                lines.append(node.lineno)
            elif func.attr in ENVIRON_METHODS and _is_os_environ(func.value):
                lines.append(node.lineno)
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else []
        if isinstance(node, ast.AugAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and _is_os_environ(target.value):
                lines.append(node.lineno)
    return sorted(lines)


def test_the_finder_sees_every_kind_of_write_and_nothing_else():
    source = """
monkeypatch.setenv("A", "1")
mp.delenv("A", raising=False)
os.putenv("A", "1")
os.unsetenv("A")
os.environ.update(A="1")
os.environ.pop("A")
os.environ.setdefault("A", "1")
os.environ["A"] = "1"
os.environ["A"] += "1"
del os.environ["A"]
# monkeypatch.setenv("A", "1") in a comment
text = 'os.environ["A"] = "1"'
value = os.environ.get("A")
env = dict(os.environ, A="1")
mine = {}
mine["A"] = "1"
"""
    assert writes(ast.parse(source)) == list(range(2, 12))


def test_no_environment_write_outside_the_allowed_places():
    found = []
    for folder in ("posttrain", "tests"):  # bench/ holds scripts run on their own, never under a test
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in ALLOWED:
                continue
            found += [f"{name}:{line}" for line in writes(ast.parse(path.read_text(), filename=name))]
    assert not found, (
        "the process environment is written (pass the values instead: an environ= argument, a "
        "subprocess's env=; see tests/conftest.py): " + ", ".join(found)
    )
