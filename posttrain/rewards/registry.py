"""The verifier table: one entry per verifier name, what the rest of the code asks of it.

A task names its verifier (`Task.verifier`); a `Verifier` entry under that name says how a
stage builds its reward source (from the stage, the leaf sources it scores and the slot's
judge), its gold check, its reward source outside a stage (`rewards try` and `rewards
audit`), how `rewards try` reads a task row and scores a response, the audit's tasks and
probes, and the facts the lower layers read (`config/verifiers.py`: `register` adds them).

The router, the gold check, `rewards try` and `rewards audit` ask this table; nothing else
compares verifier names. Adding a verifier: its reward source in its own module, one
`register(Verifier(...))` line (docs/add-a-verifier.md). Entries import their reward
sources when called, and name a part in a module that reads this table by its path
(`"module:function"`): importing the table loads no verifier, sandbox, judge, try or audit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from posttrain.config.lazy import Lazy, lazy_parts
from posttrain.config.verifiers import VerifierFacts, register_verifier_facts, unregister_verifier_facts
from posttrain.data.registry import verifiers_used
from posttrain.rewards.base import RewardSource
from posttrain.types import Task


@dataclass(frozen=True)
class Alone:
    """What a reward source outside a stage is built from (`rewards try`, `rewards audit`)."""

    reward: str | None = None  # a user function `module:function`, or the GRM's config file (`--reward`)
    workers: int = 2
    leaves: tuple = ()  # task sources it scores, where it reads them (a `verifiers` taskset)
    grm: Any = None  # a GRM config, instead of reading `reward`


@dataclass(frozen=True)
class ProbeCall:
    """One task of an audit: what the verifier's probes are built from."""

    source: Any  # the reward source audited (a router for a pipeline stage)
    task: Task
    classes: set[str] | None  # attack classes wanted; None: all
    number: int  # the task's place in the audit
    quick: bool  # each answer payload in one presentation per task (in turn), not in all
    length_cap: int | None


@dataclass(frozen=True)
class TryCall:
    """`rewards try`: one task row, one response, and the command's options."""

    row: dict
    response: str
    reward: str | None  # `--reward`: the GRM's config
    as_json: bool
    tokens: int | None
    name: str  # the task's id where the row has none (the task file's stem)
    where: str  # the task file, for errors


def _none(*args) -> None:
    return None


@dataclass(frozen=True)
class Verifier:
    """A verifier: its facts and how each part of the code uses it. Each of its functions
    (its parts, `PARTS`) may be given as its path, `"package.module:function"`, imported
    when the part is first asked for (`part`, `config/lazy.py`)."""

    facts: VerifierFacts
    build: Callable[[Any, list, Any], RewardSource | None] | str
    """(stage, the stage's leaf sources whose tasks it scores, the slot's judge) -> the stage's
    reward source, or None where the stage needs none."""
    alone: Callable[[Alone], tuple[RewardSource, int | None]] | str | None = None
    """Its reward source outside a stage, and the response length cap its probes aim past."""
    gold: Callable[[Any, Any], RewardSource | None] | str = _none
    """(stage or None, leaf source) -> the source that scores reference answers as responses
    (the stage's `answer_format`); None: its tasks have no gold answer to check."""
    read_row: Callable[[dict, str], Task] | str | None = None
    """(task row, fallback id) -> its Task (`rewards try`, audit task files); ValueError names
    the problem. None: the plain row reader (`try_task.answer_row`)."""
    try_row: Callable[[TryCall], dict] | str | None = None
    """Score a response to a row (`rewards try`); None: `rewards try` does not take it."""
    audit_tasks: Callable[[str, int, int, dict], list[Task]] | str | None = None
    """(name, n, seed, options) -> n tasks from the shipped generators; None: not audited."""
    probes: Callable[[ProbeCall], list] | str | None = None
    """The audit's honest answers and attacks on one task."""
    length_cap: Callable[[Any], int | None] | str = _none
    """(stage) -> the response length cap its probes aim past in a stage's audit."""
    missing: str = ""
    """Said of its samples when a stage has no source for it (after "no reward source ...")."""

    @property
    def name(self) -> str:
        return self.facts.name

    def __post_init__(self) -> None:
        lazy_parts(self, PARTS, f"verifier {self.name!r}")

    def part(self, field: str) -> Callable[..., Any]:
        """The function in `field` (one of `PARTS`), imported now where the entry names its path."""
        value = getattr(self, field)
        return value.resolve() if isinstance(value, Lazy) else value


