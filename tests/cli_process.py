"""`posttrain` started as a process of its own (its own session, so a test can SIGKILL the
whole process group), for the tests that stop a run and resume it."""

from __future__ import annotations

import os
import subprocess
import sys


def start_cli(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    """`python -m posttrain.cli ARGS`, stdout and stderr merged into one text pipe; `env`
    entries are added to this process's environment."""
    return subprocess.Popen(
        [sys.executable, "-m", "posttrain.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        **kw,
    )
