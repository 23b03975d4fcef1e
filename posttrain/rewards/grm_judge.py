"""Judge backends of the generative reward model: a batch of chat calls in, one reply (or
an error) per call out. Neither backend retries; the GRM retries what failed.

- `VLLMBackend`: a `JudgeEngine` Ray actor on this cluster serving a local model folder;
  calls go to it in chunks of `max_batch`, each chunk one engine call, under a timeout.
- `HTTPBackend`: any OpenAI-compatible endpoint (`POST {base_url}/chat/completions`),
  at most `max_concurrency` requests in flight, each under a timeout, with the API key
  read from an environment variable and sent as a Bearer token.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.config import HTTPJudge, ModelConfig, VLLMJudge

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JudgeCall:
    """One chat request to the judge; `schema` asks for JSON of that shape."""

    messages: tuple[dict, ...]
    schema: dict | None
    max_tokens: int
    temperature: float = 0.0
    logprobs: int = 0  # top-k logprobs per generated token; 0: none


@dataclass
class JudgeReply:
    """The judge's text, or why there is none. `tokens`/`top` are the generated tokens and
    each one's top alternatives {token text: logprob}, when the backend returns them."""

    text: str | None
    error: str | None = None
    tokens: list[str] | None = None
    top: list[dict[str, float]] | None = field(default=None, repr=False)


def folder_version(folder: Path) -> str:
    """A short fingerprint of a model folder: its config and the sizes of its weight files."""
    digest = hashlib.sha256((folder / "config.json").read_bytes())
    for weights in sorted(folder.glob("*.safetensors")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
    return digest.hexdigest()[:10]


class VLLMBackend:
    def __init__(self, config: VLLMJudge, shared=None):
        """`shared`: a `JudgeSlot` whose engine outlives this stage (a job slot's), or None:
        an engine of this backend's own, killed by `close`."""
        from posttrain.models import resolve_model

        self.config, self.shared = config, shared
        self.model_dir = resolve_model(ModelConfig(name=config.model))
        self.model_id = f"{config.model}@{folder_version(self.model_dir)}:{config.dtype}"
        self.actor = None
        self._own_ray = False

    def start(self) -> None:
        """Create the actor; it loads while the caller goes on (Ray actors start asynchronously).
        Outside a pipeline (`posttrain rewards`), a quiet local Ray is started for it."""
        if self.actor is None:
            import ray

            from posttrain.rollout.judge import JudgeEngine

            if not ray.is_initialized():
                ray.init(
                    num_cpus=max(2, int(self.config.num_cpus + 0.999)),
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
                self._own_ray = True
            if self.shared is not None:
                self.actor = self.shared.get(self.model_dir, self.config)
            else:
                self.actor = JudgeEngine.remote_actor(str(self.model_dir), self.config)

    async def complete(self, calls: list[JudgeCall]) -> list[JudgeReply]:
        self.start()
        size = self.config.max_batch
        chunks = [calls[i : i + size] for i in range(0, len(calls), size)]
        out: list[JudgeReply] = []
        for chunk in chunks:  # one engine call at a time: the engine batches within a call
            out += await self._chunk(chunk)
        return out

    async def _chunk(self, calls: list[JudgeCall]) -> list[JudgeReply]:
        from ray.exceptions import RayActorError, RayError

        requests = [
            {
                "messages": list(c.messages),
                "schema": c.schema,
                "max_tokens": c.max_tokens,
                "temperature": c.temperature,
                "logprobs": c.logprobs,
            }
            for c in calls
        ]
        ref = self.actor.chat.remote(requests)
        try:
            replies = await asyncio.wait_for(_await(ref), self.config.timeout_s)
        except asyncio.TimeoutError:
            return [JudgeReply(None, f"judge engine call timed out after {self.config.timeout_s}s") for _ in calls]
        except RayError as exc:
            if isinstance(exc, RayActorError):  # the engine died: the GRM's retry starts a new one
                log.warning("judge engine actor died; starting a new one: %s", exc)
                self.actor = None
                if self.shared is not None:
                    self.shared.lost()
            return [JudgeReply(None, f"judge engine failed: {type(exc).__name__}: {exc}"[:500]) for _ in calls]
        return [JudgeReply(r.get("text"), r.get("error"), r.get("tokens"), r.get("top")) for r in replies]

    def close(self) -> None:
        import ray

        if self.actor is not None and self.shared is None:  # a shared engine stays for the next stage
            ray.kill(self.actor)
        self.actor = None
        if self._own_ray:
            ray.shutdown()
            self._own_ray = False


async def _await(ref):
    return await ref


class HTTPBackend:
    def __init__(self, config: HTTPJudge):
        self.config = config
        self.model_id = f"{config.model}@{config.base_url}"
        self.api_key = None
        if config.api_key_env:
            self.api_key = os.environ.get(config.api_key_env)
            if not self.api_key:
                raise ValueError(
                    f"judge.api_key_env: environment variable {config.api_key_env} is not set "
                    "(set it, or api_key_env: null for an endpoint without a key)"
                )

    def start(self) -> None:
        pass

    async def complete(self, calls: list[JudgeCall]) -> list[JudgeReply]:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        gate = asyncio.Semaphore(self.config.max_concurrency)
        limits = httpx.Limits(max_connections=self.config.max_concurrency)
        async with httpx.AsyncClient(headers=headers, timeout=self.config.timeout_s, limits=limits) as client:
            return list(await asyncio.gather(*(self._one(client, gate, c) for c in calls)))

    def _body(self, call: JudgeCall) -> dict:
        body = {
            "model": self.config.model,
            "messages": list(call.messages),
            "max_tokens": call.max_tokens,
            "temperature": call.temperature,
        }
        if self.config.structured and call.schema:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": call.schema, "strict": True},
            }
        if self.config.logprobs and call.logprobs:
            body.update(logprobs=True, top_logprobs=call.logprobs)
        return body

    async def _one(self, client, gate: asyncio.Semaphore, call: JudgeCall) -> JudgeReply:
        import httpx

        async with gate:
            try:
                response = await asyncio.wait_for(
                    client.post(f"{self.config.base_url}/chat/completions", json=self._body(call)),
                    self.config.timeout_s,
                )
                response.raise_for_status()
                choice = response.json()["choices"][0]
                text = choice["message"]["content"]
            except asyncio.TimeoutError:
                return JudgeReply(None, f"request timed out after {self.config.timeout_s}s")
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                return JudgeReply(None, f"{type(exc).__name__}: {exc}"[:500])
        content = (choice.get("logprobs") or {}).get("content") or None
        if not content:
            return JudgeReply(text)
        tokens = [t["token"] for t in content]
        top = [
            {a["token"]: a["logprob"] for a in t.get("top_logprobs") or []} | {t["token"]: t["logprob"]}
            for t in content
        ]
        return JudgeReply(text, tokens=tokens, top=top)

    def close(self) -> None:
        pass


def make_backend(config: VLLMJudge | HTTPJudge, shared=None):
    """`shared`: the job slot's `JudgeSlot` (a vLLM judge engine kept across stages)."""
    return VLLMBackend(config, shared) if isinstance(config, VLLMJudge) else HTTPBackend(config)
