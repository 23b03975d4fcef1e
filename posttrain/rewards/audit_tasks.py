"""Tasks for the reward-hack fuzzer (`audit.py`): from the shipped generators for a verifier
(several families each, spread over them), from a pipeline stage's task sources, and the
reward source that scores each verifier's tasks."""

from __future__ import annotations

from dataclasses import replace

from posttrain.rewards.audit import ANSWER_VERIFIERS, VERIFIERS, AuditError
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
    """`n` tasks from the shipped generators for `verifier` (several families each)."""
    from posttrain import config as c
    from posttrain.data.tasks import generate_tasks

    if verifier == "code":
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
    if verifier in ANSWER_VERIFIERS:
        families = [c.ReasoningGymFamily(name=f) for f in RG_FAMILIES]
        rg = generate_tasks(c.ReasoningGymTasks(families=families, size=max(n, len(families)), seed=seed))
        rg = _spread_tasks(sorted(rg, key=lambda t: t.task_id), n)
        if verifier == "reasoning_gym":
            return rg
        sums = generate_tasks(c.ArithmeticTasks(type="arithmetic", size=1, seed=seed))
        rows = [replace(t, verifier=verifier, entry={"answer": t.answer, "metadata": {}}) for t in rg]
        tasks = [replace(t, verifier=verifier) for t in sums] + rows
        return tasks[:n]
    if verifier == "agent":
        return _spread_tasks(
            generate_tasks(c.AgentTasks(type="agent", families=list(_AGENT), size=6 * n, seed=seed)), n
        )
    if verifier == "env":
        source = c.EnvTasks(type="env", env=options.get("env") or DEFAULT_ENV, size=4 * n, seed=seed, workers=1)
        return _spread_tasks(generate_tasks(source), n)
    if verifier == "verifiers":
        if not options.get("taskset"):
            raise AuditError("verifier verifiers: name a taskset with --taskset (none ships with posttrain)")
        source = c.VerifiersTasks(type="verifiers", taskset=options["taskset"], args=options.get("taskset_args") or {})
        return generate_tasks(source.model_copy(update={"size": n}))
    if verifier == "grm":
        return generate_tasks(c.WritingTasks(type="writing", size=n, seed=seed))
    raise AuditError(f"unknown verifier {verifier!r} (one of {', '.join(VERIFIERS)})")


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
    """The verifier a stage would build for tasks of `verifier` (the reward router's choices)."""
    if verifier == "code":
        from posttrain.rewards.code import CodeVerifier

        return CodeVerifier(workers)
    if verifier == "math":
        from posttrain.rewards.math_verifier import MathVerifier

        return MathVerifier()
    if verifier == "reasoning_gym":
        from posttrain.rewards.reasoning_gym import ReasoningGymVerifier

        return ReasoningGymVerifier()
    if verifier == "user":
        from posttrain.rewards.user import UserReward

        return UserReward(user_reward)
    if verifier == "agent":
        from posttrain.rewards.agent_verifier import AgentVerifier

        return AgentVerifier()
    if verifier == "env":
        from posttrain.rewards.env_reward import EnvReward

        return EnvReward()
    if verifier == "verifiers":
        from posttrain.rewards.vf import VerifiersReward

        return VerifiersReward(list(leaves))
    if verifier == "grm":
        from posttrain.rewards.grm import GRM

        return GRM(grm)
    raise AuditError(f"unknown verifier {verifier!r} (one of {', '.join(VERIFIERS)})")


def stage_tasks(stage, n: int) -> dict[str, list[Task]]:
    """Up to `n` tasks per verifier of a pipeline stage's task sources (each leaf source
    generated at a small size)."""
    from posttrain.data.tasks import generate_tasks
    from posttrain.rewards.router import task_leaves

    by: dict[str, list[Task]] = {}
    for leaf in task_leaves(stage):
        small = leaf.model_copy(update={"size": min(leaf.size or 4 * n, 4 * n)}) if hasattr(leaf, "size") else leaf
        for task in generate_tasks(small):
            by.setdefault(task.verifier, []).append(task)
    return {v: _spread_tasks(ts, n) for v, ts in by.items()}