PARTS = ("build", "alone", "gold", "read_row", "try_row", "audit_tasks", "probes", "length_cap")


VERIFIERS: dict[str, Verifier] = {}


def register(verifier: Verifier) -> Verifier:
    """Add a verifier (and its facts to `config/verifiers.py`)."""
    if verifier.name in VERIFIERS:
        raise ValueError(f"verifier {verifier.name!r} is already registered")
    register_verifier_facts(verifier.facts)
    VERIFIERS[verifier.name] = verifier
    return verifier


def unregister(name: str) -> None:
    """Take a registered verifier out again, facts included (a test's toy verifier)."""
    VERIFIERS.pop(name)
    unregister_verifier_facts(name)


def get_verifier(name: str) -> Verifier | None:
    return VERIFIERS.get(name)


def audited() -> tuple[str, ...]:
    """The verifiers `rewards audit` can attack, in the table's order."""
    return tuple(name for name, v in VERIFIERS.items() if v.probes is not None)


def tried() -> tuple[str, ...]:
    """The verifiers `rewards try` scores a row for, in the table's order."""
    return tuple(name for name, v in VERIFIERS.items() if v.try_row is not None)


def stage_sources(stage, judge=None) -> dict[str, RewardSource]:
    """Every reward source a stage needs, by verifier name (the reward router's table)."""
    scored = verifiers_used(leaf for _, leaf in stage.task_leaves())
    sources = {}
    for name, entry in VERIFIERS.items():
        source = entry.part("build")(stage, scored.get(name, []), judge)
        if source is not None:
            sources[name] = source
    return sources


# ---------------------------------------------------------------- the shipped verifiers


def _answer_format(stage) -> str:
    return getattr(getattr(stage, "reward", None), "answer_format", "auto")


def _build_math(stage, leaves, judge):
    from posttrain.rewards.math_verifier import MathVerifier

    return MathVerifier(stage.reward.answer_format, stage.reward.answer_timeout_s)


def _gold_math(stage, leaf):
    from posttrain.rewards.math_verifier import MathVerifier

    return MathVerifier(_answer_format(stage))


def _alone_math(alone: Alone):
    from posttrain.rewards.math_verifier import MathVerifier

    return MathVerifier(), None


def _build_reasoning_gym(stage, leaves, judge):
    from posttrain.rewards.reasoning_gym import ReasoningGymVerifier

    reward = stage.reward
    return ReasoningGymVerifier(reward.answer_format, reward.answer_timeout_s, reward.family_partial_credit)


def _gold_reasoning_gym(stage, leaf):
    from posttrain.rewards.reasoning_gym import ReasoningGymVerifier

    return ReasoningGymVerifier(_answer_format(stage))


def _alone_reasoning_gym(alone: Alone):
    from posttrain.rewards.reasoning_gym import ReasoningGymVerifier

    return ReasoningGymVerifier(), None


def _build_agent(stage, leaves, judge):
    from posttrain.rewards.agent_verifier import AgentVerifier

    return AgentVerifier(stage.reward.answer_timeout_s)


def _alone_agent(alone: Alone):
    from posttrain.rewards.agent_verifier import AgentVerifier

    return AgentVerifier(), None


def _build_code(stage, leaves, judge):
    if not leaves:
        return None
    from posttrain.rewards.code import CodeVerifier

    return CodeVerifier(max(c.workers for c in leaves))  # each task carries its own timeout_s


def _alone_code(alone: Alone):
    from posttrain.rewards.code import CodeVerifier

    return CodeVerifier(alone.workers), None


def _build_user(stage, leaves, judge):
    if len({u.reward for u in leaves}) > 1:
        raise ValueError(f"stage {stage.name}: user task sources with different reward functions")
    if not leaves:
        return None
    from posttrain.rewards.user import UserReward

    first = leaves[0]
    return UserReward(first.reward, first.reward_timeout_s, answer_timeout_s=stage.reward.answer_timeout_s)


def _gold_user(stage, leaf):
    from posttrain.rewards.user import UserReward

    return UserReward(getattr(leaf, "reward", None), getattr(leaf, "reward_timeout_s", 10.0))


def _alone_user(alone: Alone):
    from posttrain.rewards.user import UserReward

    return UserReward(alone.reward), None


def _build_env(stage, leaves, judge):
    if not leaves:
        return None
    from posttrain.rewards.env_reward import EnvReward

    return EnvReward()


