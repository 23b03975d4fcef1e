"""The trusted side of a code check: runs the tests against a proxy of the candidate.

Runs in its own sandbox (own uid, own PID namespace), forked by the launcher
(`sandbox_exec.py`), stdlib only. The candidate's function is reached only through a
`Channel` over two pipes: each call carries a fresh nonce, the reply is size-capped,
read with a deadline and decoded strictly (`sandbox_runner`), so bytes written ahead of
time, oversized or malformed replies, a dead or hung candidate all fail the call and every
later one. Results go to the verifier over a third pipe that the candidate never holds.
"""

import _signal
import builtins
import os
import select
import sys
import time
from _json import make_scanner

from posttrain.rewards.sandbox_runner import ARG_DEPTH, INT_DIGITS, WireError, decode, encode, frame, to_json

NOT_MAPPED = ("StopIteration", "StopAsyncIteration")  # would end a test's loop or map() silently
TEXT = 300


class CandidateGone(BaseException):
    """The candidate died, hung, ran out of time or broke the protocol: this call and
    every later one fail. A BaseException, so a test's `except Exception` cannot pass it."""


class CandidateFailed(BaseException):
    """The call ended with SystemExit, KeyboardInterrupt or another BaseException, or the
    candidate answered with something that is not plain data: the test fails."""


class CandidateError(Exception):
    """An exception the candidate raised whose type is not a builtin one."""


def rebuild_exception(name: str, message: str) -> BaseException:
    """The candidate's exception on this side: the builtin type of that name where one
    exists (so tests expecting ValueError still work), else CandidateError."""
    kind = getattr(builtins, name, None) if isinstance(name, str) and name.isidentifier() else None
    if isinstance(kind, type) and issubclass(kind, BaseException):
        if not issubclass(kind, Exception):
            return CandidateFailed(f"the candidate raised {name}: {message}")
        if name not in NOT_MAPPED:
            try:
                return kind(message)
            except Exception:  # a builtin that wants other arguments (UnicodeDecodeError)
                pass
    return CandidateError(f"{str(name)[:80]}: {message}")


def _pairs(pairs):
    if len({k for k, _ in pairs}) != len(pairs):
        raise WireError("duplicate key")
    return dict(pairs)


def _constant(name):
    raise WireError(f"bare {name} (non-finite floats are tagged)")


class _Strict:
    """What json's C scanner reads its settings from (not `import json`: each check is a
    fresh process, and json with re and enum would cost a few ms of every check)."""

    strict = True
    object_hook = None
    object_pairs_hook = staticmethod(_pairs)
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_constant)


_scan = make_scanner(_Strict())


def loads(line: bytes):
    """Parse one reply line: ASCII JSON, one value, no NaN literals, no duplicate keys."""
    try:
        text = line.decode("ascii")
        value, end = _scan(text, len(text) - len(text.lstrip()))
        if text[end:].strip():
            raise WireError("extra data after the reply")
        return value
    except WireError:
        raise
    except (StopIteration, ValueError, RecursionError) as exc:  # bad JSON, non-ASCII, over-long ints
        raise WireError(f"not wire JSON: {type(exc).__name__} {str(exc)[:200]}") from None


def dumps(message) -> bytes:
    """One report line (plain JSON types, string keys)."""
    return (to_json(message) + "\n").encode("ascii")


def describe(exc: BaseException) -> str:
    """`Type: message`, whatever the message (its str may fail on values the candidate made)."""
    try:
        text = str(exc)
    except BaseException:
        text = "(its message cannot be shown)"
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:TEXT]


