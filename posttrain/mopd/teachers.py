"""Teachers: inference-only Ray workers that score the student's tokens, and the pool that
keeps them within a memory budget.

A teacher computes log pi_T(y_t | x, y_<t) for every token of a sequence: a forward pass
in transformers (`hf`) or a prompt-logprobs pass in a vLLM engine (`vllm`). With `hf`,
teachers live in one shared worker process (a `TeacherHost`), so the runtime's memory
(Python, torch, transformers: about 0.5 GiB) is paid once rather than per teacher; with
`vllm`, each teacher is its own engine actor. The pool loads a teacher when a batch needs
it and, when the next one would not fit in `memory_gib` (or `max_resident` are loaded), unloads the least recently used
first. Requests are batched by teacher, and teachers already resident are served first,
so a step loads each missing teacher once. What a worker really takes is measured after
every load and unload (its process's resident memory) and counted whenever it is more
than predicted.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from pathlib import Path

import ray

from posttrain.config import RolloutConfig, TeacherPoolConfig
from posttrain.config.resources import device_of

GIB = 2**30
LOAD_TIMEOUT_S = 600
SCORE_TIMEOUT_S = 600


def process_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class TeacherHost:
    """One worker process holding any number of teachers (transformers models), each
    scoring token sequences. Create with `remote_actor`."""

    def __init__(self, dtype: str, micro_batch_tokens: int, device: str = "cpu"):
        import torch

        torch.set_num_threads(1)
        self.dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        self.device = device  # from the actor's resources (config.resources.device_of)
        self.models: dict[str, object] = {}
        self.micro_batch_tokens = micro_batch_tokens

    @classmethod
    def remote_actor(cls, dtype: str, config: TeacherPoolConfig):
        options = dict(
            num_cpus=config.num_cpus,
            num_gpus=config.num_gpus,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}},
        )
        return ray.remote(cls).options(**options).remote(dtype, config.micro_batch_tokens, device_of(config.num_gpus))

    def load(self, teacher_id: str, model_dir: str) -> int:
        """Load a teacher; returns the process's resident bytes afterwards."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=self.dtype)
        self.models[teacher_id] = model.to(self.device).eval()
        return process_bytes()

    def unload(self, teacher_id: str) -> int:
        """Drop a teacher and hand its memory back to the OS; returns resident bytes."""
        import ctypes
        import gc

        import torch

        del self.models[teacher_id]
        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)  # glibc keeps freed heap pages otherwise
        except OSError:
            pass
        return process_bytes()

    def memory_bytes(self) -> int:
        return process_bytes()

    def prompt_logprobs(self, teacher_id: str, token_ids: list[list[int]]) -> list[list[float]]:
        """Logprob of each token given the ones before it (the first has none)."""
        out: list[list[float] | None] = [None] * len(token_ids)
        for i, ids, logp in self._forward(teacher_id, token_ids):
            out[i] = logp.gather(-1, ids[1:, None])[:, 0].cpu().tolist()
        return out  # type: ignore[return-value]

    def prompt_topk(self, teacher_id: str, token_ids: list[list[int]], response_lens: list[int], k: int) -> list[tuple]:
        """Per sequence, over its last `response_lens` tokens: each token's logprob given the
        ones before it, and the k most likely tokens at its position with their logprobs
        (numpy arrays [response tokens, k])."""
        out: list[tuple | None] = [None] * len(token_ids)
        for i, ids, logp in self._forward(teacher_id, token_ids):
            n = response_lens[i]
            window = logp[len(ids) - 1 - n :]
            top = window.topk(min(k, window.shape[-1]), dim=-1)
            out[i] = (
                window.gather(-1, ids[len(ids) - n :, None])[:, 0].cpu().tolist(),
                top.indices.int().cpu().numpy(),
                top.values.cpu().numpy(),
            )
        return out  # type: ignore[return-value]

    def _forward(self, teacher_id: str, token_ids: list[list[int]]):
        """(index, token ids, log softmax [len - 1, vocab] in fp32) per sequence, batched
        longest first within `micro_batch_tokens`."""
        import torch

        model = self.models[teacher_id]
        order = sorted(range(len(token_ids)), key=lambda i: -len(token_ids[i]))
        start = 0
        while start < len(order):
            width = len(token_ids[order[start]])
            rows = max(1, self.micro_batch_tokens // max(width, 1))
            chunk = order[start : start + rows]
            ids = torch.zeros(len(chunk), width, dtype=torch.long)
            attn = torch.zeros(len(chunk), width, dtype=torch.long)
            for r, i in enumerate(chunk):
                ids[r, : len(token_ids[i])] = torch.tensor(token_ids[i])
                attn[r, : len(token_ids[i])] = 1
            ids = ids.to(self.device)
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=attn.to(self.device)).logits
                for r, i in enumerate(chunk):
                    n = len(token_ids[i])
                    yield i, ids[r, :n], torch.log_softmax(logits[r, : n - 1].float(), dim=-1)
            start += rows


