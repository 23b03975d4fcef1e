"""One DeepSpeed data-parallel rank as a Ray actor.

The trainer is algorithm-blind: it receives `TrainSequence`s with per-token advantages
and masks, and a `LossSpec` naming the loss term (`pg` or `nll`). Gradient accumulation
over micro-batches is ours (DeepSpeed's unmanaged mode), so batches of any size train
with an exact token-level mean over the whole global batch:

    loss_rank = sum_{local tokens} l_t / N_global * world_size

because DeepSpeed averages gradients over ranks. With PPO minibatches each optimizer
step is such a mean over its own minibatch. A rank's device (its GPU, else the CPU) is
decided once, from its resources; inputs, the reference model and every collective's
tensors live there.
"""

from __future__ import annotations

import inspect
import os
import time
from dataclasses import fields
from pathlib import Path

from posttrain.algo.schedule import Decay, lr_factor
from posttrain.config import TrainerConfig
from posttrain.rollout.cores import pin_to_cores
from posttrain.train import checkpoint, export, release
from posttrain.train.batching import PAD_SEQUENCE, collate_micro_batch, micro_batches
from posttrain.train.distributed import group_backend, prepare_device, rank_device
from posttrain.train.optim import build_optimizer, dither_master_weights, zero_settings
from posttrain.train.sync import WeightSender
from posttrain.types import LoadedModel, LossSpec, TrainSequence, TrainStepResult, TrainSums

SUM_KEYS = tuple(f.name for f in fields(TrainSums))  # what `sums` accumulates, in TrainSums' order


