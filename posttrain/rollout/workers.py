"""Calls with a hard time limit, in persistent worker processes.

What a reward check runs on a response (an answer parsed and compared symbolically, a
user's reward function) can take any time: `9^{999999999}` sends a symbolic library into a
C loop that no signal interrupts, and in a thread it would hold the interpreter lock of
the whole process. So each call runs in a worker process, never in the caller: the caller
waits on a pipe (holding no lock) until the call's deadline, and past it kills that worker
alone, starts its replacement, and goes on with the next call. Workers are spawned once and
reused (a call costs a pipe round trip, not a process start); each one runs an
initializer first (imports, a user's function), whose time never counts against a call.

`WorkerPool.call` returns the call's value or raises: `CallTimeout` (past the deadline),
`WorkerCrashed` (the worker died during the call), `CallRaised` (the function raised; the
worker goes on), `WorkerUnavailable` (no worker could be started: the machinery's own
failure). `shared_pool` gives one pool per initializer to a whole process (the verifiers
of every stage job share it).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import pickle
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

STARTUP_TIMEOUT_S = 300  # a fresh worker's imports (sympy, a user's module) on a busy machine
MAX_INSTANCES = 64  # objects a worker keeps unpickled between calls (`call_method`)


class CallTimeout(Exception):
    """The call ran past its deadline; its worker was killed and replaced."""


class WorkerCrashed(Exception):
    """The worker died during the call (a crash in C, os._exit, the kernel's OOM killer)."""


class CallRaised(Exception):
    """The function raised; `kind` is the exception's type name."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind, self.message = kind, message


class WorkerUnavailable(Exception):
    """No worker could be started (spawn failed, its initializer raised or outlasted the
    start-up timeout): a failure of the machinery, not of any call."""


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:500]
    except BaseException:  # a message whose str raises
        return ""


def _serve(conn, initializer, initargs) -> None:
    """A worker's loop: set up, then run each (fn, args) sent and send back its outcome."""
    try:
        if initializer is not None:
            initializer(*initargs)
    except BaseException as exc:
        conn.send(("init_failed", f"{type(exc).__name__}: {_text(exc)}"))
        return
    conn.send(("ready",))
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", fn(*args))
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the worker goes on
            reply = ("raised", type(exc).__name__, _text(exc))
        try:
            conn.send(reply)
        except Exception as exc:  # a value that does not pickle
            conn.send(("raised", type(exc).__name__, f"the value cannot be sent back: {_text(exc)}"))


class _Worker:
    def __init__(self, ctx, initializer, initargs):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, initializer, initargs), daemon=True)
        self.process.start()
        child.close()
        self.ready = False
        self.prepared: set = set()  # the keys of the set-ups this worker has run (WorkerPool.call)

    def wait_ready(self, timeout: float) -> None:
        if self.ready:
            return
        if not self.conn.poll(timeout):
            raise WorkerUnavailable(f"a worker did not start within {timeout:g}s")
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(1)
            raise WorkerUnavailable(f"a worker died while starting (exit code {self.process.exitcode})") from None
        if message[0] != "ready":
            raise WorkerUnavailable(f"a worker's set-up raised {message[1]}")
        self.ready = True

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