def teacher_engine_config(pool: TeacherPoolConfig, rollout: RolloutConfig | None) -> RolloutConfig:
    """A vllm teacher's engine: the rollout engines' settings (context length, cache, eager)
    on the teacher pool's own resources, one GPU or a share of one (tensor_parallel 1)."""
    return (rollout or RolloutConfig()).model_copy(
        update={
            "engines": 1,
            "num_gpus": pool.num_gpus,
            "num_cpus": pool.num_cpus,
            "gpu_memory_utilization": pool.gpu_memory_utilization,
            "tensor_parallel": 1,
        }
    )


def weights_bytes(model_dir: str | Path, dtype: str) -> int:
    """Bytes of the model's parameters once loaded in `dtype`, from the safetensors headers."""
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise ValueError(f"{model_dir}: no *.safetensors weights")
    count = 0
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                n = 1
                for dim in f.get_slice(key).get_shape():
                    n *= dim
                count += n
    return count * (2 if dtype == "bfloat16" else 4)


def weights_sha256(model_dir: str | Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


class TeacherPool:
    """Teachers within `memory_gib`, least recently used unloaded first.

    Counted memory: with `hf`, the shared host's runtime (`overhead`, raised to what is
    measured) plus each resident teacher's weights, or the host's measured resident memory
    when that is more; with `vllm`, each engine's weights plus `overhead`, or its measured
    memory when more."""

    def __init__(
        self,
        checkpoints: dict[str, str],
        config: TeacherPoolConfig,
        dtype: str,
        rollout: RolloutConfig | None = None,
        max_logprobs: int = 20,
    ):
        """`max_logprobs`: the largest top-k that `topk` will ask (vllm engines are started for it)."""
        self.checkpoints, self.config, self.dtype, self.rollout = checkpoints, config, dtype, rollout
        self.max_logprobs = max_logprobs
        self.shared = config.backend == "hf"
        self.budget = int(config.memory_gib * GIB)
        self.weights = {tid: weights_bytes(path, dtype) for tid, path in checkpoints.items()}
        self.overhead = int(config.overhead_gib * GIB)  # raised to the largest measured
        self.resident: OrderedDict[str, object] = OrderedDict()  # id -> actor (hf: the host), LRU first
        self.measured: dict[str, int] = {}  # "host" (hf) or a teacher id (vllm) -> last measured resident bytes
        self.host = None
        self.stats = {"loads": 0, "unloads": 0, "load_s": 0.0, "peak_bytes": 0}
        for tid in checkpoints:
            if self.predicted(tid) > self.budget:
                raise ValueError(
                    f"teacher {tid} needs about {self.predicted(tid) / GIB:.2f} GiB, more than "
                    f"teacher_pool.memory_gib={config.memory_gib}"
                )

    def predicted(self, teacher_id: str) -> int:
        """What one teacher takes with nothing else resident."""
        return self.weights[teacher_id] + self.overhead

    @property
    def resident_bytes(self) -> int:
        if not self.shared:
            return sum(max(self.measured.get(tid, 0), self.predicted(tid)) for tid in self.resident)
        if self.host is None:
            return 0
        counted = self.overhead + sum(self.weights[tid] for tid in self.resident)
        return max(counted, self.measured.get("host", 0))

    def _needed(self, teacher_id: str) -> int:
        """Counted bytes once `teacher_id` is loaded too."""
        if self.shared:
            counted = self.overhead + sum(self.weights[t] for t in self.resident) + self.weights[teacher_id]
            return max(counted, self.measured.get("host", 0) + self.weights[teacher_id])
        return self.resident_bytes + self.predicted(teacher_id)

    def logprobs(self, requests: dict[str, list[list[int]]]) -> dict[str, list[list[float]]]:
        """Per teacher, the logprobs of its sequences; resident teachers first."""
        return self._each(requests, lambda tid: ("prompt_logprobs", (requests[tid],)))

    def topk(self, requests: dict[str, list[tuple[list[int], int]]], k: int) -> dict[str, list[tuple]]:
        """Per teacher, for each (token ids, response length): the response tokens' logprobs
        and the teacher's top-k at each response position (TeacherHost.prompt_topk)."""
        if not self.shared and k > self.max_logprobs:
            raise ValueError(f"top-{k} asked of vllm teachers started for at most {self.max_logprobs}")
        return self._each(
            requests,
            lambda tid: ("prompt_topk", ([ids for ids, _ in requests[tid]], [n for _, n in requests[tid]], k)),
        )

    def _each(self, requests: dict, call) -> dict:
        """`call(tid)` -> (method, args) run on each teacher's actor, resident ones first."""
        order = sorted(requests, key=lambda tid: tid not in self.resident)
        out = {}
        for tid in order:
            actor = self._acquire(tid)
            method, args = call(tid)
            remote = getattr(actor, method).remote
            out[tid] = ray.get(remote(tid, *args) if self.shared else remote(*args), timeout=SCORE_TIMEOUT_S)
        return out

    def _acquire(self, teacher_id: str):
        if teacher_id in self.resident:
            self.resident.move_to_end(teacher_id)
            return self.resident[teacher_id]
        while self.resident and (
            self._needed(teacher_id) > self.budget or len(self.resident) >= (self.config.max_resident or 1 << 30)
        ):
            self._unload(next(iter(self.resident)))
        started = time.perf_counter()
        actor = self._start(teacher_id)
        self.stats["load_s"] += time.perf_counter() - started
        self.stats["loads"] += 1
        self.resident[teacher_id] = actor
        self.stats["peak_bytes"] = max(self.stats["peak_bytes"], self.resident_bytes)
        return actor

    def _start(self, teacher_id: str):
        path = self.checkpoints[teacher_id]
        if self.shared:
            if self.host is None:
                self.host = TeacherHost.remote_actor(self.dtype, self.config)
            measured = ray.get(self.host.load.remote(teacher_id, path), timeout=LOAD_TIMEOUT_S)
            self.measured["host"] = measured
            on_host = sum(self.weights[t] for t in self.resident) + self.weights[teacher_id]
            self.overhead = max(self.overhead, measured - on_host)
            return self.host
        from posttrain.rollout.engine import RolloutEngine

        actor = RolloutEngine.remote_actor(
            path, teacher_engine_config(self.config, self.rollout), self.dtype, seed=0, max_logprobs=self.max_logprobs
        )
        measured = ray.get(actor.memory_bytes.remote(), timeout=LOAD_TIMEOUT_S)
        self.overhead = max(self.overhead, measured - self.weights[teacher_id])
        self.measured[teacher_id] = measured
        return actor

    def _unload(self, teacher_id: str) -> None:
        actor = self.resident.pop(teacher_id)
        if self.shared:
            self.measured["host"] = ray.get(actor.unload.remote(teacher_id), timeout=LOAD_TIMEOUT_S)
        else:
            ray.kill(actor)
            self.measured.pop(teacher_id, None)
        self.stats["unloads"] += 1

    def measured_bytes(self) -> int:
        """What the teachers' processes hold now, asked of them."""
        if self.shared:
            actors = [self.host] if self.host is not None else []
        else:
            actors = list(self.resident.values())
        return sum(ray.get([a.memory_bytes.remote() for a in actors], timeout=LOAD_TIMEOUT_S)) if actors else 0

    def metrics(self) -> dict[str, float]:
        return {
            "teacher_pool/loads": float(self.stats["loads"]),
            "teacher_pool/unloads": float(self.stats["unloads"]),
            "teacher_pool/load_s": self.stats["load_s"],
            "teacher_pool/resident": float(len(self.resident)),
            "teacher_pool/resident_gib": self.resident_bytes / GIB,
            "teacher_pool/peak_gib": self.stats["peak_bytes"] / GIB,
        }

    def manifest(self) -> list[dict]:
        return [
            {"teacher_id": tid, "checkpoint": str(Path(path).resolve()), "sha256": weights_sha256(path)}
            for tid, path in self.checkpoints.items()
        ]

    def close(self) -> None:
        for tid in list(self.resident):
            if not self.shared:
                self._unload(tid)
        self.resident.clear()
        if self.host is not None:
            ray.kill(self.host)
            self.host = None


def same_tokenizer(student_dir: str | Path, teacher_dir: str | Path) -> bool:
    """Token ids must mean the same in both: compare vocab size and the tokenizer file."""

    def facts(folder):
        folder = Path(folder)
        config = json.loads((folder / "config.json").read_text())
        tok = folder / "tokenizer.json"
        return config.get("vocab_size"), hashlib.sha256(tok.read_bytes()).hexdigest() if tok.exists() else None

    return facts(student_dir) == facts(teacher_dir)
