"""Judge backends of the generative reward model: a batch of chat calls in, one reply (or
an error) per call out. The GRM retries what failed; a reply that failed in transport says
so (`JudgeReply.transport`), so that its retry keeps the temperature.

- `VLLMBackend`: a `JudgeEngine` Ray actor on this cluster serving a local model folder;
  calls go to it in chunks of `max_batch`, each chunk one engine call, under a timeout.
- `HTTPBackend`: any OpenAI-compatible endpoint (`POST {base_url}/chat/completions`)
  through the `openai` client: at most `max_concurrency` requests in flight, each under a
  timeout, the API key read from an environment variable and sent as a Bearer token. A
  request that fails in transport (a timeout, a lost connection, 408, 409, 429, 5xx) is
  sent again by the client after an exponential backoff that honours Retry-After, up to
  `transport_retries` times, before the GRM sees the failure. The endpoint's tokenizer is
  not known here, so the chat markers of common templates in a message are broken
  (`data.chat.as_text`): a judged response's `<|im_end|>` does not end its turn.
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
    transport: bool = False  # the error is the request's (network, status, timeout), not the reply's
    resent: int = 0  # times the client sent the request again after a transport failure


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
            reply = JudgeReply(None, f"judge engine call timed out after {self.config.timeout_s}s", transport=True)
            return [reply for _ in calls]
        except RayError as exc:
            if isinstance(exc, RayActorError):  # the engine died: the GRM's retry starts a new one
                log.warning("judge engine actor died; starting a new one: %s", exc)
                self.actor = None
                if self.shared is not None:
                    self.shared.lost()
            reply = JudgeReply(None, f"judge engine failed: {type(exc).__name__}: {exc}"[:500], transport=True)
            return [reply for _ in calls]
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
        from openai import AsyncOpenAI

        gate = asyncio.Semaphore(self.config.max_concurrency)
        limits = httpx.Limits(max_connections=self.config.max_concurrency)
        async with AsyncOpenAI(
            base_url=self.config.base_url,
            api_key=self.api_key or "",  # empty: no Authorization header
            timeout=self.config.timeout_s,
            max_retries=self.config.transport_retries,
            http_client=httpx.AsyncClient(limits=limits),
        ) as client:
            return list(await asyncio.gather(*(self._one(client, gate, c) for c in calls)))

    def _body(self, call: JudgeCall) -> dict:
        body = {
            "model": self.config.model,
            "messages": [_as_text(m) for m in call.messages],
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
        import openai

        tries = 1 + self.config.transport_retries
        async with gate:
            try:
                raw = await client.chat.completions.with_raw_response.create(**self._body(call))
                completion = raw.parse()
            except openai.APITimeoutError:
                return JudgeReply(
                    None, f"request timed out after {self.config.timeout_s}s ({tries} tries)", transport=True
                )
            except openai.APIStatusError as exc:
                return JudgeReply(None, f"HTTP {exc.status_code}: {_message(exc)}"[:500], transport=True)
            except openai.APIConnectionError as exc:
                return JudgeReply(
                    None, f"connection failed ({tries} tries): {exc.__cause__ or exc}"[:500], transport=True
                )
            except (openai.OpenAIError, ValueError, TypeError) as exc:  # a body that is not a chat completion
                return JudgeReply(None, f"{type(exc).__name__}: {exc}"[:500])
        if not completion.choices:
            return JudgeReply(None, "the reply has no choices", resent=raw.retries_taken)
        choice = completion.choices[0]
        text, content = choice.message.content, (choice.logprobs.content if choice.logprobs else None) or None
        if text is None or not content:
            return JudgeReply(text, None if text is not None else "the reply has no content", resent=raw.retries_taken)
        tokens = [t.token for t in content]
        top = [{a.token: a.logprob for a in t.top_logprobs or []} | {t.token: t.logprob} for t in content]
        return JudgeReply(text, tokens=tokens, top=top, resent=raw.retries_taken)

    def close(self) -> None:
        pass


def _message(exc) -> str:
    """An error response's own message (OpenAI's `{"error": {"message": ...}}` or any JSON), else its text."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        return str(inner.get("message", inner) if isinstance(inner, dict) else inner)
    return str(body if body is not None else exc.message)


def _as_text(message: dict) -> dict:
    """A message whose content reads as text at an endpoint whose tokenizer is not known
    here: the chat markers of common templates in it are broken (`chat.as_text`)."""
    from posttrain.data.chat import CHAT_MARKERS, as_text

    content = message.get("content")
    return {**message, "content": as_text(content, CHAT_MARKERS)} if isinstance(content, str) else message


def make_backend(config: VLLMJudge | HTTPJudge, shared=None):
    """`shared`: the job slot's `JudgeSlot` (a vLLM judge engine kept across stages)."""
    return VLLMBackend(config, shared) if isinstance(config, VLLMJudge) else HTTPBackend(config)
