"""A vLLM engine as a Ray actor: token ids in, sampled token ids with per-token
behaviour logprobs out; new weights loaded in place, without a restart.

The engine runs in-process in its actor (no extra engine-core process), so a weight
update is a direct call on the worker: either the packet comes zero-copy out of Ray's
object store (`reload_weights` copies them into the model), or trainer rank 0 drives vLLM's
own weight-transfer engine (`transfer_*`: the worker receives bucket after bucket over the
backend's group and loads each in place; transfer.py). Logprobs are
the processed ones (after temperature), the distribution the tokens were drawn from.
What depends on the device (CPU or GPU) is decided in `vllm_args`, from the engine's
resources.
"""

from __future__ import annotations

import os
import time

import ray

from posttrain.config import RolloutConfig
from posttrain.config.resources import Device, device_of, transfer_backend
from posttrain.rollout.cores import pin_to_cores
from posttrain.rollout.weights import WeightPacket, unpack_tensors
from posttrain.types import Completion, GenerationRequest, SamplingSettings


def engine_env(config: RolloutConfig) -> dict[str, str]:
    threads = {"OMP_NUM_THREADS": str(config.threads)} if config.threads else {}
    return {
        **threads,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
        "VLLM_NO_USAGE_STATS": "1",
        # The model runner is pinned to V1 on every device: vLLM 0.32 would pick Model Runner V2 on
        # GPU for dense Llama/Qwen/Mistral, which the CPU suite never runs. V1's GPUModelRunner is the
        # class the CPU runner subclasses, with the `reload_weights` that weight sync calls.
        "VLLM_USE_V2_MODEL_RUNNER": "0",
        "VLLM_CONFIGURE_LOGGING": os.environ.get("VLLM_CONFIGURE_LOGGING", "1"),
        "TOKENIZERS_PARALLELISM": "false",
    }


