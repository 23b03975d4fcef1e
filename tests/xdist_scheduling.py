"""`--dist loadfile` for this suite: pytest-xdist 3.8's file scheduling, with its crash
handling made safe.

When a worker dies (Ray's driver side can take the whole worker process down with it,
whatever test it is running), xdist 3.8 puts the dead worker's whole workload back on the
queue, the files it had finished included, as empty work units. A worker handed an empty
unit never reports a test done, so it is never given more work, and near the end of the run
every worker waits for a next test that never comes: the session hangs until CI's own
limit kills it (pytest-xdist issue 1378; a replacement worker handed a single test waits the
same way, issue 1327). Here:

- only the files with tests left go back on the queue;
- a worker is given files until it holds two tests at least (a worker runs a test only once
  it holds the next), and one that takes the last file of the queue is told at once that no
  more will come, so it runs its last test instead of waiting for a next one;
- a worker that dies between reporting a test and being sent its next file is left for
  xdist to remove (its channel is closed; sending to it raised and broke the whole run);
- the test a worker died in FAILS, naming the test (a native crash is a bug, never passed as
  green by a rerun); the rest of its file runs on a fresh worker;
- each worker's faulthandler writes to a file of its own (pytest's writes to a stderr that
  xdist drops), and a crash report ends with the dead worker's Python stacks from that file.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

FAULTS_ENV = "POSTTRAIN_TEST_FAULTS"  # the folder of the workers' fault files, set by the controller

RETRIES = 0  # fresh workers a test may take down before it fails: none, a crash is a failure


class CrashSafeLoadFileScheduling(LoadFileScheduling):
    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.crashes: dict[str, int] = {}

    def remove_node(self, node):
        self.last_dead = node.gateway.id
        workload = self.assigned_work.pop(node)
        pending = [(scope, nodeid) for scope, unit in workload.items() for nodeid, done in unit.items() if not done]
        if not pending:  # a node that finished its work
            return None
        scope, crashitem = pending[0]
        self.crashes[crashitem] = self.crashes.get(crashitem, 0) + 1
        if self.crashes[crashitem] > RETRIES:
            workload[scope][crashitem] = True  # reported failed by xdist; not run again
        self.workqueue.update((s, unit) for s, unit in workload.items() if not all(unit.values()))
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem

    def _reschedule(self, node):
        if node.shutting_down or node not in self.registered_collections:  # a replacement still collecting
            return  # gets its work when it has collected (schedule())
        try:
            self._feed(node)
        except OSError:  # it died after its last report and before xdist saw it go (its channel is closed):
            pass  # remove_node, when xdist does, puts back on the queue what was assigned to it

    def _feed(self, node):
        if self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
            self._assign_work_unit(node)
        # a worker runs a test only once it holds the next one (or the word that none will come)
        while self.workqueue and self._pending_of(self.assigned_work[node]) < 2:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()  # it has all it will get: let it run its last test

    def retried(self, nodeid: str) -> bool:
        return self.crashes.get(nodeid, 0) <= RETRIES


# ---------------------------------------------------------------- the hooks (conftest.py imports them)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    return CrashSafeLoadFileScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    retried = getattr(sched, "retried", None)
    if retried is not None and retried(crashitem):
        report.outcome = "rerun"
        report.longrepr = f"{report.longrepr}: run again on a fresh worker"
    terminal = sched.config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:  # named in the log with the dead worker's stacks, whatever the verbosity
        terminal.write_line(f"\n{report.longrepr}")
        stacks = dead_worker_stacks(getattr(sched, "last_dead", None))
        if stacks:
            terminal.write_line(stacks)


def dead_worker_stacks(worker: str | None) -> str:
    """What the dead worker's faulthandler wrote (the newest file of that worker id), or ''."""
    folder = os.environ.get(FAULTS_ENV)
    if not worker or not folder:
        return ""
    files = sorted(Path(folder).glob(f"{worker}-*.txt"), key=lambda f: f.stat().st_mtime)
    text = files[-1].read_text(errors="replace").strip() if files else ""
    return f"{worker}'s Python stacks at the crash ({files[-1]}):\n{text}" if text else ""


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler plugin, whose file this replaces
def pytest_configure(config):
    workerinput = getattr(config, "workerinput", None)  # xdist's mark of a worker
    if workerinput is None:  # the controller: one folder for its workers, which inherit the variable
        if config.getoption("dist", "no") != "no" and FAULTS_ENV not in os.environ:
            os.environ[FAULTS_ENV] = config.stash[OWN_FOLDER] = tempfile.mkdtemp(prefix="posttrain-test-faults-")
        return
    folder = os.environ.get(FAULTS_ENV)
    if folder:
        handle = open(Path(folder) / f"{workerinput['workerid']}-{os.getpid()}.txt", "w")  # noqa: SIM115 (open for the process's life)
        config.stash[FAULT_FILE] = handle
        faulthandler.enable(file=handle, all_threads=True)


FAULT_FILE = pytest.StashKey()
OWN_FOLDER = pytest.StashKey()


def pytest_unconfigure(config):
    """The controller removes the folder it made once the run has reported (a crash's stacks
    were printed when it happened)."""
    folder = config.stash.get(OWN_FOLDER, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_report_teststatus(report, config):
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
    return None
