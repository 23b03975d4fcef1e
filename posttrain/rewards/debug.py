"""The reward debugger: why did a sample get its reward?

  show    a run's saved rollouts: the task, the response, the reward with its reason, and
          for a GRM sample the rubric with each criterion's verdict and reason
  replay  rescore saved rollouts with the run's reward config, or a changed one, and show
          the distribution shift and the samples whose reward moved most
  try     score one (task, response) pair and show the whole procedure (try_task.py,
          try_grm.py)

Reads the run folder only (rollouts/STAGE.jsonl, scoreboard.jsonl, config.resolved.yaml).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from posttrain.records.rollouts import SCOREBOARD, read_rows, rollouts_path
from posttrain.types import Completion, Message, RewardResult, Sample, Task


class DebugError(Exception):
    """A request the run folder cannot answer; str() is the one line shown."""


# ---------------------------------------------------------------- reading a run


def rl_stages(run_dir: Path) -> list[str]:
    """The run's stages (and expert jobs, `experts/general-max`; eval cells,
    `eval/CHECKPOINT/CELL`) that saved rollouts, in pipeline order when the config is there."""
    import yaml

    root = run_dir / "rollouts"
    saved = sorted(
        str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.jsonl") if not p.stem.endswith(".replaced")
    )
    config = run_dir / "config.resolved.yaml"
    if not config.is_file():
        return saved
    order = [s["name"] for s in yaml.safe_load(config.read_text())["stages"]]
    return [name for stage in order for name in saved if name == stage or name.startswith(stage + "/")]


def load_rows(run_dir: Path, stage: str | None) -> tuple[str, list[dict]]:
    stages = rl_stages(run_dir)
    if not stages:
        raise DebugError(f"{run_dir}: no saved rollouts (rollouts/STAGE.jsonl); is it an RL run folder?")
    stage = stage or stages[-1]
    if stage not in stages:
        raise DebugError(f"{run_dir}: no rollouts saved for stage {stage!r} (have: {', '.join(stages)})")
    return stage, read_rows(rollouts_path(run_dir, stage))


def scoreboard(run_dir: Path, stage: str) -> dict[str, dict]:
    return {e["sample"]: e for e in read_rows(run_dir / SCOREBOARD) if e.get("stage") == stage}


def row_sample(row: dict) -> Sample:
    task = Task(
        row["task_id"],
        row["family"],
        tuple(Message(m["role"], m["content"]) for m in row["messages"]),
        row["answer"],
        row["entry"] or {},
        row["verifier"],
    )
    n = row["response_tokens"]
    # token ids are not saved: verifiers read the text, budgets and the length cap the count
    completion = Completion((0,) * n, (0.0,) * n, row["response"], row["finish_reason"])
    return Sample(
        task, row["group"], (0,) * row["prompt_tokens"], completion, row["policy_version"], env=row.get("env")
    )


# ---------------------------------------------------------------- show


def matching(rows: list[dict], source: str | None, verifier: str | None) -> list[dict]:
    """The rows of the source and verifier asked for (either may be None: any)."""
    return [
        r
        for r in rows
        if (source is None or r.get("source") == source) and (verifier is None or r.get("verifier") == verifier)
    ]


def _filtered_stage(run_dir: Path, stage: str | None, source: str | None, verifier: str | None):
    """(stage, its rows of that source and verifier): the stage given, else the newest stage
    that has such samples. DebugError when none has, naming what the run has."""
    asked = " and ".join(f"{k} {v!r}" for k, v in (("source", source), ("verifier", verifier)) if v is not None)
    stages = [stage] if stage else list(reversed(rl_stages(run_dir)))
    seen: dict[str, set] = {"source": set(), "verifier": set()}
    for name in stages:
        _, rows = load_rows(run_dir, name)
        found = matching(rows, source, verifier)
        if found:
            return name, found
        seen["source"].update(str(r.get("source")) for r in rows)
        seen["verifier"].update(str(r.get("verifier")) for r in rows)
    where = f"stage {stage}" if stage else "any stage"
    have = "; ".join(f"{k}s: {', '.join(sorted(v)) or 'none'}" for k, v in seen.items())
    raise DebugError(f"no saved samples with {asked} in {where} (have {have})")


def show(
    run_dir: Path,
    stage: str | None = None,
    step: int | None = None,
    sample: str | None = None,
    worst: int | None = None,
    source: str | None = None,
    verifier: str | None = None,
    fault: str | None = None,
) -> None:
    """Print the saved samples of a step as a table (the last step, or the last with samples
    of `source`/`verifier` when either is given), one sample whole, or the `worst` K;
    `fault`: only the samples with that fault kind (records/faults.py), each whole."""
    if source is None and verifier is None:
        stage, rows = load_rows(Path(run_dir), stage)
    else:
        stage, rows = _filtered_stage(Path(run_dir), stage, source, verifier)
        steps = sorted({r["step"] for r in rows})
        print(f"stage {stage}: {len(rows)} samples with {_asked(source, verifier)} at steps {_ranges(steps)}")
    if sample is not None:
        rows = [r for r in rows if r["sample"] == sample]
        if not rows:
            raise DebugError(f"stage {stage}: no sample {sample!r} (ids are STEP-INDEX, e.g. 3-0)")
    elif step is not None or worst is None:
        step = step if step is not None else max(r["step"] for r in rows)
        rows = [r for r in rows if r["step"] == step]
        if not rows:
            raise DebugError(f"stage {stage}: no saved samples at step {step}")
    if worst is not None:
        rows = sorted(rows, key=lambda r: (r["ok"], r["reward"]))[:worst]  # unscored first, then lowest
    if fault is not None:
        rows = with_fault(rows, fault, stage, step)
    board = scoreboard(Path(run_dir), stage)
    if sample is None and worst is None and fault is None:
        _table(stage, step, rows)
        return
    for row in rows:
        print_sample(row, board.get(row["sample"]))


def with_fault(rows: list[dict], fault: str, stage: str, step: int | None) -> list[dict]:
    """The rows with fault kind `fault`; DebugError naming the kinds known when none has it."""
    from posttrain.records.faults import METRIC, row_faults

    if fault not in METRIC:
        raise DebugError(f"--fault {fault!r}: not a fault kind (kinds: {', '.join(METRIC)})")
    found = [r for r in rows if fault in row_faults(r)]
    if not found:
        raise DebugError(f"stage {stage}: no sample with fault {fault} at step {step}")
    print(f"stage {stage}, step {step}: {len(found)} of {len(rows)} samples with fault {fault}")
    return found


def _table(stage: str, step: int, rows: list[dict]) -> None:
    print(f"stage {stage}, step {step}: {len(rows)} samples (`--sample ID` for one, `--worst K` for the lowest)")
    print(f"{'id':>7}  {'source':<13} {'reward':>7}  reason")
    for r in rows:
        reward = f"{r['reward']:.3f}" if r["ok"] else "unscored"
        flag = "[over budget] " if r.get("over_budget") else ""
        print(f"{r['sample']:>7}  {r['source']:<13} {reward:>7}  {flag}{_one_line(r['reason'], 90)}")


def print_sample(row: dict, entry: dict | None) -> None:
    reward = f"{row['reward']:.3f}" if row["ok"] else "unscored (left out of training)"
    if row.get("over_budget"):
        reward += f" (over budget: {row['response_tokens']} > {row['budget']} tokens)"
    print(
        f"=== {row['stage']} step {row['step']} sample {row['sample']}  task {row['task_id']} "
        f"({row['family']}, verifier {row['verifier']})"
    )
    for m in row["messages"]:
        print(f"[{m['role']}]\n{_indent(m['content'])}")
    print(
        f"[response] {row['response_tokens']} tokens, finish {row['finish_reason']}"
        + (f", budget {row['budget']}" if row.get("budget") else "")
        + f"\n{_indent(row['response'])}"
    )
    print(f"reward {reward}  source {row['source']}\nreason: {row['reason']}")
    if entry is not None:
        print_entry(entry)
    print()


def print_entry(entry: dict) -> None:
    """The GRM procedure of one sample: rubric, verdicts with reasons, final score. A field an
    entry lacks (one written by another version) shows as `?`, never as a crash."""
    print(
        f"GRM {entry.get('status', '?')}  judge {entry.get('judge_model', '?')}  "
        f"procedure {entry.get('procedure_version', '?')}  "
        f"latency {entry.get('latency_s') or 0:.2f}s{'  (cache hit)' if entry.get('cache_hit') else ''}"
    )
    for line in entry.get("code_runs") or []:  # what the judge was shown of the answer's code
        print(f"  tool: {line}")
    if entry.get("method") == "pairwise":
        _print_comparisons(entry)
        return
    if not entry.get("rubric"):
        print(f"  {entry.get('reason', '')}")
        for raw in entry.get("rubric_raw", []):
            print(f"  rubric reply: {_one_line(raw, 200)}")
        return
    print(f"  {'#':>2} {'kind':<9} {'w':>3} {'verdict':<7} {'c_j':>5}  criterion / reason")
    verdicts = {v.get("criterion"): v for v in entry.get("verdicts") or []}
    for j, c in enumerate(entry["rubric"]):
        v = verdicts.get(j, {})
        score = f"{v['score']:.2f}" if v.get("score") is not None else "-"
        print(f"  {j:>2} {c['kind']:<9} {c['weight']:>3g} {v.get('verdict') or 'none':<7} {score:>5}  {c['text']}")
        print(f"  {'':>30}  reason: {_one_line(v.get('reason', ''), 100)}")
    if entry.get("status") == "scored" and isinstance(entry.get("score"), (int, float)):
        print(f"  score = 2 * (sum w*c over criteria + sum w*(1-c) over pitfalls) / sum w - 1 = {entry['score']:.3f}")
    else:
        print(f"  {entry.get('reason', '')}")


def _print_comparisons(entry: dict) -> None:
    """A pairwise entry: each comparison's win, P(better) in each order, and the judge's reasons."""
    rows = entry.get("comparisons") or []
    if rows:
        print(f"  {'win':>5} {'as A':>5} {'as B':>5}  opponent / reasons")
    for row in rows:
        win = f"{row['win']:.2f}" if isinstance(row.get("win"), (int, float)) else "-"
        first, second = (
            f"{row[k]:.2f}" if isinstance(row.get(k), (int, float)) else "-" for k in ("as_first", "as_second")
        )
        print(f"  {win:>5} {first:>5} {second:>5}  {_one_line(row.get('opponent', '?'), 80)}")
        if row.get("by") == "length cap":
            print(f"  {'':>17}  over the length cap ({row.get('opponent_tokens', '?')} tokens): lost without a call")
        elif row.get("error"):
            print(f"  {'':>17}  unreadable, left out: {_one_line(row['error'], 90)}")
        else:
            for order, reason in zip(("as A", "as B"), row.get("reasons") or []):
                print(f"  {'':>17}  {order}: {_one_line(reason, 90)}")
    if entry.get("status") == "scored" and isinstance(entry.get("score"), (int, float)):
        print(f"  score = 2 * mean win - 1 = {entry['score']:.3f}  ({entry.get('reason', '')})")
    else:
        print(f"  {entry.get('reason', '')}")


def _asked(source: str | None, verifier: str | None) -> str:
    return " and ".join(f"{k} {v}" for k, v in (("source", source), ("verifier", verifier)) if v is not None)


def _ranges(steps: list[int]) -> str:
    """[1, 2, 3, 7] as `1-3,7`."""
    parts: list[list[int]] = []
    for s in steps:
        if parts and s == parts[-1][1] + 1:
            parts[-1][1] = s
        else:
            parts.append([s, s])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in parts)


def _one_line(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _indent(text: str) -> str:
    return textwrap.indent(text if text.strip() else "(empty)", "  ")


# ---------------------------------------------------------------- replay


def replay(
    run_dir: Path,
    stage: str | None,
    overrides: list[str],
    steps: list[int] | None = None,
    last: int | None = None,
    top: int = 10,
    use_cache: bool = True,
) -> list[RewardResult]:
    """Rescore saved rollouts with the stage's reward config, changed by `overrides`
    (`reward.grm.length_cap=64`: keys relative to the stage)."""
    from posttrain.config.files import load_pipeline, read_yaml
    from posttrain.rewards.base import score_sync
    from posttrain.rewards.router import reward_router
    from posttrain.rollout.budget import apply_budget

    run_dir = Path(run_dir)
    resolved = run_dir / "config.resolved.yaml"
    types = {s["name"]: s.get("type") for s in read_yaml(resolved)["stages"]}
    names = list(types)
    if stage is None:  # the last stage or expert job that scored samples with its reward config (not an eval cell)
        scored = [s for s in rl_stages(run_dir) if types.get(s.split("/")[0]) not in (None, "eval")]
        stage = scored[-1] if scored else None
    stage, rows = load_rows(run_dir, stage)
    index = names.index(stage.split("/")[0]) if stage.split("/")[0] in names else 0
    config = load_pipeline(resolved, [o if o.startswith("stages") else f"stages[{index}].{o}" for o in overrides])
    reward_stage = scoring_stage(config, stage)
    if steps:
        rows = [r for r in rows if r["step"] in set(steps)]
    if last:
        wanted = sorted({r["step"] for r in rows})[-last:]
        rows = [r for r in rows if r["step"] in set(wanted)]
    if not rows:
        raise DebugError(f"stage {stage}: no saved samples to replay")
    router = reward_router(reward_stage)
    grm = router.sources.get("grm")
    if grm is not None and use_cache:
        print(
            f"GRM cache: {grm.preload(list(scoreboard(run_dir, stage).values()))} judgements loaded from {SCOREBOARD}"
        )
    samples = [row_sample(r) for r in rows]
    # a pairwise judge ranks a task's responses within the batch they were scored in: one step's
    batches = [list(range(len(rows)))]  # (one batch for every other reward: each sample on its own)
    if grm is not None and grm.relative:
        by_step: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            by_step.setdefault(row["step"], []).append(i)
        batches = list(by_step.values())
    results: list = [None] * len(rows)
    try:
        for batch in batches:
            for i, result in zip(batch, score_sync(router, [samples[i] for i in batch])):
                results[i] = result
    finally:
        router.close()
    results = [apply_budget(r, s.model_tokens, row["budget"]) for r, s, row in zip(results, samples, rows)]
    print_shift(rows, results, top)
    return results


def scoring_stage(config, name: str):
    """The stage config whose reward scored the saved samples of `name`: an RL or MOPD stage (a
    MOPD stage with `experts` gets that stage's domains, as it ran), or an expert job
    (`experts/general-max`: the RL stage the job ran). Eval cells are refused: an eval
    stage scores checkpoints, it has no reward config of its own to replay."""
    from posttrain.config import EvalStage, ExpertsStage, JudgeStage
    from posttrain.config.jobs import expert_jobs

    head, _, job = name.partition("/")
    stage = next((s for s in config.stages if s.name == head), None)
    if isinstance(stage, JudgeStage) and job == "rl" and stage.rl_stage() is not None:
        return stage.rl_stage()  # the judge's RL phase
    if stage is None or isinstance(stage, EvalStage) or not stage.scores_tasks:
        raise DebugError(
            f"stage {name}: not a stage whose reward config scored samples (replay an RL or MOPD stage, or an "
            "expert job such as experts/general-max)"
        )
    if getattr(stage, "experts", None):  # MOPD from an experts stage: its prompts are those domains'
        stage = stage.model_copy(update={"domains": dict(config.stage(stage.experts).domains)})
    if isinstance(stage, ExpertsStage):
        jobs = expert_jobs(stage)
        if job not in jobs:
            raise DebugError(f"stage {name}: name one job of {head} (jobs: {', '.join(jobs)})")
        return jobs[job].stage
    if job:
        raise DebugError(f"stage {name}: {head} is a {stage.type} stage, it has no jobs")
    return stage


def print_shift(rows: list[dict], results: list[RewardResult], top: int) -> None:
    old = [r["reward"] if r["ok"] else None for r in rows]
    new = [r.score if r.ok else None for r in results]
    sources = sorted({r["source"] for r in rows})
    print(f"replayed {len(rows)} samples of steps {rows[0]['step']}..{rows[-1]['step']}")
    print(
        f"{'source':<14} {'n':>5}  {'mean old -> new':>22}  {'std old -> new':>17}  "
        f"{'p10/p50/p90 old -> new':>36}  {'unscored':>9}  changed"
    )
    for name in sources + ["all"]:
        idx = [i for i, r in enumerate(rows) if name == "all" or r["source"] == name]
        a, b = [old[i] for i in idx], [new[i] for i in idx]
        print(
            f"{name:<14} {len(idx):>5}  {_stat(a, np.mean):>9} -> {_stat(b, np.mean):<9} ({_delta(a, b)})  "
            f"{_stat(a, np.std):>7} -> {_stat(b, np.std):<7}  {_quantiles(a):>16} -> {_quantiles(b):<16}  "
            f"{a.count(None):>3} -> {b.count(None):<3}  {sum(_moved(x, y) > 1e-9 for x, y in zip(a, b))}"
        )
    over = sum(bool(r.get("over_budget")) for r in rows), sum(r.over_budget for r in results)
    print(f"over budget: {over[0]} -> {over[1]} samples")
    moved = sorted(range(len(rows)), key=lambda i: -_moved(old[i], new[i]))
    moved = [i for i in moved if _moved(old[i], new[i]) > 1e-9][:top]
    print(f"\n{len(moved)} samples whose reward changed most:" if moved else "\nno reward changed")
    for i in moved:
        fmt = lambda v: "unscored" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"  {rows[i]['sample']:>7} {rows[i]['source']:<13} {fmt(old[i])} -> {fmt(new[i])}")
        print(f"          was: {_one_line(rows[i]['reason'], 110)}\n          now: {_one_line(results[i].reason, 110)}")


def _moved(a: float | None, b: float | None) -> float:
    if a is None or b is None:
        return 0.0 if a is b else 2.0  # scored <-> unscored counts as the largest move
    return abs(a - b)


def _stat(values: list, fn) -> str:
    kept = [v for v in values if v is not None]
    return f"{fn(kept):.3f}" if kept else "-"


def _delta(a: list, b: list) -> str:
    ka, kb = [v for v in a if v is not None], [v for v in b if v is not None]
    return f"{np.mean(kb) - np.mean(ka):+.3f}" if ka and kb else "  -   "


def _quantiles(values: list) -> str:
    kept = [v for v in values if v is not None]
    return "/".join(f"{q:.2f}" for q in np.percentile(kept, [10, 50, 90])) if kept else "-"
