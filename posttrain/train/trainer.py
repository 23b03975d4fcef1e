"""One DeepSpeed data-parallel rank as a Ray actor.

The trainer is algorithm-blind: it receives `TrainSequence`s with per-token advantages
and masks, and a `LossSpec` naming the loss term (`pg` or `nll`). Gradient accumulation
over micro-batches is ours (DeepSpeed's unmanaged mode), so batches of any size train
with an exact token-level mean over the whole global batch:

    loss_rank = sum_{local tokens} l_t / N_global * world_size

because DeepSpeed averages gradients over ranks.
"""

from __future__ import annotations

import copy
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import ray

from posttrain.config import TrainerConfig
from posttrain.errors import CheckpointWriteError
from posttrain.rollout.cores import pin_to_cores
from posttrain.train.optim import build_optimizer, zero_settings
from posttrain.train.sync import WeightSender
from posttrain.types import LossSpec, TrainSequence

# Stands in for a micro-batch on a rank that has run out of data: zero loss, but a full
# backward, so the rank joins every gradient collective of the others.
_PAD_SEQUENCE = TrainSequence(token_ids=(0, 0), prompt_len=1, advantages=(0.0,), loss_mask=(0.0,))

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
    "vocab.json",
    "merges.txt",
)


@contextmanager
def _writes_recorded(engine, failures: list):
    """DeepSpeed's save_checkpoint holds barriers between its file writes: a rank that raised
    out of it (a full disk) would leave the others waiting forever. Inside this, a failed
    write is recorded and every later one skipped, so each rank reaches every barrier."""

    def guarded(write):
        def call(*args, **kwargs):
            if failures:
                return None
            try:
                return write(*args, **kwargs)
            except Exception as exc:  # torch.save reports a full disk as RuntimeError
                failures.append(exc)
                return None

        return call

    writers = [
        (engine.checkpoint_engine, "save"),
        (engine.checkpoint_engine, "makedirs"),
        (engine, "_copy_recovery_script"),
    ]  # every file DeepSpeed writes goes through one of these
    for owner, name in writers:
        setattr(owner, name, guarded(getattr(owner, name)))
    try:
        yield
    finally:
        for owner, name in writers:
            vars(owner).pop(name, None)


