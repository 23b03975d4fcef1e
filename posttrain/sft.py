"""SFT stage: next-token loss on the assistant tokens of chat data, on the same trainer
ranks as RL (the `nll` loss term). Task sources become chat data by answering each task
with its reference answer."""

from __future__ import annotations

import random
from pathlib import Path

from posttrain.config import ReasoningGymTasks, SFTStage
from posttrain.data.chat import sft_example
from posttrain.data.tasks import load_chat_jsonl, load_tasks
from posttrain.metrics import Progress
from posttrain.infra import Infra
from posttrain.types import LossSpec, Message, TrainSequence


def sft_conversations(stage: SFTStage) -> list[tuple[Message, ...]]:
    if isinstance(stage.data, ReasoningGymTasks):
        return [t.messages + (Message("assistant", t.answer),) for t in load_tasks(stage.data) if t.answer is not None]
    return load_chat_jsonl(stage.data)


def sft_sequences(tokenizer, conversations, max_len: int) -> list[TrainSequence]:
    seqs = []
    for messages in conversations:
        ids, prompt_len = sft_example(tokenizer, messages, max_len)
        n = len(ids) - prompt_len
        if n > 0:
            seqs.append(TrainSequence(token_ids=tuple(ids), prompt_len=prompt_len, advantages=(0.0,) * n,
                                      loss_mask=(1.0,) * n))
    if not seqs:
        raise ValueError("SFT data has no assistant tokens within max_len")
    return seqs


def run_sft(stage: SFTStage, init_dir: Path, infra: Infra) -> Path:
    seqs = sft_sequences(infra.tokenizer, sft_conversations(stage), stage.max_len)
    rng = random.Random(infra.config.seed)
    infra.trainers.load(str(init_dir), infra.config.model.dtype, stage.lr, stage.warmup_steps)
    progress = Progress(stage.name, stage.steps)
    ckpt_root = infra.run_dir / "checkpoints" / stage.name
    spec = LossSpec(kind="nll")
    for step in range(1, stage.steps + 1):
        batch = [seqs[rng.randrange(len(seqs))] for _ in range(stage.batch_size)]
        out = infra.trainers.train_step(batch, spec)
        row = {"loss/nll": out["sums"]["loss"], "grad/norm": out["grad_norm"], "tokens": out["sums"]["tokens"],
               "time/step_s": out["seconds"]}
        infra.metrics.log(stage.name, step, row)
        progress.update(step, loss=row["loss/nll"])
        if stage.save_every and step % stage.save_every == 0 and step < stage.steps:
            infra.trainers.save(str(ckpt_root / f"step_{step:06d}"))
    return Path(infra.trainers.save(str(ckpt_root / "final")))
