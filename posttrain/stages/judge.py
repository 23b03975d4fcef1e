"""The judge stage: SFT of a judge on its own calls, then RL on its verdict calls
(`config.JudgeStage`), each phase an SFT or RL stage of its own under NAME/sft and NAME/rl
(checkpoints, metrics). A phase that finished is recorded in the stage's run_state entry and
skipped when the run resumes; an unfinished one continues from its newest checkpoint."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

from posttrain.config import JudgeStage


def run_judge(stage: JudgeStage, init_dir: Path, infra, entry: dict, save_state: Callable[[], None]) -> Path:
    """Run the phases from `init_dir`; return the judge's final checkpoint."""
    from posttrain.records.run_state import ROLLOUT_STATE, SFT_STATE, latest_checkpoint, set_aside_metrics
    from posttrain.stages.rl import run_rl
    from posttrain.stages.sft import run_sft

    phases = entry.setdefault("phases", {})
    current = init_dir
    weigh = decision_weigher(infra.tokenizer, stage.decision_weight) if stage.decision_weight != 1 else None
    for phase, sub, state_file, run in (
        ("sft", stage.sft_stage(), SFT_STATE, partial(run_sft, weigh=weigh)),
        ("rl", stage.rl_stage(), ROLLOUT_STATE, run_rl),
    ):
        if sub is None:
            continue
        if phases.get(phase, {}).get("status") == "done":
            current = Path(phases[phase]["checkpoint"])
            continue
        resume = latest_checkpoint(infra.run_dir / "checkpoints" / sub.name, state_file)
        step = json.loads((resume / state_file).read_text())["step"] if resume else 0
        set_aside_metrics(infra.run_dir, sub.name, step)
        if resume:
            phases.setdefault(phase, {}).setdefault("resumed_from", []).append(str(resume))
            print(f"[{sub.name}] resuming from {resume} (step {step})", flush=True)
        current = run(sub, current, infra, resume)
        phases[phase] = {**phases.get(phase, {}), "status": "done", "checkpoint": str(current)}
        save_state()
    return current


def decision_weigher(tokenizer, weight: float):
    """A `sft_sequences` weigher: each trained token that opens a reply's decision (the
    verdict's word, the score, or the better answer's letter) weighs `weight`, every other
    trained token as before. The decision is one token of about fifteen in a verdict reply,
    and the rest (the format, and a reason that follows from the verdict) is learned long
    before it."""

    from posttrain.data.judge_prompts import DECISION_PREFIXES

    def weigh(response_ids: list[int], mask: list[float]) -> list[float]:
        out, text = list(mask), ""
        for k, piece in enumerate(tokenizer.batch_decode([[t] for t in response_ids[: len(mask)]])):
            if mask[k] > 0 and text.endswith(DECISION_PREFIXES):
                out[k] = mask[k] * weight
            text += piece
        return out

    return weigh
