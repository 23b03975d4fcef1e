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
    share answered from the cache, and the judge's wall time (one batched call per step);
    pairwise: the share of comparisons whose two orders picked the same response."""
    judged = [r for r in rewards if r.source == "grm" and "status" in r.details]
    if not judged:
        return {}
    scored = [r.score for r in judged if r.ok and r.details["status"] == "scored"]
    compared = [c for r in judged for c in r.details.get("comparisons") or [] if c.get("orders_agree") is not None]
    pairwise = {"grm/orders_agree": float(np.mean([c["orders_agree"] for c in compared]))} if compared else {}
    return pairwise | {
        "grm/score_mean": float(np.mean(scored)) if scored else 0.0,
        "grm/unscored": float(sum(not r.ok for r in judged)),
        "grm/length_capped": float(sum(r.details["status"] == "length_capped" for r in judged)),
        "grm/cache_hit": float(np.mean([bool(r.details.get("cache_hit")) for r in judged])),
        "grm/latency_s": float(
            max((r.details.get("latency_s", 0.0) for r in judged if not r.details.get("cache_hit")), default=0.0)
        ),
    }