def vllm_args(
    device: Device,
    max_model_len: int,
    enforce_eager: bool,
    gpu_memory_utilization: float,
    kv_cache_gib: float,
    tensor_parallel: int = 1,
) -> dict:
    """The `vllm.LLM` arguments that depend on the device. GPU: the KV cache is what
    `gpu_memory_utilization` leaves, and tensor-parallel workers run as processes of the
    engine actor on the GPUs it holds (vLLM's Ray executor would ask the slot's placement
    group for bundles it has not got, and wait forever). CPU: the KV cache is exactly
    `kv_cache_gib` (fractions too; VLLM_CPU_KVCACHE_SPACE takes whole GiB)."""
    args = {"max_model_len": max_model_len, "enforce_eager": enforce_eager, "tensor_parallel_size": tensor_parallel}
    if device == "cuda":
        args["gpu_memory_utilization"] = gpu_memory_utilization
        if tensor_parallel > 1:
            args["distributed_executor_backend"] = "mp"
    else:
        args["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
    return args


def _reload(worker, packet: WeightPacket) -> int:
    worker.reload_weights(weights_iterator=unpack_tensors(packet))
    return packet.version


def _runner(worker) -> str:
    """The class of a worker's model runner, module-qualified (V1 is pinned: `engine_env`)."""
    runner = type(worker.model_runner)
    return f"{runner.__module__}.{runner.__qualname__}"


class RolloutEngine:
    """Wraps `vllm.LLM`. Create with `RolloutEngine.remote_actor(...)`."""

    def __init__(self, model_dir: str, config: RolloutConfig, dtype: str, seed: int, max_logprobs: int = 20):
        self.cores = pin_to_cores(config.cores)  # before vLLM and torch start their threads
        from vllm import LLM

        started = time.perf_counter()
        self.device = device_of(config.num_gpus)
        backend = transfer_backend(config)
        if backend == "gloo":  # posttrain's own backend: registered before the worker looks it up
            from posttrain.rollout.gloo_transfer import register

            register()
        self.llm = LLM(
            model=model_dir,
            dtype=dtype,
            seed=seed,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,
            max_logprobs=max_logprobs,  # a teacher's top-k (MOPD's distill_topk); vLLM's default 20 otherwise
            weight_transfer_config={"backend": backend},
            **vllm_args(
                self.device,
                config.max_model_len,
                config.enforce_eager,
                config.gpu_memory_utilization,
                config.kv_cache_gib,
                config.tensor_parallel,
            ),
        )
        self.max_model_len = config.max_model_len
        self.version = 0
        self.start_seconds = time.perf_counter() - started
        self.busy_seconds = 0.0
        self.updating = False  # a weight update started and not finished: the weights are a mix
        self._requests = 0

    @classmethod
    def remote_actor(
        cls,
        model_dir: str,
        config: RolloutConfig,
        dtype: str,
        seed: int,
        name: str | None = None,
        placement=None,
        max_logprobs: int = 20,
    ):
        options = dict(
            num_cpus=config.num_cpus,
            num_gpus=config.num_gpus,
            max_concurrency=1,
            runtime_env={"env_vars": engine_env(config)},
            **(placement.options() if placement else {}),
        )
        if name:
            options["name"] = name
        return ray.remote(cls).options(**options).remote(model_dir, config, dtype, seed, max_logprobs)

    def info(self) -> dict:
        if self.updating:
            raise RuntimeError("this engine's weight update was cut short: its weights are a mix, replace it")
        return {
            "version": self.version,
            "start_seconds": self.start_seconds,
            "busy_seconds": self.busy_seconds,
            "cores": self.cores,
            "model_runner": self._runner_name(),
        }

    def _runner_name(self) -> str:
        if getattr(self, "runner_name", None) is None:
            self.runner_name = self.llm.collective_rpc(_runner)[0]
        return self.runner_name

    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[list[Completion]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        started = time.perf_counter()
        prompts, params = [], []
        for req in requests:
            room = self.max_model_len - len(req.prompt_ids)
            if room < 1:
                raise ValueError(
                    f"prompt of {len(req.prompt_ids)} tokens leaves no room under max_model_len={self.max_model_len}"
                )
            prompts.append(TokensPrompt(prompt_token_ids=list(req.prompt_ids)))
            params.append(
                SamplingParams(
                    n=req.n,
                    max_tokens=min(req.max_tokens, room),
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    logprobs=0,
                    detokenize=True,
                )
            )
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        self.busy_seconds += time.perf_counter() - started
        return [[_completion(c) for c in out.outputs] for out in outputs]

    def generate_partial(
        self, requests: list[GenerationRequest], sampling: SamplingSettings, finish_target: int
    ) -> list[Completion]:
        """One sample per request; stops once `finish_target` of them have finished and
        returns the rest cut where they stand (finish_reason "cut"), with the tokens and
        logprobs generated so far. Text is left to the caller (it decodes whole responses)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        started = time.perf_counter()
        engine = self.llm.llm_engine
        ids = []
        for req in requests:
            room = min(req.max_tokens, self.max_model_len - len(req.prompt_ids))
            if room < 1:
                raise ValueError(
                    f"prompt of {len(req.prompt_ids)} tokens leaves no room under max_model_len={self.max_model_len}"
                )
            self._requests += 1
            ids.append(f"p{self._requests}")
            params = SamplingParams(
                n=1,
                max_tokens=room,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                logprobs=0,
                detokenize=False,
                output_kind=RequestOutputKind.DELTA,
            )
            engine.add_request(ids[-1], TokensPrompt(prompt_token_ids=list(req.prompt_ids)), params)
        tokens = {i: [] for i in ids}
        logprobs = {i: [] for i in ids}
        reasons: dict[str, str] = {}
        while engine.has_unfinished_requests() and len(reasons) < finish_target:
            for out in engine.step():
                c = out.outputs[0]
                tokens[out.request_id] += c.token_ids
                logprobs[out.request_id] += [step[t].logprob for step, t in zip(c.logprobs or [], c.token_ids)]
                if out.finished:
                    reasons[out.request_id] = str(c.finish_reason)
        cut = [i for i in ids if i not in reasons]
        if cut:
            engine.abort_request(cut)
        self.busy_seconds += time.perf_counter() - started
        return [Completion(tuple(tokens[i]), tuple(logprobs[i]), "", reasons.get(i, "cut")) for i in ids]

    def update_weights(self, packet: WeightPacket) -> int:
        """Load new weights in place; returns the version now served."""
        versions = self.llm.collective_rpc(_reload, args=(packet,))
        self.llm.reset_prefix_cache()
        self.version = versions[0]
        return self.version

    def transfer_workers(self) -> int:
        """This engine's workers: its ranks in a weight-transfer group."""
        return self.llm.llm_engine.vllm_config.parallel_config.world_size

    def transfer_init(self, init_info: dict) -> None:
        """Join trainer rank 0's weight transfer (vLLM's `init_weight_transfer_engine`),
        leaving the group it was in: a group is formed again whenever its engines change."""
        self.llm.collective_rpc("shutdown_weight_transfer_engine")
        self.llm.collective_rpc("init_weight_transfer_engine", kwargs={"init_info": init_info})

    def transfer_start(self) -> None:
        self.updating = True
        self.llm.collective_rpc("start_weight_update")

    def transfer_update(self, update_info) -> None:
        """Receive one bucket (or, as the backend sends, the whole push) and load it."""
        self.llm.collective_rpc("update_weights", kwargs={"update_info": update_info})

    def transfer_finish(self, version: int) -> int:
        """Close the update; returns the version now served."""
        self.llm.collective_rpc("finish_weight_update")
        self.llm.reset_prefix_cache()
        self.updating = False
        self.version = version
        return version

    def load_folder(self, folder: str, version: int) -> int:
        """Serve the weights of a saved model folder (eval of a checkpoint), in place."""
        import json
        from pathlib import Path

        from safetensors.torch import load_file

        from posttrain.rollout.weights import pack_state_dict

        state: dict = {}
        for path in sorted(Path(folder).glob("*.safetensors")):
            state.update(load_file(str(path)))
        if not state:
            raise FileNotFoundError(f"no *.safetensors weights in {folder}")
        tied = bool(json.loads((Path(folder) / "config.json").read_text()).get("tie_word_embeddings"))
        packet = pack_state_dict(state, version, tied)
        return self.update_weights(packet)

    def memory_bytes(self) -> int:
        """Resident memory of this actor and the processes it started (vLLM's engine core)."""
        import psutil

        me = psutil.Process()
        total = me.memory_info().rss
        for child in me.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total

    def prompt_logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        """Logprob of each token given the ones before it (the first has none): a scoring pass."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in token_ids], params, use_tqdm=False)
        return [[d[t].logprob for d, t in zip(o.prompt_logprobs[1:], ids[1:])] for o, ids in zip(outs, token_ids)]

    def prompt_topk(self, token_ids: list[list[int]], response_lens: list[int], k: int) -> list[tuple]:
        """Per sequence, over its last `response_lens` tokens: each token's logprob given the
        ones before it, and the k most likely tokens at its position with their logprobs
        (arrays [response tokens, k]). The engine needs max_logprobs >= k."""
        import numpy as np
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, prompt_logprobs=k, temperature=1.0, detokenize=False)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in token_ids], params, use_tqdm=False)
        width = min(k, self.llm.llm_engine.model_config.get_vocab_size())
        result = []
        for out, ids, n in zip(outs, token_ids, response_lens):
            steps = out.prompt_logprobs[len(ids) - n :]
            top = [sorted(d.items(), key=lambda item: -item[1].logprob)[:width] for d in steps]
            result.append(
                (
                    [d[t].logprob for d, t in zip(steps, ids[len(ids) - n :])],
                    np.array([[tok for tok, _ in row] for row in top], dtype=np.int32).reshape(n, width),
                    np.array([[lp.logprob for _, lp in row] for row in top], dtype=np.float32).reshape(n, width),
                )
            )
        return result


def _completion(out) -> Completion:
    ids = tuple(out.token_ids)
    logprobs = tuple(step[tok].logprob for step, tok in zip(out.logprobs or [], ids))
    return Completion(token_ids=ids, logprobs=logprobs, text=out.text, finish_reason=str(out.finish_reason))
