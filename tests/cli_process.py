"""`posttrain` started as a process of its own (its own session, so a test can SIGKILL the
whole process group), for the tests that stop a run and resume it. Its output is read as it
comes, by a thread: a test that waits on a checkpoint without reading would otherwise block
the run once it has printed a pipe's worth (64 KiB)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading


class CliProcess(subprocess.Popen):
    """A Popen whose merged stdout and stderr a thread collects; `output()` is what it has
    printed so far, `communicate()` waits for the exit and returns (everything printed, None)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.stdout is not None
        for line in self.stdout:
            self._lines.append(line)

    def output(self) -> str:
        return "".join(self._lines)

    def communicate(self, input=None, timeout=None):  # noqa: A002 - Popen's own signature
        self.wait(timeout)
        self._reader.join(timeout=30)  # the pipe closes with the last process that holds it
        return self.output(), None


def start_cli(*args: str, env: dict | None = None, **kw) -> CliProcess:
    """`python -m posttrain.cli ARGS`, stdout and stderr merged into one text stream read as
    it comes; `env` entries are added to this process's environment."""
    return CliProcess(
        [sys.executable, "-m", "posttrain.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        **kw,
    )
