"""Tasks for the reward-hack fuzzer (`audit.py`): from the shipped generators for a verifier
(several families each, spread over them), from a pipeline stage's task sources, and the
reward source that scores each verifier's tasks."""

from __future__ import annotations

from dataclasses import replace

from posttrain.config.verifiers import verifier_facts
from posttrain.rewards.audit import AuditError
from posttrain.rewards.registry import Alone, audited, get_verifier
from posttrain.types import Task

# reasoning-gym families the audit generates: those of the shipped pipelines, and some whose
# answers are negative, decimal, fractions in lowest terms or expanded polynomials
RG_FAMILIES = (
    "basic_arithmetic",
    "chain_sum",
    "leg_counting",
    "products",
    "fraction_simplification",
    "decimal_arithmetic",
    "polynomial_multiplication",
    "simple_equations",
)
DEFAULT_ENV = "examples.kv_env:KVStore"


def generated_tasks(verifier: str, n: int, seed: int = 0, **options) -> list[Task]:
    """`n` tasks from the shipped generators for `verifier` (several families each), as the
    verifier table's `audit_tasks` makes them."""
    entry = get_verifier(verifier)
    if entry is None or entry.audit_tasks is None:
        raise AuditError(f"unknown verifier {verifier!r} (one of {', '.join(audited())})")
    return entry.part("audit_tasks")(verifier, n, seed, options)


def code_tasks(verifier: str, n: int, seed: int, options: dict) -> list[Task]:
    from posttrain import config as c
    from posttrain.data.tasks import generate_tasks

    timeout = options.get("timeout_s") or 3.0
    tasks = generate_tasks(c.CodingTasks(type="coding", size=max(n - n // 3, 1), seed=seed, timeout_s=timeout))
    if n >= 2:
        tasks.append(feedback_task(timeout))
    if n >= 3:
        tasks += generate_tasks(c.CodingTasks(type="coding", split="offset", size=1, seed=seed, timeout_s=timeout))
    if n >= 4:
        try:
            tasks += generate_tasks(c.CodingTasks(type="coding", split="humaneval", size=1, timeout_s=timeout))
        except ImportError:
            pass
    return _spread_tasks(tasks, n)


def answer_tasks(verifier: str, n: int, seed: int, options: dict) -> list[Task]:
    """reasoning-gym tasks (and a chain sum), their rows as `verifier` reads them: a
    reasoning-gym entry for `reasoning_gym`, the answer for the others."""
    from posttrain import config as c
    from posttrain.data.tasks import generate_tasks

    families = [c.ReasoningGymFamily(name=f) for f in RG_FAMILIES]
    rg = generate_tasks(c.ReasoningGymTasks(families=families, size=max(n, len(families)), seed=seed))
    rg = _spread_tasks(sorted(rg, key=lambda t: t.task_id), n)
    if verifier_facts(verifier).entry == "reasoning_gym":
        return rg
    sums = generate_tasks(c.ArithmeticTasks(type="arithmetic", size=1, seed=seed))
    rows = [replace(t, verifier=verifier, entry={"answer": t.answer, "metadata": {}}) for t in rg]
    tasks = [replace(t, verifier=verifier) for t in sums] + rows
    return tasks[:n]


def agent_tasks(verifier: str, n: int, seed: int, options: dict) -> list[Task]:
    from posttrain import config as c
    from posttrain.data.tasks import generate_tasks

    return _spread_tasks(generate_tasks(c.AgentTasks(type="agent", families=list(_AGENT), size=6 * n, seed=seed)), n)


def env_tasks(verifier: str, n: int, seed: int, options: dict) -> list[Task]:
    from posttrain import config as c
    from posttrain.data.tasks import generate_tasks

    source = c.EnvTasks(type="env", env=options.get("env") or DEFAULT_ENV, size=4 * n, seed=seed, workers=1)
    return _spread_tasks(generate_tasks(source), n)


def taskset_tasks(verifier: str, n: int, seed: int, options: dict) -> list[Task]:
    from posttrain import config as c
    from posttrain.data.tasks import generate_tasks

    if not options.get("taskset"):
        raise AuditError("verifier verifiers: name a taskset with --taskset (none ships with posttrain)")
    source = c.VerifiersTasks(type="verifiers", taskset=options["taskset"], args=options.get("taskset_args") or {})
    return generate_tasks(source.model_copy(update={"size": n}))


def writing_tasks(verifier: str, n: int, seed: int, options: dict) -> list[Task]:
    from posttrain import config as c
    from posttrain.data.tasks import generate_tasks

    return generate_tasks(c.WritingTasks(type="writing", size=n, seed=seed))


def feedback_task(timeout_s: float) -> Task:
    """A probe of the code verifier's machinery: a task whose tests pass what the program
    returned back into the next call (as users' tests may; no shipped generator's do)."""
    from posttrain.types import Message

    entry = {
        "entry_point": "solve",
        "tests": ["assert solve(1) == 2", "assert solve(solve(1)) == 3", "assert solve(solve([1])[0]) == 3"],
        "reward": "all_pass",
        "timeout_s": timeout_s,
    }
    prompt = "Write solve(x): return x + 1 for a number x, and [x[0] + 1] for a list x."
    answer = "```python\ndef solve(x):\n    return [x[0] + 1] if isinstance(x, list) else x + 1\n```"
    return Task("audit/feedback/0", "audit_feedback", (Message("user", prompt),), answer, entry, "code")


_AGENT = ("calculator", "arithmetic", "kv_store", "kv_recall", "lookup", "lookup_store")


def _spread_tasks(tasks: list[Task], n: int) -> list[Task]:
    """`n` tasks, one family after another (round robin), so that a few cover every family."""
    by: dict[str, list[Task]] = {}
    for t in tasks:
        by.setdefault(t.family, []).append(t)
    out: list[Task] = []
    while len(out) < n and any(by.values()):
        for family in list(by):
            if by[family] and len(out) < n:
                out.append(by[family].pop(0))
    return out


def source_for(verifier: str, *, user_reward: str | None = None, grm=None, workers: int = 2, leaves=()):
    """The verifier's reward source outside a stage (the verifier table's `alone`)."""
    entry = get_verifier(verifier)
    if entry is None or entry.alone is None:
        raise AuditError(f"unknown verifier {verifier!r} (one of {', '.join(audited())})")
    return entry.part("alone")(Alone(reward=user_reward, workers=workers, leaves=tuple(leaves), grm=grm))[0]


def stage_tasks(stage, n: int) -> dict[str, list[Task]]:
    """Up to `n` tasks per verifier of a pipeline stage's task sources (each leaf source
    generated at a small size)."""
    from posttrain.data.tasks import generate_tasks

    by: dict[str, list[Task]] = {}
    for _, leaf in stage.task_leaves():
        small = leaf.model_copy(update={"size": min(leaf.size or 4 * n, 4 * n)}) if hasattr(leaf, "size") else leaf
        for task in generate_tasks(small):
            by.setdefault(task.verifier, []).append(task)
    return {v: _spread_tasks(ts, n) for v, ts in by.items()}