class TrainerWorker(WeightSender):
    """Create with `TrainerWorker.remote_actor(...)`; all ranks must get the same calls."""

    def __init__(self, rank: int, world_size: int, master_port: int, config: TrainerConfig, seed: int):
        os.environ.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(master_port),
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_RANK="0" if config.num_gpus else str(rank),
        )
        self.cores = pin_to_cores(config.cores)  # before torch starts its threads
        import deepspeed
        import torch

        torch.set_num_threads(config.threads)
        torch.manual_seed(seed + rank)
        deepspeed.init_distributed(dist_backend="nccl" if config.num_gpus else "gloo")
        self.rank, self.world_size, self.config, self.seed = rank, world_size, config, seed
        self.engine = None
        self.ref_model = None

    @classmethod
    def remote_actor(
        cls, rank: int, world_size: int, master_port: int, config: TrainerConfig, seed: int, env: dict, placement=None
    ):
        options = dict(
            num_cpus=config.num_cpus,
            num_gpus=config.num_gpus,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": str(config.threads), **env}},
            **(placement.options() if placement else {}),
        )
        return ray.remote(cls).options(**options).remote(rank, world_size, master_port, config, seed)

    # ------------------------------------------------------------ setup

    def load(
        self, model_dir: str, dtype: str, lr: float, warmup_steps: int, kl_beta: float = 0.0, resume: bool = False
    ) -> dict:
        """(Re)build the DeepSpeed engine from a model folder; with `resume`, the folder is a
        checkpoint of ours and its optimizer and schedule state are restored too."""
        import deepspeed
        import torch
        from transformers import AutoModelForCausalLM

        self.engine = self.ref_model = None
        torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        if kl_beta > 0:
            self.ref_model = copy.deepcopy(model).to(torch_dtype).eval().requires_grad_(False)
        self.model_dir, self.dtype = model_dir, dtype
        self.tied = bool(getattr(model.config, "tie_word_embeddings", False))
        optimizer = build_optimizer(model, self.config, lr)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min(1.0, (step + 1) / (warmup_steps + 1)) if warmup_steps else 1.0
        )
        self.engine, *_ = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=schedule, config=self._ds_config(dtype)
        )
        if resume:
            path, _ = self.engine.load_checkpoint(
                str(Path(model_dir) / "deepspeed"),
                tag="state",
                load_optimizer_states=True,
                load_lr_scheduler_states=True,
            )
            if path is None:
                raise FileNotFoundError(f"no DeepSpeed state in {model_dir}/deepspeed")
        return {"parameters": sum(p.numel() for p in model.parameters()), "tied_embeddings": self.tied}

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
            "zero_allow_untested_optimizer": True,
            # offload_optimizer with our client optimizers (torch AdamW, MuonWithAuxAdam): without
            # this DeepSpeed refuses any optimizer but its own CPU Adam
            "zero_force_ds_cpu_optimizer": False,
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }

    # ------------------------------------------------------------ training

    def train_step(self, shard: list[TrainSequence], spec: LossSpec, global_tokens: int) -> dict:
        """One optimizer step over this rank's shard. Returns the trainer's logprobs of every
        response token under the weights *before* the step (for logp/mismatch), and sums."""
        import torch

        started = time.perf_counter()
        self.engine.train()
        scale = self.world_size / max(global_tokens, 1)
        logp_before: list[list[float]] = [[] for _ in shard]
        sums = {"loss": 0.0, "clip_tokens": 0.0, "kl": 0.0, "tokens": 0.0, "stale_tokens": 0.0, "offpolicy_weight": 0.0}
        nonfinite = False
        for index_mb in self._aligned_micro_batches(shard):
            seqs = [shard[i] for i in index_mb] or [_PAD_SEQUENCE]
            batch = self._collate(seqs)
            loss, logp_old = self._loss(batch, spec, sums)
            if not torch.isfinite(loss.detach()):
                nonfinite = True
                # poison: NaN gradients make DeepSpeed's ZeRO optimizer discard the whole step
                # (its grad-norm overflow check); finite partial gradients would be applied
                loss = loss * float("nan")
            self.engine.backward(loss * scale)
            sums["loss"] += float(loss.detach()) * scale / self.world_size
            for row, i in enumerate(index_mb):
                start = batch["starts"][row]
                logp_before[i] = logp_old[row, start : start + shard[i].response_len].tolist()
        skipped = self._any_rank(nonfinite)
        if skipped and self.config.zero_stage == 0:
            self.engine.zero_grad()  # no ZeRO optimizer to catch the NaN gradients: drop them here
        else:
            self.engine.step()
            if skipped and self.engine.was_step_applied():
                raise RuntimeError("non-finite loss, but DeepSpeed applied the step: weights are corrupt")
        grad_norm = self.engine.get_global_grad_norm()
        return {
            "logp": logp_before,
            "sums": sums,
            "seconds": time.perf_counter() - started,
            "skipped": skipped,
            "grad_norm": float(grad_norm) if grad_norm is not None and not skipped else float("nan"),
        }

    def _any_rank(self, flag: bool) -> bool:
        import torch
        import torch.distributed as dist

        value = torch.tensor([int(flag)])
        if self.world_size > 1:
            dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def _loss(self, batch: dict, spec: LossSpec, sums: dict):
        """Summed (not averaged) loss of a micro-batch, and its detached logprobs."""
        import torch

        from posttrain.algo.losses import k3_kl, nll_loss, policy_gradient_loss
        from posttrain.algo.offpolicy import offpolicy_weights

        logp = self._forward_logp(self.engine, batch, spec.temperature)
        mask, logp_old = batch["loss_mask"], logp.detach()
        if spec.kind == "pg":
            per_token, clipped = policy_gradient_loss(
                logp, logp_old, batch["advantages"], spec.clip_eps_lo, spec.clip_eps_hi
            )
            weights = offpolicy_weights(
                spec.correction,
                logp_old,
                batch["logp_engine"],
                batch["stale"] * mask,
                cap=spec.tis_cap,
                lo=spec.mask_lo,
                hi=spec.mask_hi,
            )
            per_token = per_token * weights
            sums["clip_tokens"] += float((clipped * mask).sum())
            sums["stale_tokens"] += float((batch["stale"] * mask).sum())
            sums["offpolicy_weight"] += float((weights * batch["stale"] * mask).sum())
        else:
            per_token = nll_loss(logp)
        if self.ref_model is not None and spec.kl_beta > 0:
            with torch.no_grad():
                logp_ref = self._forward_logp(self.ref_model, batch, spec.temperature)
            kl = k3_kl(logp, logp_ref)
            per_token = per_token + spec.kl_beta * kl
            sums["kl"] += float((kl.detach() * mask).sum())
        sums["tokens"] += float(mask.sum())
        return (per_token * mask).sum(), logp_old

    def _aligned_micro_batches(self, shard: list[TrainSequence]) -> list[list[int]]:
        """Micro-batches padded with empty ones to the largest count over ranks: ZeRO reduces
        gradients inside every backward, so all ranks must run the same number of them."""
        import torch
        import torch.distributed as dist

        batches = self._micro_batches(shard)
        count = torch.tensor([len(batches)])
        if self.world_size > 1:
            dist.all_reduce(count, op=dist.ReduceOp.MAX)
        return batches + [[] for _ in range(int(count) - len(batches))]

    def _micro_batches(self, shard: list[TrainSequence]) -> list[list[int]]:
        order = sorted(range(len(shard)), key=lambda i: len(shard[i].token_ids))
        batches, current, longest = [], [], 0
        for i in order:
            longest_if = max(longest, len(shard[i].token_ids))
            if current and longest_if * (len(current) + 1) > self.config.micro_batch_tokens:
                batches.append(current)
                current, longest_if = [], len(shard[i].token_ids)
            current.append(i)
            longest = longest_if
        if current:
            batches.append(current)
        return batches

    def _collate(self, seqs: list[TrainSequence]) -> dict:
        """Right-pad; per-token tensors are aligned to the *shifted* targets (position t
        predicts token t+1), so response token j of a sequence sits at prompt_len-1+j."""
        import torch

        length = max(len(s.token_ids) for s in seqs)
        ids = torch.zeros(len(seqs), length, dtype=torch.long)
        attn = torch.zeros(len(seqs), length, dtype=torch.long)
        adv = torch.zeros(len(seqs), length - 1)
        mask = torch.zeros(len(seqs), length - 1)
        logp_engine = torch.zeros(len(seqs), length - 1)
        stale = torch.zeros(len(seqs), length - 1)
        starts = []
        for row, s in enumerate(seqs):
            n, start = len(s.token_ids), s.prompt_len - 1
            ids[row, :n] = torch.tensor(s.token_ids)
            attn[row, :n] = 1
            adv[row, start : start + s.response_len] = torch.tensor(s.advantages, dtype=torch.float32)
            mask[row, start : start + s.response_len] = torch.tensor(s.loss_mask, dtype=torch.float32)
            if s.logp_engine:
                logp_engine[row, start : start + s.response_len] = torch.tensor(s.logp_engine, dtype=torch.float32)
            if s.stale:
                stale[row, start : start + s.response_len] = torch.tensor(s.stale, dtype=torch.float32)
            starts.append(start)
        return {
            "input_ids": ids,
            "attention_mask": attn,
            "advantages": adv,
            "loss_mask": mask,
            "starts": starts,
            "logp_engine": logp_engine,
            "stale": stale,
        }

    @staticmethod
    def _forward_logp(model, batch: dict, temperature: float):
        from posttrain.algo.losses import token_logprobs

        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
        return token_logprobs(logits[:, :-1], batch["input_ids"][:, 1:], temperature)

    def logprobs(self, seqs: list[TrainSequence], temperature: float = 1.0) -> list[list[float]]:
        """Logprobs of the response tokens under the current weights, no gradient."""
        import torch

        self.engine.eval()
        out: list[list[float]] = [[] for _ in seqs]
        with torch.no_grad():
            for index_mb in self._aligned_micro_batches(seqs):
                batch = self._collate([seqs[i] for i in index_mb] or [_PAD_SEQUENCE])
                logp = self._forward_logp(self.engine, batch, temperature)
                for row, i in enumerate(index_mb):
                    out[i] = logp[row, batch["starts"][row] : batch["starts"][row] + seqs[i].response_len].tolist()
        return out

    # ------------------------------------------------------------ weights out

    def _full_state_dict(self) -> dict:
        """The full (unpartitioned) state dict; every rank must call it under ZeRO-3."""
        import deepspeed

        module = self.engine.module
        if self.config.zero_stage == 3:
            with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
                return {k: v.detach().clone() for k, v in module.state_dict().items()} if self.rank == 0 else {}
        return module.state_dict() if self.rank == 0 else {}

    def get_weights(self, version: int):
        """Rank 0 returns a WeightPacket of the full weights (in the engine dtype); others None."""
        from posttrain.rollout.weights import pack_state_dict

        state = self._full_state_dict()
        if self.rank != 0:
            return None
        return pack_state_dict(state, version=version, tied_embeddings=self.tied)

    def save(self, folder: str, extra: dict[str, str] | None = None) -> str | None:
        """A checkpoint folder: Hugging Face safetensors weights (what transformers and vLLM
        load), DeepSpeed's training state in `deepspeed/` (optimizer and schedule, every
        rank's partition), and the driver's `extra` files. Written into a temp folder and
        renamed into place: a crash or a full disk mid-write leaves the previous checkpoint
        intact, and a failed write removes its partial files and raises on every rank."""
        target = Path(folder)
        tmp = target.with_name(f".{target.name}.tmp")
        error = None
        try:
            if self.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir(parents=True)
        except OSError as exc:
            error = exc
        if self._all_ok(error):  # ranks agree after every phase: one failing rank must not hang the others
            failures: list[Exception] = []
            with _writes_recorded(self.engine, failures):
                self.engine.save_checkpoint(str(tmp / "deepspeed"), tag="state", save_latest=False)
            error = failures[0] if failures else None
        state = self._full_state_dict() if self._all_ok(error) else None
        if self.rank == 0 and state is not None:
            try:
                self._write_rank0(tmp, state, extra)
            except Exception as exc:
                error = exc
        if not self._all_ok(error):
            if self.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            raise self._write_error(target, error)
        if self.rank != 0:
            return None
        old = target.with_name(f".{target.name}.old")
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
        return str(target)

    def _write_rank0(self, tmp: Path, state: dict, extra: dict[str, str] | None) -> None:
        self.engine.module.save_pretrained(tmp, state_dict=state, safe_serialization=True)
        for name in TOKENIZER_FILES:
            if (Path(self.model_dir) / name).is_file():
                shutil.copy2(Path(self.model_dir) / name, tmp / name)
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)

    def _all_ok(self, error: Exception | None) -> bool:
        """True when no rank has failed so far (a collective, so every rank must call it)."""
        import torch
        import torch.distributed as dist

        failed = torch.tensor([int(error is not None)])
        if self.world_size > 1:
            dist.all_reduce(failed, op=dist.ReduceOp.MAX)
        return not failed.item()

    def _write_error(self, target: Path, error: Exception | None) -> CheckpointWriteError:
        where = target.parent if target.parent.exists() else Path(".")
        free = shutil.disk_usage(where).free
        cause = (
            f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            if error
            else "another trainer rank failed to write its part"
        )
        full = "the disk is full: " if free < 64 * 2**20 or "No space left" in str(error) else ""
        return CheckpointWriteError(
            f"checkpoint {target} not written: {full}{cause} ({free / 2**20:.1f} MiB free on {where}); "
            "its partial files were removed and the previous checkpoint is intact"
        )

    def parameter_checksum(self) -> float:
        state = self._full_state_dict()
        return float(sum(v.double().sum() for v in state.values())) if self.rank == 0 else 0.0
