"""Run pipelines on a Ray cluster through the Ray Jobs API: `submit` ships the pipeline file
in the job's working_dir and runs `posttrain run` on the cluster (joining it with
`ray.address=auto`); `status` and `logs` follow submissions. Ray's token auth stays on:
every request carries `Authorization: Bearer TOKEN`, read from --token-file, RAY_AUTH_TOKEN,
RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, in that order. The token is never printed."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from posttrain.config.files import load_pipeline

MARK = "posttrain"  # metadata key of the submissions this module made
FINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# Keys of infra.QUIET_ENV must stay out: the driver's ray.init sets them, and Ray refuses
# a job whose runtime env repeats a key of the driver's.
JOB_ENV = {"PYTHONUNBUFFERED": "1"}


class ClusterError(Exception):
    """A cluster request that cannot go on; str() is the one line shown to the user."""


@dataclass(frozen=True)
class Token:
    value: str
    source: str  # where it came from, for error messages (never the value)


def read_token(token_file: str | None = None, environ: Mapping[str, str] | None = None) -> Token | None:
    """The cluster token from the first place that has one, or None. A named file
    (--token-file, RAY_AUTH_TOKEN_PATH) that cannot be read is an error, not a fallback.
    The variables (and HOME) come from `environ`, the process's environment by default."""
    environ = os.environ if environ is None else environ
    if token_file:
        return _token_from(Path(token_file).expanduser(), f"--token-file {token_file}", required=True)
    if environ.get("RAY_AUTH_TOKEN", "").strip():
        return Token(environ["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN")
    if environ.get("RAY_AUTH_TOKEN_PATH"):
        path = environ["RAY_AUTH_TOKEN_PATH"]
        return _token_from(_expand_home(path, environ), f"RAY_AUTH_TOKEN_PATH={path}", required=True)
    return _token_from(_expand_home("~/.ray/auth_token", environ), "~/.ray/auth_token", required=False)


def _expand_home(path: str, environ: Mapping[str, str]) -> Path:
    """`~` from `environ`'s HOME (the user's home when it has none)."""
    if path == "~" or path.startswith("~/"):
        return Path(environ.get("HOME") or Path.home()) / path[2:]
    return Path(path).expanduser()


def _token_from(path: Path, source: str, required: bool) -> Token | None:
    try:
        value = path.read_text().strip()
    except OSError as exc:
        if required:
            raise ClusterError(f"{source}: cannot read token file: {exc.strerror or exc}") from None
        return None
    if not value and required:
        raise ClusterError(f"{source}: token file is empty")
    return Token(value, source) if value else None


def connect(address: str, token_file: str | None = None, environ: Mapping[str, str] | None = None):
    """A JobSubmissionClient for the dashboard at `address`, after checking that the
    cluster answers and accepts the token (a one-line error otherwise). A cluster that
    answers without any token has auth off: said on stderr, since anyone reaching it can
    run code there."""
    from ray.job_submission import JobSubmissionClient

    address = address.rstrip("/")
    if "://" not in address:
        address = f"http://{address}"
    token = read_token(token_file, environ)
    headers = {"Authorization": f"Bearer {token.value}"} if token else {}
    status = _version_status(address, {})
    if status == 200:
        print(
            f"warning: {address} has Ray token auth off; start the cluster with a token (see docs/clusters.md)",
            file=sys.stderr,
        )
    elif status == 401 and token is None:
        raise ClusterError(
            f"{address}: the cluster requires a token and none was found; pass --token-file FILE "
            "or set RAY_AUTH_TOKEN (`ray get-auth-token` on the head node prints it)"
        )
    elif status == 401:
        status = _version_status(address, headers)
        if status in (401, 403):
            raise ClusterError(f"{address}: the cluster rejected the token from {token.source}")
    if status != 200:
        raise ClusterError(f"{address}: /api/version answered HTTP {status}; is this a Ray dashboard?")
    return JobSubmissionClient(address, headers=headers)


def _version_status(address: str, headers: dict) -> int:
    import requests

    try:
        return requests.get(f"{address}/api/version", headers=headers, timeout=15).status_code
    except requests.RequestException as exc:
        raise ClusterError(
            f"{address}: cannot reach the Ray dashboard ({type(exc).__name__}); "
            "is the cluster up and the address http://HEAD:8265?"
        ) from None


def entrypoint(pipeline_name: str, run_dir: str, overrides: list[str], join_cluster: bool) -> str:
    """The shell command the job runs on the cluster, from its working_dir."""
    cmd = ["posttrain", "run", pipeline_name, "--run-dir", run_dir]
    for text in overrides + (["ray.address=auto"] if join_cluster else []):
        cmd += ["-o", text]
    return shlex.join(cmd)


def submit(
    pipeline: str,
    address: str,
    run_dir: str | None = None,
    overrides: list[str] = (),
    token_file: str | None = None,
    env: list[str] = (),
) -> tuple[str, str]:
    """Validate the pipeline here, then submit it; returns (submission id, run folder).

    A relative run folder is made absolute against this directory: the job runs in a
    temporary working_dir on the cluster, where a relative path would be lost."""
    config = load_pipeline(pipeline, list(overrides))
    run_dir = os.path.abspath(run_dir or os.path.join("runs", config.name))
    job_env = {**JOB_ENV, **_parse_env(env)}
    client = connect(address, token_file)
    submission_id = f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    name = Path(pipeline).name
    with tempfile.TemporaryDirectory(prefix="posttrain-submit-") as folder:
        shutil.copyfile(pipeline, Path(folder) / name)
        client.submit_job(
            entrypoint=entrypoint(name, run_dir, list(overrides), join_cluster=config.ray.address is None),
            submission_id=submission_id,
            runtime_env={"working_dir": folder, "env_vars": job_env},
            metadata={MARK: "1", "pipeline": config.name, "run_dir": run_dir, "source": str(Path(pipeline).resolve())},
        )
    return submission_id, run_dir


def _parse_env(items: list[str]) -> dict[str, str]:
    from posttrain.runtime.infra import QUIET_ENV

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClusterError(f"--env {item!r}: expected KEY=VALUE")
        if key in QUIET_ENV or key in JOB_ENV:
            raise ClusterError(f"--env {key}: posttrain sets this variable on the cluster itself")
        out[key] = value
    return out


def describe(job) -> dict:
    """A submission as a plain record: id, status, times (UTC), run folder, message."""
    meta = job.metadata or {}
    return {
        "submission_id": job.submission_id,
        "status": str(getattr(job.status, "value", job.status)),
        "start": _utc(job.start_time),
        "end": _utc(job.end_time),
        "run_dir": meta.get("run_dir"),
        "pipeline": meta.get("pipeline"),
        "message": job.message or "",
    }


def _utc(ms: int | None) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000)) if ms else None


