"""`posttrain dashboard`: a Starlette app over one or more run folders. JSON endpoints
read what the folders gained since the last poll (posttrain/dashboard/data.py); the page
(static/) draws them with Plotly.js, served from the `plotly` package itself, so nothing
comes from the internet. A bind beyond loopback needs a token, asked for on every request."""

from __future__ import annotations

import ipaddress
import secrets
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from posttrain.dashboard.data import Run
from posttrain.dashboard.samples import parse_steps

STATIC = Path(__file__).parent / "static"
COOKIE = "posttrain_dashboard_token"


class DashboardError(Exception):
    """A dashboard that cannot start; str() is the one line shown."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    if not is_loopback(host) and not token:
        raise DashboardError(
            f"--host {host} is reachable from other machines: give --token T (every request must "
            "then carry it), or bind 127.0.0.1"
        )


def plotly_js() -> Path:
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise DashboardError(f"plotly.min.js not found in the plotly package ({path}); reinstall plotly")
    return path


def load_runs(run_dirs: list[str]) -> list[Run]:
    runs = []
    for i, folder in enumerate(run_dirs):
        path = Path(folder)
        if not path.is_dir():
            raise DashboardError(f"{folder}: no such run folder")
        runs.append(Run(path, i))
    return runs


def create_app(run_dirs: list[str], token: str | None = None) -> Starlette:
    runs = load_runs(run_dirs)
    js = plotly_js()

    def run_of(request: Request) -> Run:
        try:
            return runs[int(request.query_params.get("run", 0))]
        except (ValueError, IndexError):
            raise _BadRequest(f"run must be 0..{len(runs) - 1}") from None

    async def index(request: Request) -> Response:
        response = FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})
        if token:
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        return response

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "plotly.min.js":
            return FileResponse(js, headers={"Cache-Control": "max-age=86400"})
        if name not in ("app.js", "style.css"):
            return PlainTextResponse("not found", 404)
        return FileResponse(STATIC / name, headers={"Cache-Control": "no-store"})

    async def api_runs(request: Request) -> Response:
        return JSONResponse([{"run": r.index, "name": r.name(), "path": str(r.path), "jobs": r.jobs()} for r in runs])

    async def api_pipeline(request: Request) -> Response:
        return JSONResponse([r.pipeline() for r in runs])

    async def api_job(request: Request) -> Response:
        stage, job = request.query_params.get("stage"), request.query_params.get("job") or None
        if not stage:
            raise _BadRequest("stage is required")
        wanted = request.query_params.get("runs") or str(run_of(request).index)
        try:
            chosen = [runs[int(i)] for i in wanted.split(",") if i.strip()]
        except (ValueError, IndexError):
            raise _BadRequest(f"runs must be indices in 0..{len(runs) - 1}") from None
        parts = b",".join(r.series_json(stage, job) for r in chosen)
        return Response(b"[" + parts + b"]", media_type="application/json")

    async def api_eval(request: Request) -> Response:
        return JSONResponse([r.evaluation() for r in runs])

    async def api_health(request: Request) -> Response:
        return JSONResponse([r.health() for r in runs])

    async def api_samples(request: Request) -> Response:
        q = request.query_params
        try:
            steps = parse_steps(q.get("steps") or "")
        except ValueError as exc:
            raise _BadRequest(str(exc)) from None
        filters = {
            "step": _num(q, "step", int),
            "steps": steps,
            "min": _num(q, "min", float),
            "max": _num(q, "max", float),
            "source": q.get("source") or None,
            "verifier": q.get("verifier") or None,
            "criterion": q.get("criterion") or None,
            "flag": q.get("flag") or None,
        }
        page = _num(q, "page", int) or 0
        return JSONResponse(run_of(request).samples(q.get("stage") or None, filters, max(page, 0)))

    async def api_sample(request: Request) -> Response:
        q = request.query_params
        found = run_of(request).sample(q.get("stage", ""), q.get("id", ""))
        if found is None:
            return JSONResponse({"error": f"no sample {q.get('id')!r} in stage {q.get('stage')!r}"}, 404)
        return JSONResponse(found)

    async def api_sample_raw(request: Request) -> Response:
        """One saved sample's line, whole (the link under a sample sent cut)."""
        q = request.query_params
        raw = run_of(request).sample_raw(q.get("stage", ""), q.get("id", ""))
        if raw is None:
            return JSONResponse({"error": f"no sample {q.get('id')!r} in stage {q.get('stage')!r}"}, 404)
        return Response(raw, media_type="application/json")

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/static/{name}", static),
            Route("/api/runs", api_runs),
            Route("/api/pipeline", api_pipeline),
            Route("/api/job", api_job),
            Route("/api/eval", api_eval),
            Route("/api/health", api_health),
            Route("/api/samples", api_samples),
            Route("/api/sample", api_sample),
            Route("/api/sample_raw", api_sample_raw),
            Route("/favicon.ico", lambda request: Response(status_code=204)),
        ],
        exception_handlers={_BadRequest: _bad_request, Exception: _failed},
    )
    if token:
        app.add_middleware(_TokenCheck, token=token)
    return app


class _BadRequest(Exception):
    pass


async def _bad_request(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, 400)


async def _failed(request: Request, exc: Exception) -> Response:
    """A failure the readers did not foresee: named on the page, not a bare 500."""
    return JSONResponse({"error": f"{request.url.path}: {type(exc).__name__}: {exc}"}, 500)


def _num(query, key: str, kind):
    value = query.get(key)
    if value in (None, ""):
        return None
    try:
        return kind(value)
    except ValueError:
        raise _BadRequest(f"{key} must be a number, got {value!r}") from None


class _TokenCheck:
    """Every request carries the token: `?token=`, the cookie the page sets, or a Bearer header."""

    def __init__(self, app, token: str):
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            request = Request(scope)
            given = (
                request.query_params.get("token")
                or request.cookies.get(COOKIE)
                or request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            )
            if not given or not secrets.compare_digest(given.encode(), self.token.encode()):
                await PlainTextResponse("a token is required: open the URL printed at start (?token=...)", 401)(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


def serve(run_dirs: list[str], host: str = "127.0.0.1", port: int = 8600, token: str | None = None) -> None:
    import uvicorn

    check_bind(host, token)
    app = create_app(run_dirs, token)
    shown = f"[{host}]" if ":" in host else host
    print(
        f"posttrain dashboard: http://{shown}:{port}/{'?token=' + token if token else ''} "
        f"({len(run_dirs)} run{'s' if len(run_dirs) > 1 else ''}; Ctrl-C stops)",
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")