class Channel:
    """Calls into the candidate's process: one request line out, one reply line in."""

    def __init__(self, requests_fd: int, replies_fd: int, deadline: float, reply_bytes: int):
        self.requests_fd, self.replies_fd = requests_fd, replies_fd
        self.deadline, self.reply_bytes = deadline, reply_bytes
        self.gone: str | None = None
        self.calls = 0
        self.failures = 0  # calls that ended in CandidateFailed or CandidateGone
        self.task_errors: list[str] = []
        self.on_failure = lambda reason: None
        os.set_blocking(requests_fd, False)

    def call(self, name: str, args: tuple, kwargs: dict):
        if self.gone:
            self._fail(CandidateGone(self.gone))
        nonce = os.urandom(16).hex()
        try:  # values the candidate returned, nested a further ARG_DEPTH - MAX_DEPTH levels, still go
            payload = {
                "args": [encode(v, 0, ARG_DEPTH) for v in args],
                "kwargs": [[k, encode(v, 0, ARG_DEPTH)] for k, v in kwargs.items()],
            }
            request = frame({"id": nonce, "fn": name, **payload})
        except (WireError, RecursionError, ValueError) as exc:
            # the argument may hold what the candidate returned (deeper than the wire carries,
            # a view of it): the candidate's failure, never the task's, so it cannot void a check
            self._fail(CandidateFailed(f"an argument cannot cross the sandbox boundary: {describe(exc)}"))
        self.calls += 1
        self._send(request)
        reply = self._receive()
        if type(reply) is not dict or reply.get("id") != nonce:
            self._lose(f"call {self.calls}: a reply that does not answer this call (forged or written ahead)")
        kind = set(reply) - {"id", "message"}
        if kind == {"return"}:
            try:
                return decode(reply["return"])
            except WireError as exc:
                self._lose(f"call {self.calls}: a reply that is not plain data ({exc})")
        if kind == {"raised"}:
            exc = rebuild_exception(reply["raised"], str(reply.get("message", ""))[:TEXT])
            if isinstance(exc, CandidateFailed):
                self._fail(exc)
            raise exc
        if kind == {"error"} and isinstance(reply["error"], str):
            self._fail(CandidateFailed(reply["error"][:TEXT]))
        self._lose(f"call {self.calls}: a malformed reply")

    def _fail(self, exc: BaseException):
        self.failures += 1
        self.on_failure(str(exc))
        raise exc

    def _lose(self, reason: str):
        self.gone = self.gone or reason
        self._fail(CandidateGone(self.gone))

    def _remaining(self, what: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._lose(f"call {self.calls}: no {what} within the time limit")
        return left

    def _send(self, data: bytes) -> None:
        while data:
            _, writable, _ = select.select([], [self.requests_fd], [], self._remaining("room for the request"))
            if not writable:
                continue
            try:
                data = data[os.write(self.requests_fd, data) :]
            except BrokenPipeError:
                self._lose(f"call {self.calls}: the candidate is gone (exited or closed its end)")
            except BlockingIOError:
                pass

    def _receive(self):
        buffer = b""
        while b"\n" not in buffer:
            readable, _, _ = select.select([self.replies_fd], [], [], self._remaining("reply"))
            if not readable:
                continue
            chunk = os.read(self.replies_fd, 65536)
            if not chunk:
                self._lose(f"call {self.calls}: the candidate is gone (exited, was killed or closed its end)")
            buffer += chunk
            if len(buffer) > self.reply_bytes:
                self._lose(f"call {self.calls}: a reply over {self.reply_bytes} bytes")
        line, rest = buffer.split(b"\n", 1)
        if rest:
            self._lose(f"call {self.calls}: more than one reply to one call")
        try:
            return loads(line)
        except WireError as exc:
            self._lose(f"call {self.calls}: {exc}")

    def proxy(self, name: str):
        def candidate(*args, **kwargs):
            return self.call(name, args, kwargs)

        candidate.__name__ = candidate.__qualname__ = name
        return candidate


def _namespace(spec: dict, channel: Channel) -> dict:
    """The tests' globals: the trusted context (helpers), then the entry point as the proxy."""
    ns = {"__name__": "posttrain_tests", "__builtins__": builtins}
    if spec.get("context"):
        exec(compile(spec["context"], "context", "exec"), ns)
    ns[spec["entry_point"]] = channel.proxy(spec["entry_point"])
    return ns


def run_tests(spec: dict, channel: Channel, timer) -> dict:
    """Format 1: each statement a test, run in order in one namespace."""
    ns = _namespace(spec, channel)
    results = []
    for test in spec["tests"]:
        if channel.gone:
            results.append({"test": test[:TEXT], "passed": False, "error": f"not run: {channel.gone}"})
            continue
        failures, error = channel.failures, None
        try:
            code = compile(test, "test", "exec")
        except SyntaxError as exc:
            channel.task_errors.append(f"a test does not compile: {describe(exc)}")
            results.append({"test": test[:TEXT], "passed": False, "error": describe(exc)})
            continue
        try:
            with timer:
                exec(code, ns)
        except BaseException as exc:
            error = describe(exc)
        if error is None and channel.failures != failures:  # a candidate failure the test swallowed
            error = f"the candidate failed a call: {channel.gone or 'raised a BaseException'}"
        results.append({"test": test[:TEXT], "passed": error is None, "error": error})
    return {"kind": "tests", "tests": results}


class Recorder:
    """Per assert statement of a check: reached or not, and whether any execution failed."""

    def __init__(self, sources: list[str]):
        self.sources = sources
        self.state: list[str | None] = [None] * len(sources)  # None: not reached; "": passed; else why not
        self.current: int | None = None

    def begin(self, i: int) -> None:
        self.current = i

    def end(self, i: int, value) -> None:
        self.current = None
        if not value:
            self.fail_assert(i, "assert failed")
        elif self.state[i] is None:
            self.state[i] = ""

    def fail(self, i: int, exc: BaseException) -> None:
        self.current = None
        self.fail_assert(i, describe(exc))

    def fail_assert(self, i: int, why: str) -> None:
        if not self.state[i]:
            self.state[i] = why[:TEXT]

    def candidate_failed(self, reason: str) -> None:
        if self.current is not None:
            self.fail_assert(self.current, reason)


_TEMPLATE = (
    "_posttrain_begin(0)\n"
    "try:\n    _posttrain_end(0, _posttrain_test)\n"
    "except Exception as _posttrain_exc:\n    _posttrain_fail(0, _posttrain_exc)\n"
)


def instrument_check(source: str) -> tuple[str, list[str]]:
    """The check's source with each assert (but `assert <constant>`) recorded and execution
    going on past it, and the asserts' own text. Run by the verifier, not in the sandbox."""
    import ast

    found: list[str] = []

    class Asserts(ast.NodeTransformer):
        def visit_Assert(self, node):
            if isinstance(node.test, ast.Constant):
                return node
            found.append((ast.get_source_segment(source, node) or "assert")[:TEXT])
            new = ast.parse(_TEMPLATE.replace("0", str(len(found) - 1))).body
            call = new[1].body[0].value  # _posttrain_end(i, _posttrain_test)
            call.args[1] = node.test
            return [ast.copy_location(stmt, node) for stmt in new]

    tree = ast.fix_missing_locations(Asserts().visit(ast.parse(source)))
    return ast.unparse(tree), found


def run_check(spec: dict, channel: Channel, timer) -> dict:
    """Format 2: `check(candidate)` on the instrumented check, each assert recorded."""
    recorder = Recorder(spec["asserts"])
    channel.on_failure = recorder.candidate_failed
    ns = _namespace(spec, channel)
    ns.update(_posttrain_begin=recorder.begin, _posttrain_end=recorder.end, _posttrain_fail=recorder.fail)
    exec(compile(spec["check"], "check", "exec"), ns)
    ns[spec["entry_point"]] = channel.proxy(spec["entry_point"])  # the check's source may define a stub
    if not callable(ns.get("check")):
        return {"kind": "check", "task_error": "the check source defines no function check(candidate)"}
    stopped = None
    try:
        with timer:
            ns["check"](ns[spec["entry_point"]])
    except BaseException as exc:
        stopped = describe(exc)
    completed = stopped is None
    tests = []
    for source, state in zip(recorder.sources, recorder.state):
        error = state or (None if state == "" or completed else f"not reached: the check stopped ({stopped})")
        tests.append({"test": source, "passed": error is None, "reached": state is not None, "error": error})
    passed = completed and channel.failures == 0 and all(t["passed"] for t in tests)
    return {"kind": "check", "tests": tests, "completed": completed, "stopped": stopped, "check_passed": passed}


class Timer:
    """The check's time limit while tests run: SIGALRM ends a slow test (the candidate's
    hang, or trusted code made slow by what the candidate returned) as a failure."""

    def __init__(self, channel: Channel, deadline: float):
        self.channel, self.active = channel, False
        _signal.signal(_signal.SIGALRM, self._ring)
        _signal.setitimer(_signal.ITIMER_REAL, max(deadline - time.monotonic(), 0.001))

    def _ring(self, signum, frame):
        self.channel.gone = self.channel.gone or "the time limit was reached"
        if self.active:
            self.channel.failures += 1
            self.channel.on_failure(self.channel.gone)
            raise CandidateGone(self.channel.gone)

    def __enter__(self):
        self.active = True
        if self.channel.gone:
            raise CandidateGone(self.channel.gone)

    def __exit__(self, *exc):
        self.active = False

    def stop(self) -> None:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        self.active = False


def stopped_report(spec: dict, why: str) -> dict:
    """Every test failed: the tests stopped after the candidate was called."""
    if spec["kind"] == "check":
        tests = [{"test": a, "passed": False, "reached": False, "error": why[:TEXT]} for a in spec["asserts"]]
        return {"kind": "check", "tests": tests, "completed": False, "stopped": why[:TEXT], "check_passed": False}
    tests = [{"test": t[:TEXT], "passed": False, "error": why[:TEXT]} for t in spec["tests"]]
    return {"kind": "tests", "tests": tests, "stopped": why[:TEXT]}


def main(spec: dict, requests_fd: int, replies_fd: int, report_fd: int) -> None:
    """Run the tests, then write one report line to `report_fd`."""
    sys.set_int_max_str_digits(INT_DIGITS)
    deadline = time.monotonic() + spec["timeout_s"]
    channel = Channel(requests_fd, replies_fd, deadline, spec["reply_bytes"])
    timer = Timer(channel, deadline)
    try:
        report = (run_check if spec["kind"] == "check" else run_tests)(spec, channel, timer)
    except BaseException as exc:
        if channel.calls or channel.failures or channel.gone:  # the candidate had its part in it
            report = stopped_report(spec, f"the tests stopped: {describe(exc)}")
        else:  # before any call: the task's own code (context, check source) is broken
            report = {"kind": spec["kind"], "task_error": describe(exc)}
    timer.stop()
    report.update(calls=channel.calls, candidate=channel.gone)
    if channel.task_errors:
        report.setdefault("task_error", channel.task_errors[0])
    data = dumps(report)
    while data:
        data = data[os.write(report_fd, data) :]
