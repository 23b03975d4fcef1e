"""SFT stage: next-token loss on the assistant tokens of chat data, on the same trainer
ranks as RL (the `nll` loss term). Task sources become chat data by answering each task
with its reference answer."""

from __future__ import annotations

import json
import random
from pathlib import Path

from posttrain.config import ChatJsonl, SFTStage, SynthesisData
from posttrain.config.verifiers import verifier_facts
from posttrain.data.chat import sft_example
from posttrain.data.tasks import load_chat_jsonl, load_tasks
from posttrain.records.checkpoints import retain_checkpoints
from posttrain.records.metrics import Progress
from posttrain.records.run_state import SFT_STATE as STATE_FILE
from posttrain.records.startup import CLOCK, StageStartup
from posttrain.runtime.infra import Infra
from posttrain.train.spec import loss_spec
from posttrain.types import Message, TrainSequence


def sft_conversations(stage: SFTStage, run_dir: Path | None = None) -> list[tuple[Message, ...]]:
    if isinstance(stage.data, ChatJsonl):
        return load_chat_jsonl(stage.data)
    if isinstance(stage.data, SynthesisData):  # what a synthesis stage of this run kept
        from posttrain.synthesis.store import SynthesisStore

        store = SynthesisStore(run_dir, stage.data.stage)
        conversations = store.conversations()
        if not conversations:
            raise ValueError(
                f"stage {stage.name}: the synthesis stage {stage.data.stage} kept no trajectory "
                f"(see {store.candidates}: every candidate's verdicts)"
            )
        print(f"[{stage.name}] {len(conversations)} synthesized conversations from {store.sft}", flush=True)
        return conversations
    from posttrain.data.chat import with_effort

    rng = random.Random(stage.think.seed if stage.think else 0)
    efforts = random.Random(1)
    out = []
    for t in load_tasks(stage.data):
        if t.answer is None:
            continue
        effort = efforts.choice(["low", "high", "max"]) if stage.effort_lines else None
        messages = with_effort(t.messages, effort) if effort else t.messages
        if t.entry.get("tools"):  # an environment's gold episode: its tools stated the tools-v1 way
            from posttrain.data.tools import with_tools_v1

            messages = with_tools_v1(messages, t.entry["tools"])
        if stage.think and stage.think.forms and "scratchpads" in t.entry:
            out.append(messages + answer_in_form(t, stage.think.forms, rng))
        else:
            out.append(
                with_scratchpad(messages + gold_turns(t), stage.think, verifier_facts(t.verifier).code, rng, effort)
            )
    return out


def answer_in_form(task, weights: dict[str, float], rng: random.Random) -> tuple[Message, ...]:
    """The reference answer in one form drawn by `weights` (independent of the stated effort):
    the full or short scratchpad before the answer, the answer alone, or the tool episode."""
    from posttrain.data.reasoning import CODE_COMMENT, SCRATCH_PREFIX

    forms = [f for f in weights if f != "tool" or "gold" in task.entry]
    form = rng.choices(forms, [weights[f] for f in forms])[0]
    if form == "tool":
        return gold_turns(task)
    answer = str(task.entry["check"]["answer"]) if "check" in task.entry else task.answer
    if form == "none":
        return (Message("assistant", answer),)
    comment = CODE_COMMENT if verifier_facts(task.verifier).code else ""  # a code answer stays a program
    return (Message("assistant", f"{comment}{SCRATCH_PREFIX[form]} {task.entry['scratchpads'][form]}\n{answer}"),)


def with_scratchpad(
    messages: tuple[Message, ...], think, code: bool, rng: random.Random, effort: str | None = None
) -> tuple[Message, ...]:
    """The conversation with a scratchpad line opening its first assistant turn (ThinkConfig);
    its length drawn from `think.by_effort[effort]` when that is set."""
    if think is None or rng.random() >= think.prob:
        return messages
    low, high = (think.by_effort or {}).get(effort, (1, think.max_words))
    first = next((i for i, m in enumerate(messages) if m.role == "assistant"), None)
    question = next((m.content for m in reversed(messages[: first or 0]) if m.role == "user"), "")
    words = question.split()[: rng.randint(low, high)]
    if first is None or not words:
        return messages
    line = f"{think.code_prefix if code else think.prefix} {' '.join(words)}"
    return messages[:first] + (Message("assistant", f"{line}\n{messages[first].content}"),) + messages[first + 1 :]