class TrainerWorker(WeightSender):
    """Create with `TrainerWorker.remote_actor(...)`; all ranks must get the same calls."""

    bias_dtype = None  # the dtype of shared-prompt attention biases (the model's); set by `load`

    def __init__(self, rank: int, world_size: int, master_port: int | None, config: TrainerConfig, seed: int):
        """With `master_port`, the rank joins its group at once on this machine (127.0.0.1);
        without, it waits for `join` (a group whose ranks may sit on several nodes)."""
        self.cores = pin_to_cores(config.cores)  # before torch starts its threads
        import torch

        torch.set_num_threads(config.threads)
        torch.manual_seed(seed + rank)
        self.device = rank_device(config.num_gpus)
        self.rank, self.world_size, self.config, self.seed = rank, world_size, config, seed
        self.engine = None
        self.ref_model = None
        if master_port is not None:
            self.join(("127.0.0.1", master_port))

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0: the address the group meets at, this node's IP and a port free on it
        (picked here: the driver may be another machine)."""
        import socket

        import ray

        host = ray.util.get_node_ip_address()
        with socket.socket() as sock:
            sock.bind((host, 0))
            return host, sock.getsockname()[1]

    def join(self, address: tuple[str, int]) -> dict:
        """Join the process group at rank 0's `address` (host, port); returns where this rank
        runs (its node, for the log and the tests)."""
        import deepspeed

        host, port = address
        os.environ.update(
            MASTER_ADDR=host,
            MASTER_PORT=str(port),
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_RANK="0" if self.config.num_gpus else str(self.rank),
        )
        prepare_device(self.device)
        deepspeed.init_distributed(dist_backend=group_backend(self.device))
        return {"rank": self.rank, "node_id": _node_id(), "address": host}

    @classmethod
    def remote_actor(
        cls,
        rank: int,
        world_size: int,
        master_port: int | None,
        config: TrainerConfig,
        seed: int,
        env: dict,
        placement=None,
    ):
        import ray

        options = dict(
            num_cpus=config.num_cpus,
            num_gpus=config.num_gpus,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": str(config.threads), **env}},
            **(placement.options() if placement else {}),
        )
        return ray.remote(cls).options(**options).remote(rank, world_size, master_port, config, seed)

    # ------------------------------------------------------------ setup

    def load(
        self,
        model_dir: str,
        dtype: str,
        lr: float,
        warmup_steps: int,
        kl_beta: float = 0.0,
        resume: bool = False,
        ref_dir: str | None = None,
        decay: Decay = "constant",
        total_steps: int = 0,
        min_lr_ratio: float = 1.0,
    ) -> LoadedModel:
        """(Re)build the DeepSpeed engine from a model folder; with `resume`, the folder is a
        checkpoint of ours and its optimizer and schedule state are restored too. With
        `kl_beta`, the reference model is `ref_dir` (the stage's starting weights: after a
        resume, not the checkpoint), else `model_dir`. The lr schedule: algo/schedule.py."""
        import deepspeed
        import torch
        from transformers import AutoModelForCausalLM

        release.release_engines(self, "engine", "ref_model")  # the previous stage's, before this one's is built
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        if kl_beta > 0:
            self.ref_model = self._reference(ref_dir or model_dir, dtype)
        self.model_dir, self.dtype = model_dir, dtype
        self.keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._check_shared_prompts(model)
        self.bias_dtype = getattr(torch, dtype)  # what the attention computes in: its mask's dtype
        if self.config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.tied = bool(getattr(model.config, "tie_word_embeddings", False))
        optimizer = build_optimizer(model, self.config, lr)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_factor(step, warmup_steps, total_steps, decay, min_lr_ratio)
        )
        self.engine, *_ = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=schedule, config=self._ds_config(dtype)
        )
        if torch.device(self.engine.device) != self.device:
            raise RuntimeError(f"DeepSpeed put the model on {self.engine.device}, the rank's device is {self.device}")
        if resume:
            path, _ = self.engine.load_checkpoint(
                str(Path(model_dir) / "deepspeed"),
                tag="state",
                load_optimizer_states=True,
                load_lr_scheduler_states=True,
            )
            if path is None:
                raise FileNotFoundError(f"no DeepSpeed state in {model_dir}/deepspeed")
        elif dtype != "float32":  # fp32 master weights start on the bf16 grid: see dither_master_weights
            dither_master_weights(self.engine, self.seed)
        return LoadedModel(parameters=sum(p.numel() for p in model.parameters()), tied_embeddings=self.tied)

    def _reference(self, folder: str, dtype: str):
        """The frozen reference model, read in the training dtype (no fp32 copy) and, under
        ZeRO-3, partitioned over the ranks like the policy (a DeepSpeed engine without an
        optimizer: each rank holds 1/N of it and gathers a layer to run it)."""
        import deepspeed
        import torch
        from transformers import AutoModelForCausalLM

        torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype).eval().requires_grad_(False)
        if self.config.zero_stage != 3:
            return ref.to(self.device)
        config = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {"stage": 3},
            "bf16": {"enabled": dtype == "bfloat16"},
            "steps_per_print": 10**9,
        }
        engine, *_ = deepspeed.initialize(model=ref, config=config)
        engine.eval()  # DeepSpeed's eval() returns None
        return engine

    def _check_shared_prompts(self, model) -> None:
        """`share_prompts` gives the model a 4-D additive mask, which SDPA and eager attention
        take; other kernels (flash attention) take no such mask."""
        attention = getattr(model.config, "_attn_implementation", "sdpa")
        if self.config.share_prompts and attention not in ("sdpa", "eager"):
            raise ValueError(
                f"trainer.share_prompts needs sdpa or eager attention (4-D masks); the model uses {attention}"
            )

    def _ds_config(self, dtype: str) -> dict:
        zero = {"stage": self.config.zero_stage, **zero_settings(self.config)}
        if self.config.offload_optimizer and self.config.zero_stage >= 2:
            zero["offload_optimizer"] = {"device": "cpu"}
        return {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "managed_gradient_accumulation": False,
            "gradient_clipping": self.config.grad_clip,
            "zero_optimization": zero,
            "bf16": {"enabled": dtype == "bfloat16"},
            # fp32 master weights are ZeRO's own; gradients accumulate in fp32 too (default: model dtype)
            **({"data_types": {"grad_accum_dtype": "fp32"}} if dtype == "bfloat16" else {}),
            "zero_allow_untested_optimizer": True,
            # offload_optimizer with our client optimizers (AdamW, Muon): else only DeepSpeed's CPU Adam
            "zero_force_ds_cpu_optimizer": False,
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }

    # ------------------------------------------------------------ training

    def train_step(self, shard: list[TrainSequence], spec: LossSpec, global_tokens: int) -> TrainStepResult:
        """One optimizer step over this rank's shard: `train_minibatches` with one minibatch."""
        return self.train_minibatches([shard], spec, [global_tokens])

    def train_minibatches(
        self, shards: list[list[TrainSequence]], spec: LossSpec, global_tokens: list[int]
    ) -> TrainStepResult:
        """PPO over this rank's part of each minibatch: `spec.epochs` passes, one optimizer
        step per minibatch, each an exact token mean over its minibatch on all ranks.
        logp_old is the policy before the first step: with one minibatch and one epoch, the
        training forward pass itself (ratio 1); otherwise one no-grad pass first. Returns,
        per sequence (shards in order), logp_old of its response tokens (logp/mismatch) and
        their off-policy weights, and sums in which every token counts once (the loss is the
        token mean over the batch, averaged over epochs)."""
        started = time.perf_counter()
        plans = [self._aligned_micro_batches(shard) for shard in shards]
        sums = dict.fromkeys(SUM_KEYS, 0.0)
        records = [{"logp": [[] for _ in shard], "weights": [[] for _ in shard]} for shard in shards]
        before = None
        if (spec.minibatches, spec.epochs) != (1, 1):
            before = [self._policy_before(s, p, spec, sums, r) for s, p, r in zip(shards, plans, records)]
        self.engine.train()
        total = max(sum(global_tokens), 1) * spec.epochs
        skipped, applied, norms = False, 0, []
        for _ in range(spec.epochs):
            for m, (shard, plan) in enumerate(zip(shards, plans)):
                olds = before[m] if before is not None else None
                step_skipped, norm = self._minibatch_step(
                    shard, plan, spec, global_tokens[m], total, sums, olds, records[m]
                )
                skipped, applied = skipped or step_skipped, applied + (not step_skipped)
                norms += [norm] if not step_skipped else []
        return TrainStepResult(
            logp=[values for r in records for values in r["logp"]],
            weights=[values for r in records for values in r["weights"]],
            sums=TrainSums(**sums),
            grad_norm=sum(norms) / len(norms) if norms else float("nan"),
            skipped=skipped,
            applied=applied,
            seconds=time.perf_counter() - started,
        )

    def _minibatch_step(
        self, shard, plan, spec: LossSpec, tokens: int, total: int, sums: dict, olds: list | None, record: dict
    ) -> tuple[bool, float]:
        """Forward and backward of every micro-batch of one minibatch (its loss scaled to the
        token mean over the minibatch's `tokens` on all ranks), then the optimizer step.
        Without `olds` (no no-grad pass) logp_old comes from this pass and is recorded."""
        import torch

        scale = self.world_size / max(tokens, 1)
        nonfinite = False
        for k, index_mb in enumerate(plan):
            old = olds[k] if olds is not None else None
            # collated again, not kept from the no-grad pass: one micro-batch's inputs and mask
            # on the device at a time, not the whole minibatch's
            batch = self._collate([shard[i] for i in index_mb] or [PAD_SEQUENCE])
            loss, old = self._loss(batch, spec, sums, old)
            if olds is None:
                self._record(batch, index_mb, shard, old, record)
            if not torch.isfinite(loss.detach()):
                nonfinite = True
                # poison: NaN gradients make DeepSpeed's ZeRO optimizer discard the whole step
                # (its grad-norm overflow check); finite partial gradients would be applied
                loss = loss * float("nan")
            self.engine.backward(loss * scale)
            sums["loss"] += float(loss.detach()) / total
        return self._optimizer_step(nonfinite)

    def _optimizer_step(self, nonfinite: bool) -> tuple[bool, float]:
        """Step on every rank, or on none when any rank's loss was NaN or inf; (skipped, grad norm)."""
        skipped = self._any_rank(nonfinite)
        if skipped and self.config.zero_stage == 0:
            self.engine.zero_grad()  # no ZeRO optimizer to catch the NaN gradients: drop them here
        else:
            self.engine.step()
            if skipped and self.engine.was_step_applied():
                raise RuntimeError("non-finite loss, but DeepSpeed applied the step: weights are corrupt")
        grad_norm = self.engine.get_global_grad_norm()
        return skipped, float(grad_norm) if grad_norm is not None and not skipped else float("nan")

    def _policy_before(self, shard: list[TrainSequence], plan: list[list[int]], spec: LossSpec, sums, record) -> list:
        """The no-grad pass before the first minibatch step: per micro-batch its logp_old,
        off-policy weights (and reference logprobs); token sums and records."""
        import torch

        self.engine.eval()
        olds = []
        with torch.no_grad():
            for index_mb in plan:
                batch = self._collate([shard[i] for i in index_mb] or [PAD_SEQUENCE])
                logp, entropy = self._forward_logp(self.engine, batch, spec.temperature)
                old = {"logp": logp, "weights": self._token_weights(batch, logp, spec)}
                if self.ref_model is not None and spec.kl_beta > 0:
                    old["ref"] = self._forward_logp(self.ref_model, batch, spec.temperature)[0]
                self._add_token_sums(batch, old["weights"], entropy, sums)
                self._record(batch, index_mb, shard, old, record)
                olds.append(old)
        return olds

    def _any_rank(self, flag: bool) -> bool:
        return bool(self._max_over_ranks(int(flag)))

    def _max_over_ranks(self, value: int) -> int:
        """The largest `value` over the ranks (a collective: every rank must call it). Its
        tensor lives on the rank's device, which is the process group's: NCCL reduces only
        CUDA tensors, gloo CPU ones."""
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([value], device=self.device)
        if self.world_size > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def _loss(self, batch: dict, spec: LossSpec, sums: dict, old: dict | None = None) -> tuple:
        """Summed (not averaged) loss of a micro-batch. `old` holds logp_old and the
        off-policy weights from the no-grad pass; without it they come from this pass,
        which then adds the micro-batch's token sums. Returns the loss and `old`."""
        import torch

        from posttrain.algo.losses import k3_kl, nll_loss, policy_gradient_loss, token_logprobs_entropy, topk_forward_kl

        logits = self._window_logits(self.engine, batch)
        logp, entropy = token_logprobs_entropy(logits, batch["targets"], spec.temperature)
        mask = batch["loss_mask"]
        if old is None:
            old = {"logp": logp.detach(), "weights": self._token_weights(batch, logp.detach(), spec)}
            self._add_token_sums(batch, old["weights"], entropy.detach(), sums)
        if spec.kind == "pg":
            per_token, clipped = policy_gradient_loss(
                logp, old["logp"], batch["advantages"], spec.clip_eps_lo, spec.clip_eps_hi
            )
            per_token = per_token * old["weights"] - spec.entropy_coef * entropy  # the bonus: 0 unless set
            sums["clip_tokens"] += float((clipped * mask).sum()) / spec.epochs
        else:
            per_token = nll_loss(logp)
        if self.ref_model is not None and spec.kl_beta > 0:
            if "ref" not in old:
                with torch.no_grad():
                    old["ref"] = self._forward_logp(self.ref_model, batch, spec.temperature)[0]
            kl = k3_kl(logp, old["ref"])
            per_token = per_token + spec.kl_beta * kl
            sums["kl"] += float((kl.detach() * mask).sum()) / spec.epochs
        if "teacher_ids" in batch and spec.distill_coef > 0:
            distill = topk_forward_kl(logits, batch["teacher_ids"], batch["teacher_logp"], spec.temperature)
            per_token = per_token + spec.distill_coef * distill
            sums["distill_kl"] += float((distill.detach() * mask).sum()) / spec.epochs
        return (per_token * mask).sum(), old

    @staticmethod
    def _token_weights(batch: dict, logp_old, spec: LossSpec):
        """Per-token correction weights (docs/recipe.md, Partial rollouts, step 4): on stale
        tokens, and with `correct_fresh` on every sampled one (engine/trainer mismatch)."""
        import torch

        from posttrain.algo.offpolicy import offpolicy_weights

        if spec.kind != "pg":
            return torch.ones_like(logp_old)
        sampled = batch["has_engine"] * batch["loss_mask"]
        corrected = sampled if spec.correct_fresh else batch["stale"] * sampled
        return offpolicy_weights(
            spec.correction,
            logp_old,
            batch["logp_engine"],
            corrected,
            cap=spec.tis_cap,
            lo=spec.mask_lo,
            hi=spec.mask_hi,
        )

    @staticmethod
    def _add_token_sums(batch: dict, weights, entropy, sums: dict) -> None:
        import torch

        mask = batch["loss_mask"]
        stale = batch["stale"] * mask
        fresh = batch["has_engine"] * mask * (1 - batch["stale"])
        values = {
            "tokens": mask.sum(),
            "stale_tokens": stale.sum(),
            "offpolicy_weight": (weights * stale).sum(),
            "fresh_tokens": fresh.sum(),
            "fresh_weight": (weights * fresh).sum(),
            "entropy": (entropy * mask).sum(),
        }
        for key, value in zip(values, torch.stack(list(values.values())).tolist()):  # one device sync
            sums[key] += value
        sums["positions"] += batch["positions"][0]
        sums["sequence_tokens"] += batch["positions"][1]

    @staticmethod
    def _record(batch: dict, index_mb: list[int], shard: list[TrainSequence], old: dict, record: dict) -> None:
        """logp_old and the weights of each sequence's response tokens, as lists."""
        for (row, start), i in zip(batch["where"], index_mb):
            end = start + shard[i].response_len
            record["logp"][i] = old["logp"][row, start:end].tolist()
            record["weights"][i] = old["weights"][row, start:end].tolist()

    def _aligned_micro_batches(self, shard: list[TrainSequence]) -> list[list[int]]:
        """Micro-batches padded with empty ones to the largest count over ranks (ZeRO reduces
        in every backward), at least one: a minibatch of left-out sequences steps on zero."""
        c = self.config
        batches = micro_batches(shard, c.micro_batch_tokens, c.share_prompts, c.share_prompts_max_len)
        count = max(self._max_over_ranks(len(batches)), 1)
        return batches + [[] for _ in range(count - len(batches))]

    def _collate(self, seqs: list[TrainSequence]) -> dict:
        c = self.config
        return collate_micro_batch(
            seqs, self.device, c.micro_batch_tokens, c.share_prompts, c.share_prompts_max_len, self.bias_dtype
        )

    def _forward_logp(self, model, batch: dict, temperature: float):
        """Logprobs of the batch's target tokens (differentiable) and the policy's entropy
        at those positions, never upcasting the logits whole (token_logprobs_entropy)."""
        from posttrain.algo.losses import token_logprobs_entropy

        return token_logprobs_entropy(self._window_logits(model, batch), batch["targets"], temperature)

    def _window_logits(self, model, batch: dict):
        """The logits of the response window only (HF's `logits_to_keep`), model dtype."""
        import torch

        lo, hi = batch["window"]
        keep = {"logits_to_keep": torch.arange(lo, hi, device=self.device)} if self.keeps_logits else {}
        if "position_ids" in batch:
            keep["position_ids"] = batch["position_ids"]
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False, **keep
        ).logits
        return logits if self.keeps_logits else logits[:, lo:hi]

    def logprobs(self, seqs: list[TrainSequence], temperature: float = 1.0) -> list[list[float]]:
        """Logprobs of the response tokens under the current weights, no gradient."""
        import torch

        self.engine.eval()
        out: list[list[float]] = [[] for _ in seqs]
        with torch.no_grad():
            for index_mb in self._aligned_micro_batches(seqs):
                batch = self._collate([seqs[i] for i in index_mb] or [PAD_SEQUENCE])
                logp, _ = self._forward_logp(self.engine, batch, temperature)
                for (row, start), i in zip(batch["where"], index_mb):
                    out[i] = logp[row, start : start + seqs[i].response_len].tolist()
        return out

    # ------------------------------------------------------------ weights out

    def _export_bucket(self) -> int:
        """Bytes of weights one export step gathers (rollout.sync_bucket_mib, set by the group)."""
        return getattr(self, "bucket_bytes", 256 * 2**20)

    def get_weights(self, version: int):
        """Rank 0 returns a WeightPacket of the full weights (in the engine dtype), gathered
        bucket by bucket; others None. Every rank must call it."""
        state = export.host_state_dict(self.engine, self.rank, self.config.zero_stage, self._export_bucket())
        return export.weight_packet(state, version, self.tied) if self.rank == 0 else None

    def save(self, folder: str, extra: dict[str, str] | None = None) -> str | None:
        """A checkpoint folder (train/checkpoint.py); every rank writes its part, rank 0
        returns the folder, and a failed write raises on every rank."""

        def weights(target) -> None:
            export.write_shards(self.engine, self.rank, self.config.zero_stage, self._export_bucket(), target)

        return checkpoint.write_checkpoint(folder, self.engine, self.rank, self.model_dir, extra, weights, self._all_ok)

    def _all_ok(self, error: Exception | None) -> bool:
        """True when no rank has failed so far (a collective, so every rank must call it)."""
        return not self._max_over_ranks(int(error is not None))

    def parameter_checksum(self) -> float:
        return export.parameter_checksum(self.engine, self.rank, self.config.zero_stage, self._export_bucket())


def _node_id() -> str:
    """The Ray node this process runs on ('' outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except Exception:  # noqa: BLE001 - informative only
        return ""
