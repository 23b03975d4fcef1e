"""The judge engine: a vLLM engine as a Ray actor that serves a fixed model (its weights
never change) for the generative reward model. Chat messages in, text out; each request
may carry a JSON schema, decoded under vLLM's structured outputs (xgrammar), so even a
small judge returns well-formed JSON, and may ask for the top logprobs of each token.
"""

from __future__ import annotations

import time

import ray

from posttrain.config import VLLMJudge
from posttrain.config.resources import device_of
from posttrain.data.chat import render_judge_prompt
from posttrain.rollout.engine import engine_env, vllm_args


def judge_env() -> dict[str, str]:
    """The rollout engines' env (the judge sets its own cache size, `kv_cache_memory_bytes`)."""
    from posttrain.config import RolloutConfig

    return engine_env(RolloutConfig())


def judge_args(config: VLLMJudge) -> dict:
    """The judge's device-dependent engine arguments, decided as the rollout engines' are:
    on GPU its KV cache is what `gpu_memory_utilization` leaves (a byte size there would
    starve a judge at 8k context) and `enforce_eager` is the config's; on CPU the cache is
    `kv_cache_gib`."""
    return vllm_args(
        device_of(config.num_gpus),
        config.max_model_len,
        config.enforce_eager,
        config.gpu_memory_utilization,
        config.kv_cache_gib,
    )


class JudgeSlot:
    """The judge engine of a job slot: started on first use in the slot's judge bundle, kept
    for the next stage or job on the slot (a judge takes seconds to load and its weights
    never change), replaced when another judge model is asked for, killed with the slot."""

    def __init__(self, placement=None):
        self.placement, self.actor, self.key = placement, None, None

    def get(self, model_dir, config: VLLMJudge):
        key = (str(model_dir), config.model_dump_json())
        if self.actor is not None and self.key != key:
            self.close()
        if self.actor is None:
            self.actor, self.key = JudgeEngine.remote_actor(str(model_dir), config, self.placement), key
        return self.actor

    def lost(self) -> None:
        self.actor = None

    def close(self) -> None:
        if self.actor is not None:
            ray.kill(self.actor)
        self.actor = None


class JudgeEngine:
    """Wraps `vllm.LLM`. Create with `JudgeEngine.remote_actor(...)`."""

    def __init__(self, model_dir: str, config: VLLMJudge):
        from vllm import LLM

        started = time.perf_counter()
        self.llm = LLM(
            model=model_dir,
            dtype=config.dtype,
            seed=config.seed,
            enable_prefix_caching=True,
            # compact JSON: no free whitespace between tokens, so replies take fewer decode steps
            structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True},
            **judge_args(config),
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = config.max_model_len
        self.start_seconds = time.perf_counter() - started
        self.requests = 0
        self.busy_seconds = 0.0

    @classmethod
    def remote_actor(cls, model_dir: str, config: VLLMJudge, placement=None):
        options = dict(
            num_cpus=config.num_cpus,
            num_gpus=config.num_gpus,
            max_concurrency=1,
            runtime_env={"env_vars": judge_env()},
            **(placement.options() if placement else {}),
        )
        return ray.remote(cls).options(**options).remote(model_dir, config)

    def info(self) -> dict:
        return {"requests": self.requests, "start_seconds": self.start_seconds, "busy_seconds": self.busy_seconds}

    def chat(self, requests: list[dict]) -> list[dict]:
        """Each request: {messages, schema (or None), max_tokens, temperature, logprobs (top-k or 0)}.
        Each reply: {text, finish_reason, tokens, top (per token {text: logprob}, or None)}
        or {error} for a request whose prompt does not fit."""
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        started = time.perf_counter()
        prompts, params, fits = [], [], []
        for req in requests:
            ids = render_judge_prompt(self.tokenizer, req["messages"])  # the judged text is text
            room = self.max_model_len - len(ids)
            fits.append(room >= 8)
            if not fits[-1]:
                continue
            structured = StructuredOutputsParams(json=req["schema"]) if req.get("schema") else None
            prompts.append({"prompt_token_ids": list(ids)})
            params.append(
                SamplingParams(
                    max_tokens=min(req["max_tokens"], room),
                    temperature=req["temperature"],
                    logprobs=req.get("logprobs") or None,
                    structured_outputs=structured,
                )
            )
        outputs = iter(self.llm.generate(prompts, params, use_tqdm=False) if prompts else [])
        self.requests += len(requests)
        self.busy_seconds += time.perf_counter() - started
        return [
            _reply(next(outputs).outputs[0]) if ok else {"error": "prompt too long for the judge's max_model_len"}
            for ok in fits
        ]


def _reply(out) -> dict:
    top = None
    if out.logprobs is not None:
        top = [{lp.decoded_token: lp.logprob for lp in step.values()} for step in out.logprobs]
    tokens = [step[t].decoded_token for step, t in zip(out.logprobs, out.token_ids)] if top is not None else None
    return {"text": out.text, "finish_reason": str(out.finish_reason), "tokens": tokens, "top": top}