class WorkerPool:
    """`workers` worker processes, started when first needed, each set up by
    `initializer(*initargs)`; `call` and `map` run functions in them with a deadline."""

    def __init__(self, workers: int = 1, initializer=None, initargs: tuple = (), startup_timeout=STARTUP_TIMEOUT_S):
        self.workers, self.initializer, self.initargs = max(1, workers), initializer, tuple(initargs)
        self.startup_timeout = startup_timeout
        self._ctx = multiprocessing.get_context("spawn")
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(self.workers):
            self._idle.put(None)  # a slot whose worker starts on first use
        self._started: set[_Worker] = set()
        self._lock = threading.Lock()
        self.pid = os.getpid()
        self.replaced = 0  # workers killed for a timeout or a crash and started again

    def _start(self) -> _Worker:
        worker = _Worker(self._ctx, self.initializer, self.initargs)
        with self._lock:
            self._started.add(worker)
        return worker

    def _retire(self, worker: _Worker | None) -> None:
        if worker is not None:
            worker.kill()
            with self._lock:
                self._started.discard(worker)

    def call(self, fn, args: tuple, timeout: float, setup: tuple | None = None):
        """`fn(*args)` in a worker, within `timeout` seconds from when the worker has it.
        `setup` (key, fn, args): run first in a worker that has not run that key, within the
        start-up timeout, never the call's (a verifier unpickled there: its module's imports,
        which a loaded machine can stretch past a per-sample limit of seconds)."""
        worker = self._take()
        try:
            if worker is None or not worker.process.is_alive():
                self._retire(worker)
                worker = self._start()
            worker.wait_ready(self.startup_timeout)
            if setup is not None and setup[0] not in worker.prepared:
                worker = self._prepare(worker, setup)
            worker = self._send(worker, (fn, args))
            if not worker.conn.poll(timeout):
                worker = self._replace(worker)
                raise CallTimeout(f"the call ran past its {timeout:g}s limit: its worker was killed and replaced")
            try:
                reply = worker.conn.recv()
            except (EOFError, OSError):
                worker.process.join(1)
                code = worker.process.exitcode
                worker = self._replace(worker)
                raise WorkerCrashed(f"its worker died during the call (exit code {code}) and was replaced") from None
        except WorkerUnavailable:
            self._retire(worker)
            worker = None
            raise
        except (CallTimeout, WorkerCrashed):
            raise
        except BaseException:  # fn or args that do not pickle, or worse: start afresh
            self._retire(worker)
            worker = None
            raise
        finally:
            self._idle.put(worker)
        if reply[0] == "raised":
            raise CallRaised(reply[1], reply[2])
        return reply[1]

    def _prepare(self, worker: _Worker, setup: tuple) -> _Worker:
        """`setup` run in `worker` (or in a fresh one, where it died since its last call)."""
        key, fn, args = setup
        worker = self._send(worker, (fn, args))
        if not worker.conn.poll(self.startup_timeout):
            raise WorkerUnavailable(f"a worker's set-up for its calls took over {self.startup_timeout:g}s")
        try:
            reply = worker.conn.recv()
        except (EOFError, OSError):
            worker.process.join(1)
            raise WorkerUnavailable(f"a worker died in its set-up (exit code {worker.process.exitcode})") from None
        if reply[0] == "raised":
            raise WorkerUnavailable(f"a worker's set-up raised {reply[1]}: {reply[2]}")
        if len(worker.prepared) >= MAX_INSTANCES:  # as the worker forgets its objects (`load_instance`)
            worker.prepared.clear()
        worker.prepared.add(key)
        return worker

    def _send(self, worker: _Worker, message: tuple) -> _Worker:
        """`message` sent to `worker`, or to a fresh one where it died since its last call."""
        try:
            worker.conn.send(message)
        except (BrokenPipeError, EOFError, ConnectionError):
            self._retire(worker)
            worker = self._start()
            worker.wait_ready(self.startup_timeout)
            worker.conn.send(message)
        return worker

    def _take(self) -> _Worker | None:
        """An idle worker, one that is set up if there is one (a replacement still importing
        waits for the calls that find nothing else)."""
        worker = self._idle.get()
        for _ in range(self.workers):
            if worker is None or worker.ready or worker.conn.poll(0) or self._idle.empty():
                return worker
            self._idle.put(worker)
            worker = self._idle.get()
        return worker

    def _replace(self, worker: _Worker) -> _Worker:
        self._retire(worker)
        self.replaced += 1
        return self._start()  # it sets up while other calls go on

    def map(
        self, fn, calls: list[tuple], timeout: float, setup: tuple | None = None
    ) -> list[tuple[object, BaseException | None]]:
        """(value, None) or (None, the exception) for each call, in order; the calls run in
        parallel on the pool's workers, each with its own deadline (`setup`: as in `call`)."""

        def one(args):
            try:
                return self.call(fn, args, timeout, setup), None
            except Exception as exc:
                return None, exc

        if self.workers == 1 or len(calls) < 2:
            return [one(args) for args in calls]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(calls))) as executor:
            return list(executor.map(one, calls))

    def close(self) -> None:
        with self._lock:
            started, self._started = list(self._started), set()
        for worker in started:
            worker.kill()


_SHARED: dict[tuple, WorkerPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(initializer=None, initargs: tuple = (), workers: int = 2) -> WorkerPool:
    """This process's one pool for `initializer(*initargs)` (a forked child gets its own)."""
    key = (initializer, tuple(initargs))
    with _SHARED_LOCK:
        pool = _SHARED.get(key)
        if pool is None or pool.pid != os.getpid():
            pool = _SHARED[key] = WorkerPool(workers, initializer, initargs)
        return pool


@atexit.register
def close_shared() -> None:
    with _SHARED_LOCK:
        pools = [p for p in _SHARED.values() if p.pid == os.getpid()]
        _SHARED.clear()
    for pool in pools:
        pool.close()


def import_modules(*names: str) -> None:
    """An initializer: import `names` (and warm what they load lazily) before any call."""
    import importlib

    for name in names:
        importlib.import_module(name)


_INSTANCES: dict[bytes, object] = {}


def load_instance(blob: bytes):
    """In a worker: the object pickled in `blob`, kept unpickled for the next call with the
    same object (a verifier's caches survive between samples). As a pool call's set-up, it
    imports the object's module outside the call's time limit."""
    obj = _INSTANCES.get(blob)
    if obj is None:
        if len(_INSTANCES) >= MAX_INSTANCES:
            _INSTANCES.clear()
        obj = _INSTANCES[blob] = pickle.loads(blob)
    return obj


def prepare_instance(blob: bytes) -> None:
    """A pool call's set-up: `load_instance`, returning nothing to send back."""
    load_instance(blob)


def call_method(blob: bytes, method: str, args: tuple):
    """In a worker: `method` of the object pickled in `blob` (`load_instance`)."""
    return getattr(load_instance(blob), method)(*args)
