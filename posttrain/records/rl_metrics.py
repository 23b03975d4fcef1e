"""Metrics of an RL step's samples that only some stages have: per (domain, effort) cell
(MOPD), agent episodes, and the generative reward model's judging (stages/rl.py logs them)."""

from __future__ import annotations

import numpy as np

from posttrain.config.verifiers import verifier_facts
from posttrain.types import RewardResult, Sample


def cell_metrics(samples: list[Sample], rewards: list[RewardResult]) -> dict:
    """Per (domain, effort) cell, for prompts that carry one (MOPD): reward and length."""
    by_cell: dict[str, list[float]] = {}
    by_effort: dict[str, list[int]] = {}
    for s, r in zip(samples, rewards):
        if "cell" in s.task.entry:
            if r.ok:
                by_cell.setdefault(s.task.entry["cell"], []).append(r.score)
            by_effort.setdefault(s.task.entry["effort"], []).append(s.model_tokens)
    return {
        **{f"reward/{cell}": float(np.mean(v)) for cell, v in by_cell.items()},
        **{f"response_tokens/{effort}": float(np.mean(v)) for effort, v in by_effort.items()},
    }


def agent_metrics(samples: list[Sample]) -> dict:
    episodes = [s.env for s in samples if verifier_facts(s.task.verifier).episode and s.env]
    if not episodes:
        return {}
    calls = [c for e in episodes for c in e["calls"]]
    return {
        "agent/turns_mean": float(np.mean([e["turns"] for e in episodes])),
        "agent/tool_calls_mean": len(calls) / len(episodes),
        "agent/tool_error_frac": float(np.mean([not c["ok"] for c in calls])) if calls else 0.0,
        "agent/answered_frac": float(np.mean([e["final"] is not None for e in episodes])),
    }


def grm_metrics(rewards: list[RewardResult]) -> dict:
    """Per step: mean GRM score of scored samples, unscored and length-capped counts, the
    share answered from the cache, the judge's wall time (one batched call per step) and
    the share of its verdicts that could not be read; pairwise: the share of comparisons
    whose two orders picked the same response."""
    judged = [r for r in rewards if r.source == "grm" and "status" in r.details]
    if not judged:
        return {}
    scored = [r.score for r in judged if r.ok and r.details["status"] == "scored"]
    compared = [c for r in judged for c in r.details.get("comparisons") or [] if c.get("orders_agree") is not None]
    pairwise = {"grm/orders_agree": float(np.mean([c["orders_agree"] for c in compared]))} if compared else {}
    read, unreadable = verdict_counts(judged)
    return pairwise | {
        "grm/unreadable_frac": unreadable / (read + unreadable) if read + unreadable else 0.0,
        "grm/score_mean": float(np.mean(scored)) if scored else 0.0,
        "grm/unscored": float(sum(not r.ok for r in judged)),
        "grm/length_capped": float(sum(r.details["status"] == "length_capped" for r in judged)),
        "grm/cache_hit": float(np.mean([bool(r.details.get("cache_hit")) for r in judged])),
        "grm/latency_s": float(
            max((r.details.get("latency_s", 0.0) for r in judged if not r.details.get("cache_hit")), default=0.0)
        ),
    }


def verdict_counts(judged: list[RewardResult]) -> tuple[int, int]:
    """(verdicts read, verdicts unreadable after the retries) of GRM results: the rubric
    method's rubric and per-criterion verdicts, the pairwise method's comparisons."""
    read = unreadable = 0
    for r in judged:
        comparisons = [c for c in r.details.get("comparisons") or [] if c.get("by") == "judge"]
        verdicts = r.details.get("verdicts") or []
        read += sum(c.get("error") is None for c in comparisons) + sum(v["verdict"] is not None for v in verdicts)
        unreadable += sum(c.get("error") is not None for c in comparisons) + sum(v["verdict"] is None for v in verdicts)
        no_rubric = r.details.get("fault") == "judge_unreadable" and not comparisons and not r.details.get("rubric")
        unreadable += int(no_rubric)  # the rubric call itself could not be read: no verdict was asked
    return read, unreadable


def grm_spread(samples: list[Sample], rewards: list[RewardResult]) -> dict:
    """`grm/group_std`: the mean spread (std) of GRM scores within a group, over the groups
    with 2 or more scored samples. A judge whose scores barely differ between a group's
    responses gives advantages that are noise scaled up by the std normalization."""
    by_group: dict[int, list[float]] = {}
    for s, r in zip(samples, rewards):
        if r.source == "grm" and r.ok and r.details.get("status") == "scored":
            by_group.setdefault(s.group_id, []).append(r.score)
    spreads = [float(np.std(scores)) for scores in by_group.values() if len(scores) >= 2]
    return {"grm/group_std": float(np.mean(spreads))} if spreads else {}
