"""`posttrain rewards audit`: the reward-hack fuzzer (`rewards/audit.py`) on the tasks of a
task file, of a pipeline stage, or of the shipped generators for a named verifier; prints
a table per verifier (class, attempts, wins, voids, an example; the strict reference's
disagreements) or `--json`. Exit 1 if any attack won, any sample was left unscored, the
reference refuses what the verifier credits, or the verifier credited under 95 % of its
honest controls (no evidence, said in one line); 0 otherwise, 2 on bad input (one line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from posttrain.config.verifiers import verifier_facts
from posttrain.rewards.audit import AuditError
from posttrain.rewards.registry import Alone, audited, get_verifier


def _rows(path: str) -> list[dict]:
    """A task file: one JSON object (as `rewards try` reads), or JSON lines of them."""
    from posttrain.rewards.try_task import TryError, read_task_file

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AuditError(f"{path}: cannot read: {exc}") from None
    try:
        json.loads(text)
        return [read_task_file(path)]
    except json.JSONDecodeError:
        pass
    except TryError as exc:
        raise AuditError(str(exc)) from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AuditError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(row, dict) or row.get("verifier") not in audited():
            got = row.get("verifier") if isinstance(row, dict) else row
            raise AuditError(f"{path}:{number}: a row needs `verifier`, one of {', '.join(audited())} (got {got!r})")
        rows.append(row)
    if not rows:
        raise AuditError(f"{path}: no task rows")
    return rows


def _user_function(spec: str | None) -> str | None:
    """`module:function`, or `path/to/file.py:function` (its folder goes on the path, which
    the reward's worker processes inherit)."""
    if spec is None:
        return None
    module, sep, name = spec.rpartition(":")
    if not sep or not module or not name.isidentifier():
        raise AuditError(f"--reward {spec!r}: give module:function or FILE.py:function")
    if module.endswith(".py"):
        path = Path(module).expanduser().resolve()
        if not path.is_file():
            raise AuditError(f"--reward: {module}: no such file")
        sys.path.insert(0, str(path.parent))
        module = path.stem
    import importlib

    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise AuditError(f"--reward {spec!r}: cannot load it: {exc}") from None
    if not callable(function):
        raise AuditError(f"--reward {spec!r}: not a function")
    return f"{module}:{name}"


def _plan(args) -> list[tuple[str, object, list, int | None]]:
    """(verifier, reward source, tasks, length cap) for each verifier audited."""
    from posttrain.rewards.audit_tasks import generated_tasks

    if args.pipeline or args.stage:
        return _stage_plan(args)
    if args.task_file:
        from posttrain.rewards.try_task import task_of

        by: dict[str, list] = {}
        rewards: set = set()
        for path in args.task_file:
            for i, row in enumerate(_rows(path)):
                if args.verifier and row["verifier"] != args.verifier:
                    continue
                try:
                    task = task_of(row, f"{Path(path).stem}/{i}")
                except (ValueError, TypeError, KeyError) as exc:
                    raise AuditError(f"{path}: {exc}") from None
                by.setdefault(task.verifier, []).append(task)
                if verifier_facts(task.verifier).reward_function:
                    rewards.add(row.get("reward") or args.reward)
        if not by:
            raise AuditError(f"no task of verifier {args.verifier!r} in {', '.join(args.task_file)}")
        if len(rewards) > 1:
            raise AuditError(f"user rows with different reward functions: {sorted(map(str, rewards))}")
        plan = []
        for verifier, tasks in by.items():
            source, cap = _source(verifier, args, rewards)
            plan.append((verifier, source, tasks[: args.tasks or None], cap))
        return plan
    if not args.verifier:
        raise AuditError("give --verifier NAME (generated tasks), --task-file TASK.json, or --pipeline P --stage S")
    options = {"timeout_s": args.timeout, "env": args.env, "taskset": args.taskset, "taskset_args": _json(args)}
    try:
        tasks = generated_tasks(args.verifier, args.tasks or 4, args.seed, **options)
    except (ImportError, AttributeError) as exc:
        raise AuditError(f"verifier {args.verifier}: cannot generate tasks: {exc}") from None
    source, cap = _source(
        args.verifier, args, {args.reward} if verifier_facts(args.verifier).reward_function else set()
    )
    return [(args.verifier, source, tasks, cap)]


def _json(args) -> dict:
    if not args.taskset_args:
        return {}
    try:
        value = json.loads(args.taskset_args)
    except json.JSONDecodeError as exc:
        raise AuditError(f"--taskset-args: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise AuditError("--taskset-args: a JSON object")
    return value


def _source(verifier: str, args, rewards: set) -> tuple[object, int | None]:
    """The verifier's reward source outside a stage (the verifier table's `alone`): a user
    function from the rows or `--reward`, the GRM's config from `--reward`."""
    entry = get_verifier(verifier)
    if entry is None or entry.alone is None:
        raise AuditError(f"unknown verifier {verifier!r} (one of {', '.join(audited())})")
    reward = _user_function(next(iter(rewards), None)) if verifier_facts(verifier).reward_function else args.reward
    return entry.part("alone")(Alone(reward=reward, workers=args.workers))


def _stage_plan(args) -> list:
    from posttrain.config.files import load_pipeline
    from posttrain.rewards.audit_tasks import stage_tasks
    from posttrain.rewards.router import reward_router

    if not (args.pipeline and args.stage):
        raise AuditError("--pipeline and --stage go together")
    config = load_pipeline(args.pipeline)
    stages = {s.name: s for s in config.stages}
    stage = stages.get(args.stage)
    if stage is None:
        raise AuditError(f"{args.pipeline}: no stage {args.stage!r} (stages: {', '.join(stages)})")
    if not hasattr(stage, "reward") or not (hasattr(stage, "tasks") or hasattr(stage, "domains")):
        raise AuditError(f"{args.pipeline}: stage {args.stage!r} ({stage.type}) has no tasks scored by a reward")
    tasks = stage_tasks(stage, args.tasks or 4)
    router = reward_router(stage)
    plan = []
    for verifier, batch in tasks.items():
        if args.verifier and verifier != args.verifier:
            continue
        entry = get_verifier(verifier)
        if verifier not in router.sources or entry is None:
            print(f"note: stage {stage.name}: no reward source for {verifier} tasks: not audited", file=sys.stderr)
            continue
        plan.append((verifier, router, batch, entry.part("length_cap")(stage)))
    if not plan:
        raise AuditError(f"stage {stage.name}: no tasks to audit" + (f" for {args.verifier}" if args.verifier else ""))
    return plan


def audit(args) -> int:
    from posttrain.config.files import ConfigError
    from posttrain.rewards.audit import run_audit

    classes = None
    if args.classes:
        from posttrain.rewards.attack_classes import CLASSES as GENERATED
        from posttrain.rewards.attacks import CLASSES

        CLASSES = tuple(dict.fromkeys(CLASSES + GENERATED))
        classes = {c.strip() for c in args.classes.split(",") if c.strip()}
        unknown = classes - set(CLASSES)
        if unknown:
            print(
                f"posttrain rewards audit: unknown class(es) {sorted(unknown)} (classes: {', '.join(CLASSES)})",
                file=sys.stderr,
            )
            return 2
    if args.tasks is not None and args.tasks < 1:
        print("posttrain rewards audit: --tasks must be at least 1", file=sys.stderr)
        return 2
    try:
        plan = _plan(args)
    except (AuditError, ConfigError, ValueError) as exc:
        print(f"posttrain rewards audit: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    audits, closed = [], set()
    try:
        for verifier, source, tasks, cap in plan:
            audits.append(run_audit(verifier, source, tasks, classes, cap, args.quick))
    finally:
        for _, source, _, _ in plan:
            if id(source) not in closed and hasattr(source, "close"):
                closed.add(id(source))
                source.close()
        if any(verifier_facts(v).episode == "env" for v, *_ in plan):
            from posttrain.rollout.env_workers import close_all

            close_all()
    return _report(audits, args.json)


def _report(audits: list, as_json: bool) -> int:
    """Print the tables (or JSON) with the strict reference's check of each verifier; exit 1
    on any win, void or false positive, and on an audit without evidence (said in one line)."""
    from posttrain.rewards.audit import format_table, summary
    from posttrain.rewards.audit_reference import check, format_check, to_json

    checks = {id(a): check(a) for a in audits if not verifier_facts(a.verifier).judged}
    if as_json:
        result = summary(audits)
        for entry, a in zip(result["verifiers"], audits):
            if id(a) in checks:
                entry["reference"] = to_json(checks[id(a)])
        print(json.dumps(result, default=repr))
    else:
        lines = []
        for a in audits:  # each verifier's table without its blank line and total, then its check
            lines += format_table([a]).split("\n")[:-2]
            lines += format_check(checks[id(a)]) if id(a) in checks else []
            lines.append("")
        print("\n".join(lines + format_table(audits).split("\n")[-1:]))
    unproven = [ref for ref in checks.values() if not ref.evidence]
    for ref in unproven:
        print(f"posttrain rewards audit: {ref.no_evidence_line()}", file=sys.stderr)
    found = any(a.wins or a.voids for a in audits) or any(ref.false_positives for ref in checks.values())
    return 1 if found or unproven else 0
