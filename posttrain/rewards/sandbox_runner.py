"""The candidate's runner, and the wire between it and the test harness.

Shipped as `runner.py` into the candidate's sandbox: it imports the program as module
`solution` (never `__main__`), then answers the harness's calls. The wire carries plain
data only: None, bool, int, float (inf and nan tagged), str, list, and tagged tuples,
dicts (any plain keys), sets and frozensets; anything else (a subclass included) is an
error on the way out, and the harness decodes the replies strictly (`decode`), so an
object with a rigged __eq__ never reaches the side that compares. Requests (harness ->
candidate, trusted) are length-prefixed marshal frames; replies are one JSON line each.
Stdlib only, and only modules that load fast (a Python start is most of a check's cost).
"""

import marshal
import os
import sys
from _json import encode_basestring_ascii as _quote

MAX_DEPTH = 100  # of a reply
ARG_DEPTH = 2 * MAX_DEPTH  # of an argument, which may hold a reply the harness passes back
INT_DIGITS = 20_000  # a 20k-digit int decodes in a few ms; the default limit (4300) would fail honest bignums
TAGS = ("$float", "$tuple", "$dict", "$set", "$frozenset")


class WireError(ValueError):
    """A value that cannot cross the boundary, or data that is not the wire's grammar."""


def encode(value, depth: int = 0, limit: int = MAX_DEPTH):
    """A plain value -> its tagged form (JSON types only), nested at most `limit` deep."""
    if depth > limit:
        raise WireError(f"nested deeper than {limit}")
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is int:
        return value
    if kind is float:
        if value - value == 0.0:  # finite (inf - inf and nan are nan)
            return value
        return {"$float": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    if kind is list:
        return [encode(v, depth + 1, limit) for v in value]
    if kind is tuple:
        return {"$tuple": [encode(v, depth + 1, limit) for v in value]}
    if kind is dict:
        return {"$dict": [[encode(k, depth + 1, limit), encode(v, depth + 1, limit)] for k, v in value.items()]}
    if kind is set or kind is frozenset:
        return {"$" + kind.__name__: [encode(v, depth + 1, limit) for v in value]}
    raise WireError(f"a {kind.__name__} cannot cross the sandbox boundary (plain data only)")


def decode(data, depth: int = 0, limit: int = MAX_DEPTH):
    """A tagged form (as parsed from JSON) -> the plain value, strictly, nested at most `limit` deep."""
    if depth > limit:
        raise WireError(f"nested deeper than {limit}")
    kind = type(data)
    if data is None or kind is bool or kind is int or kind is str or kind is float:
        return data
    if kind is list:
        return [decode(v, depth + 1, limit) for v in data]
    if kind is not dict or len(data) != 1:
        raise WireError("an object must be exactly one tag")
    ((tag, body),) = data.items()
    if tag == "$float":
        if body not in ("inf", "-inf", "nan"):
            raise WireError(f"bad $float {str(body)[:20]!r}")
        return float(body)
    if tag not in TAGS or type(body) is not list:
        raise WireError(f"unknown tag {str(tag)[:20]!r}")
    try:
        if tag == "$dict":
            if not all(type(p) is list and len(p) == 2 for p in body):
                raise WireError("$dict holds [key, value] pairs")
            return {decode(k, depth + 1, limit): decode(v, depth + 1, limit) for k, v in body}
        items = [decode(v, depth + 1, limit) for v in body]
        return tuple(items) if tag == "$tuple" else (set if tag == "$set" else frozenset)(items)
    except TypeError as exc:  # an unhashable key or member
        raise WireError(str(exc)) from None


def to_json(value) -> str:
    """JSON text of a tagged form (what `encode` makes; dict keys are strings)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        return float.__repr__(value)
    if kind is str:
        return _quote(value)
    if kind is list:
        return "[" + ",".join(map(to_json, value)) + "]"
    if kind is dict:
        return "{" + ",".join(_quote(k) + ":" + to_json(v) for k, v in value.items()) + "}"
    raise WireError(f"not a tagged form: {kind.__name__}")


def frame(message) -> bytes:
    """A request: 4-byte length, then marshal (the harness is the only writer)."""
    data = marshal.dumps(message)
    return len(data).to_bytes(4, "big") + data


# ---------------------------------------------------------------- the candidate's side


def _describe(exc: BaseException) -> dict:
    try:
        message = str(exc)[:500]
    except BaseException:  # a rigged __str__ only loses its message
        message = ""
    return {"raised": type(exc).__name__, "message": message}


def _answer(module, request: dict, failed: str | None) -> dict:
    if failed:
        return {"error": failed}
    function = module.__dict__.get(request["fn"])
    if not callable(function):
        return {"error": f"the program defines no function {request['fn']!r}"}
    args = [decode(v, 0, ARG_DEPTH) for v in request["args"]]
    kwargs = {k: decode(v, 0, ARG_DEPTH) for k, v in request["kwargs"]}
    try:
        value = function(*args, **kwargs)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt... fail this call, not the runner
        return _describe(exc)
    try:
        return {"return": encode(value)}
    except (WireError, RecursionError) as exc:
        return {"error": f"returned a value that is not plain data: {exc}"}


def _reply(request: dict, answer: dict) -> bytes:
    try:
        return (to_json({"id": request["id"], **answer}) + "\n").encode("ascii")
    except (WireError, ValueError, RecursionError) as exc:  # an int too long to write out
        return (
            to_json({"id": request["id"], "error": f"returned a value that cannot be written: {exc}"}) + "\n"
        ).encode()


def _read_exactly(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def serve(program: str = "solution.py", requests_fd: int = 3, replies_fd: int = 4) -> None:
    sys.set_int_max_str_digits(INT_DIGITS)
    module = type(sys)("solution")
    module.__file__ = os.path.abspath(program)
    sys.modules["solution"] = module
    failed = None
    try:
        with open(program, encoding="utf-8") as f:
            exec(compile(f.read(), program, "exec"), module.__dict__)
    except BaseException as exc:  # exit or raise at import: every call fails, with the reason
        import traceback

        traceback.print_exc()
        failed = "the program failed at import: {raised}: {message}".format(**_describe(exc))
    while size := _read_exactly(requests_fd, 4):
        request = marshal.loads(_read_exactly(requests_fd, int.from_bytes(size, "big")))
        _write_all(replies_fd, _reply(request, _answer(module, request, failed)))


if __name__ == "__main__":
    serve()