def _alone_env(alone: Alone):
    from posttrain.rewards.env_reward import EnvReward

    return EnvReward(), None


def _build_verifiers(stage, leaves, judge):
    return _alone_verifiers(Alone(leaves=tuple(leaves)))[0] if leaves else None


def _alone_verifiers(alone: Alone):
    from posttrain.rewards.vf import VerifiersReward

    return VerifiersReward(list(alone.leaves)), None


def _build_judgement(stage, leaves, judge):
    if not leaves:
        return None
    from posttrain.rewards.judgement import JudgementVerifier

    reason_chars = stage.reward.grm.reason_chars if stage.reward.grm is not None else 80
    return JudgementVerifier(reason_chars, stage.reward.answer_timeout_s)


def _build_grm(stage, leaves, judge):
    if stage.reward.grm is None:
        return None
    from posttrain.rewards.grm import GRM

    return GRM(stage.reward.grm, shared=judge)


def _alone_grm(alone: Alone):
    from posttrain.rewards.grm import GRM

    if alone.grm is not None:
        return GRM(alone.grm), alone.grm.length_cap
    from posttrain.rewards.grm_config import load_grm_config

    config = load_grm_config(alone.reward)
    return GRM(config), config.length_cap


def _grm_cap(stage) -> int | None:
    return stage.reward.grm.length_cap if stage.reward.grm else None


# `rewards try` and `rewards audit` read this table, so it names their parts by path
# (imported when first asked for, `Verifier.part`) rather than importing them.

# the answer verifiers: `rewards try` reads their rows, the audit attacks the final answer
_ANSWER = {
    "try_row": "posttrain.rewards.try_task:try_scored",
    "audit_tasks": "posttrain.rewards.audit_tasks:answer_tasks",
    "probes": "posttrain.rewards.audit:answer_call_probes",
}

register(
    Verifier(
        VerifierFacts("code", entry="code"),
        _build_code,
        _alone_code,
        read_row="posttrain.rewards.try_task:code_row",
        try_row="posttrain.rewards.try_task:try_scored",
        audit_tasks="posttrain.rewards.audit_tasks:code_tasks",
        probes="posttrain.rewards.audit:code_call_probes",
    )
)
register(
    Verifier(
        VerifierFacts("math", needs_answer=True, answer_forms=True, final_answer=True),
        _build_math,
        _alone_math,
        _gold_math,
        read_row="posttrain.rewards.try_task:math_row",
        **_ANSWER,
    )
)
register(
    Verifier(
        VerifierFacts("reasoning_gym", needs_answer=True, entry="reasoning_gym", final_answer=True),
        _build_reasoning_gym,
        _alone_reasoning_gym,
        _gold_reasoning_gym,
        read_row="posttrain.rewards.try_task:family_row",
        **_ANSWER,
    )
)
register(
    Verifier(
        VerifierFacts("user", reward_function=True, answer_forms=True, final_answer=True),
        _build_user,
        _alone_user,
        _gold_user,
        read_row="posttrain.rewards.try_task:user_row",
        **_ANSWER,
    )
)
register(
    Verifier(
        VerifierFacts("agent", episode="agent"),
        _build_agent,
        _alone_agent,
        read_row="posttrain.rewards.try_task:agent_row",
        try_row="posttrain.rewards.try_task:try_scored",
        audit_tasks="posttrain.rewards.audit_tasks:agent_tasks",
        probes="posttrain.rewards.audit:agent_call_probes",
    )
)
register(
    Verifier(
        VerifierFacts("env", episode="env"),
        _build_env,
        _alone_env,
        audit_tasks="posttrain.rewards.audit_tasks:env_tasks",
        probes="posttrain.rewards.audit:env_call_probes",
    )
)
register(
    Verifier(
        VerifierFacts("verifiers"),
        _build_verifiers,
        _alone_verifiers,
        audit_tasks="posttrain.rewards.audit_tasks:taskset_tasks",
        probes="posttrain.rewards.audit:verifiers_call_probes",
    )
)
register(Verifier(VerifierFacts("judgement"), _build_judgement))
register(
    Verifier(
        VerifierFacts("grm", judged=True),
        _build_grm,
        _alone_grm,
        try_row="posttrain.rewards.try_task:try_judged",
        audit_tasks="posttrain.rewards.audit_tasks:writing_tasks",
        probes="posttrain.rewards.audit:grm_call_probes",
        length_cap=_grm_cap,
        missing="; open-ended tasks are scored by the generative reward model",
    )
)