def gold_turns(task) -> tuple[Message, ...]:
    """The reference answer as assistant turns: the gold episode for agent tasks (tool
    calls, the environment's results, the answer), else one reply."""
    if "gold" in task.entry:
        return tuple(Message(role, content) for role, content in task.entry["gold"])
    return (Message("assistant", task.answer),)


def sft_sequences(tokenizer, conversations, max_len: int, weigh=None) -> list[TrainSequence]:
    """`weigh(response_ids, mask) -> mask`: loss weights per response token in place of the
    0/1 mask (the loss is the weighted mean over tokens); none: the mask as it is. An
    example whose prompt fills `max_len` has nothing to train on: it is left out, and said."""
    seqs, left_out = [], 0
    for messages in conversations:
        ids, prompt_len, mask = sft_example(tokenizer, messages, max_len)
        if weigh is not None:
            mask = weigh(ids[prompt_len:], mask)
        n = len(ids) - prompt_len
        if n > 0 and any(mask):
            seqs.append(
                TrainSequence(token_ids=tuple(ids), prompt_len=prompt_len, advantages=(0.0,) * n, loss_mask=tuple(mask))
            )
        else:
            left_out += 1
    if left_out:
        total = len(seqs) + left_out
        print(f"[sft] warning: {left_out} of {total} examples have no reply within max_len {max_len} "
              "(their prompts are longer) and are left out: raise max_len to train on them", flush=True)  # fmt: skip
    if not seqs:
        raise ValueError("SFT data has no assistant tokens within max_len")
    return seqs


def _save(infra: Infra, folder: Path, step: int, rng: random.Random) -> str:
    state = {"step": step, "version": infra.trainers.version, "rng": rng.getstate()}
    return infra.trainers.save(str(folder), extra={STATE_FILE: json.dumps(state)})


def run_sft(stage: SFTStage, init_dir: Path, infra: Infra, resume_dir: Path | None = None, weigh=None) -> Path:
    """SFT from `init_dir`, or continued from one of its own checkpoints (same batches after);
    `weigh` as in `sft_sequences`."""
    startup = StageStartup(CLOCK)  # written in the first step's row
    with startup.phase("data"):
        seqs = sft_sequences(infra.tokenizer, sft_conversations(stage, infra.run_dir), stage.max_len, weigh)
    rng = random.Random(infra.config.seed)
    with startup.phase("trainers"):
        infra.trainers.load(
            str(resume_dir or init_dir),
            infra.config.model.dtype,
            stage.lr,
            stage.warmup_steps,
            resume=resume_dir is not None,
            decay=stage.lr_decay,
            total_steps=stage.steps,
            min_lr_ratio=stage.min_lr_ratio,
        )
    first = 1
    if resume_dir is not None:
        state = json.loads((resume_dir / STATE_FILE).read_text())
        rng.setstate(_as_tuple(state["rng"]))
        infra.trainers.version, first = state["version"], state["step"] + 1
    progress = Progress(stage.name, stage.steps)
    ckpt_root = infra.run_dir / "checkpoints" / stage.name
    spec = loss_spec("nll")
    for step in range(first, stage.steps + 1):
        row: dict = startup.first_step()  # {} after the first
        batch = [seqs[rng.randrange(len(seqs))] for _ in range(stage.batch_size)]
        out = infra.trainers.train_step(batch, spec)
        row |= {
            "loss/nll": out.sums.loss,
            "grad/norm": out.grad_norm,
            "tokens": out.sums.tokens,
            "time/step_s": out.seconds,
            "train/skipped_nonfinite": float(out.skipped),
        }
        infra.metrics.log(stage.name, step, row)
        progress.update(step, loss=row["loss/nll"])
        if stage.save_every and step % stage.save_every == 0 and step < stage.steps:
            _save(infra, ckpt_root / f"step_{step:06d}", step, rng)
            retain_checkpoints(stage, infra.run_dir, STATE_FILE)
    return Path(_save(infra, ckpt_root / "final", stage.steps, rng))


def _as_tuple(value):
    """random.getstate() comes back from JSON as nested lists."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list) else value
