"""Saved rollouts and the GRM scoreboard, in the run folder, as JSON lines a user can
query (`jq`, pandas, `posttrain rewards show`).

  rollouts/STAGE.jsonl  one row per scored sample of every RL step: the task, the
                        response, token counts, the reward with its reason and source
  scoreboard.jsonl      one entry per GRM-judged sample: rubric, verdicts with reasons,
                        the judge's raw replies, judge model, procedure version, latency

Each step's rows are appended in one write and flushed, so a crash loses at most the
step in flight (a torn last line is skipped when reading). On resume, rows past the
checkpoint are moved to `*.replaced.jsonl`, like metrics rows.
"""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.types import Message, RewardResult, Sample

SCOREBOARD = "scoreboard.jsonl"
SLIM_GRM_KEYS = ("status", "cache_hit", "latency_s", "judge_model", "fault")


def rollouts_path(run_dir: Path, stage: str) -> Path:
    return Path(run_dir) / "rollouts" / f"{stage}.jsonl"


def _append(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    from posttrain.records.metrics import RUN_FILES_LOCK

    path.parent.mkdir(parents=True, exist_ok=True)
    with RUN_FILES_LOCK, path.open("a", encoding="utf-8") as f:
        f.write("".join(json.dumps(row, default=str) + "\n" for row in rows))


def read_rows(path: Path) -> list[dict]:
    """Rows of a JSONL file; a torn last line (a crash mid-write) is skipped."""
    if not Path(path).exists():
        return []
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _messages(messages: tuple[Message, ...]) -> list[dict]:
    return [{"role": m.role, "content": m.content} for m in messages]


def sample_row(
    stage: str, step: int, index: int, sample: Sample, result: RewardResult, budget: int | None, effort: str | None
) -> dict:
    task = sample.task
    row = {
        "stage": stage,
        "step": step,
        "sample": f"{step}-{index}",
        "group": sample.group_id,
        "task_id": task.task_id,
        "family": task.family,
        "verifier": task.verifier,
        "messages": _messages(task.messages),
        "answer": task.answer,
        "entry": task.entry,
        "effort": effort,
        "response": sample.completion.text,
        "prompt_tokens": len(sample.prompt_ids),
        "response_tokens": sample.model_tokens,
        "finish_reason": sample.completion.finish_reason,
        "policy_version": sample.policy_version,
        "budget": budget,
        "reward": result.score,
        "ok": result.ok,
        "over_budget": result.over_budget,
        "reason": result.reason,
        "source": result.source,
        "details": result.details,
    }
    if sample.env is not None:
        row["env"] = sample.env
    return row


class RolloutLog:
    """Appends each RL step's samples (and GRM scoreboard entries) to the run folder."""

    def __init__(self, run_dir: Path, stage: str):
        self.stage = stage
        self.path = rollouts_path(run_dir, stage)
        self.scoreboard = Path(run_dir) / SCOREBOARD

    def write(
        self,
        step: int,
        samples: list[Sample],
        rewards: list[RewardResult],
        budgets: list[int | None],
        effort: str | None = None,
    ) -> None:
        rows, entries = [], []
        for index, (sample, result, budget) in enumerate(zip(samples, rewards, budgets)):
            row = sample_row(self.stage, step, index, sample, result, budget, effort)
            if "rubric" in result.details:  # a GRM entry: in full on the scoreboard, slim here
                entries.append({"stage": self.stage, "step": step, "sample": row["sample"], **result.details})
                row["details"] = {k: result.details.get(k) for k in SLIM_GRM_KEYS} | {"scoreboard": SCOREBOARD}
            rows.append(row)
        _append(self.path, rows)
        _append(self.scoreboard, entries)

    def scoreboard_entries(self) -> list[dict]:
        return [e for e in read_rows(self.scoreboard) if e.get("stage") == self.stage]