def status(client, submission_id: str | None = None) -> list[dict]:
    """One submission, or every posttrain submission of the cluster (oldest first)."""
    if submission_id:
        try:
            return [describe(client.get_job_info(submission_id))]
        except RuntimeError as exc:
            if "404" in str(exc) or "does not exist" in str(exc):
                raise ClusterError(f"no submission {submission_id!r} on this cluster") from None
            raise
    jobs = [j for j in client.list_jobs() if (j.metadata or {}).get(MARK) and j.submission_id]
    return [describe(j) for j in sorted(jobs, key=lambda j: j.start_time or 0)]


def format_status(rows: list[dict]) -> str:
    if not rows:
        return "no posttrain submissions on this cluster"
    lines = [f"{'SUBMISSION':<34} {'STATUS':<10} {'START':<21} {'END':<21} RUN FOLDER"]
    for r in rows:
        lines.append(
            f"{r['submission_id']:<34} {r['status']:<10} {r['start'] or '-':<21} {r['end'] or '-':<21} "
            f"{r['run_dir'] or '-'}"
        )
        if r["status"] in ("FAILED", "STOPPED") and r["message"]:
            last = r["message"].strip().splitlines()[-1]
            lines.append(f"  {last[:200]}{'...' if len(last) > 200 else ''}")
    return "\n".join(lines)


def logs(client, submission_id: str, follow: bool, out=sys.stdout) -> str:
    """Print the job's driver log (with `follow`, stream it until the job ends); returns
    the job's final (or current) status."""
    status(client, submission_id)  # a clear error for an unknown id
    if not follow:
        out.write(client.get_job_logs(submission_id))
        out.flush()
        return str(client.get_job_status(submission_id).value)
    import asyncio

    async def tail():
        async for chunk in client.tail_job_logs(submission_id):
            out.write(chunk)
            out.flush()

    asyncio.run(tail())
    # The log stream closes when the job ends; its status may land a moment later.
    for _ in range(50):
        final = str(client.get_job_status(submission_id).value)
        if final in FINAL:
            return final
        time.sleep(0.2)
    return final


def dump(rows: list[dict]) -> str:
    return json.dumps(rows, indent=1)
