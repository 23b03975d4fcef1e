"""The task-source table: one entry per source type, what the rest of the code asks of it.

A `SourceKind` names the type's schema (its `type:` literal is the key) and says how its
tasks are built, which verifiers score them (the reward router builds those), what the
pipeline's preflight reads of it, how its gold is checked, and its eval (held-out) part.
The schema answers the rest as class facts (`config/base.py:SourceSchema`).

Task building, the held-out check, the router, the gold check and the preflight ask this
table; nothing else chains `isinstance` over source types. Adding a source: its schema and
its loader in their own module, one `register(...)` line. Builders import their loaders
when called: `posttrain validate` reads this table without reasoning-gym or datasets.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from posttrain.config import (
    AgentTasks,
    ArithmeticTasks,
    CodingTasks,
    EnvTasks,
    HFTasks,
    JudgementTasks,
    MixtureTasks,
    ReasoningGymTasks,
    UserTasks,
    VerifiersTasks,
    WritingTasks,
)
from posttrain.config.lazy import lazy_parts
from posttrain.types import Task

Gold = Literal["answers", "episodes"]


def no_preflight(stage, leaf, where: str) -> None:
    """A generated source: its tasks are read when it is built (the held-out check does)."""
    return None


def eval_part(source, offset: int):
    """The eval counterpart of a training source: its `eval` part where it has one, and its
    generator seed moved by `offset`."""
    update: dict[str, Any] = {}
    if "seed" in type(source).model_fields:
        update["seed"] = source.seed + offset
    if "part" in type(source).model_fields:
        update["part"] = "eval"
    return source.model_copy(update=update)


@dataclass(frozen=True)
class SourceKind:
    """How tasks are built, scored, checked and held out for a source type. Each of its
    functions (`SOURCE_PARTS`) may be given as its path, `"package.module:function"`,
    imported when first called (`config/lazy.py`)."""

    schema: type
    build: Callable[[Any], list[Task]] | str
    """The tasks of a configured source (a leaf; a mixture builds its parts through the table)."""
    uses: Callable[[Any], tuple[str, ...]] | str
    """The verifier names its tasks are scored by: the reward router builds those sources."""
    preflight: Callable[[Any, Any, str], list[Task] | None] | str = no_preflight
    """(stage, source, key path) -> what `posttrain validate` and a run's start read of it,
    raising a `ConfigError` naming the key; the tasks returned are gold-checked."""
    gold: Gold = "answers"
    """Its gold check: reference answers scored by its verifier, or gold episodes replayed."""
    generated: bool = False
    """Its tasks are a pure function of its config and installed code (a `path` aside): the
    held-out check caches their prompts' fingerprints on disk."""
    held_out: Callable[[Any, int], Any] | str = eval_part
    """(training source, seed offset) -> its eval counterpart."""

    def __post_init__(self) -> None:
        lazy_parts(self, SOURCE_PARTS, f"task source {self.name!r}")

    @property
    def name(self) -> str:
        return self.schema.type_name()


SOURCE_PARTS = ("build", "uses", "preflight", "held_out")


SOURCE_KINDS: dict[str, SourceKind] = {}


def register(kind: SourceKind) -> SourceKind:
    if kind.name in SOURCE_KINDS:
        raise ValueError(f"task source type {kind.name!r} is already registered")
    SOURCE_KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Take a registered type out again (a test's toy source)."""
    SOURCE_KINDS.pop(name)


def source_kind(source) -> SourceKind:
    """The registered type of a configured source."""
    kind = SOURCE_KINDS.get(getattr(source, "type", None))
    if kind is None:
        raise TypeError(f"unknown task source {type(source).__name__}")
    return kind


def build_tasks(source) -> list[Task]:
    return source_kind(source).build(source)


def verifiers_used(leaves) -> dict[str, list]:
    """Verifier name -> the leaf sources whose tasks it scores, in the leaves' order."""
    out: dict[str, list] = {}
    for leaf in leaves:
        for name in dict.fromkeys(source_kind(leaf).uses(leaf)):
            out.setdefault(name, []).append(leaf)
    return out


# ---------------------------------------------------------------- the shipped sources


def _mixture(source) -> list[Task]:
    tasks = [t for leaf in source.sources for t in build_tasks(leaf)]
    random.Random(source.seed).shuffle(tasks)
    return tasks


def _mixture_uses(source) -> tuple[str, ...]:
    return tuple(name for leaf in source.sources for name in source_kind(leaf).uses(leaf))


def _mixture_held_out(source, offset: int):
    held = eval_part(source, offset)
    return held.model_copy(update={"sources": [source_kind(s).held_out(s, offset) for s in source.sources]})


def _named(*names: str) -> Callable[[Any], tuple[str, ...]]:
    return lambda source: names


def _own_verifier(source) -> tuple[str, ...]:
    return (source.verifier,)


def _env_uses(source) -> tuple[str, ...]:
    """An environment's tasks are scored by `env`, which asks the verifier it names."""
    return ("env", source.verifier)


# The shipped sources' builders and preflights are named by path: imported when first called,
# they may build tasks through this table themselves.
register(SourceKind(MixtureTasks, _mixture, _mixture_uses, held_out=_mixture_held_out))
register(SourceKind(AgentTasks, "posttrain.data.builtin_env:agent_tasks", _named("agent"), generated=True))
register(SourceKind(WritingTasks, "posttrain.data.writing:writing_tasks", _named("grm"), generated=True))
register(SourceKind(JudgementTasks, "posttrain.data.judgements:judgement_tasks", _named("judgement")))
register(
    SourceKind(
        ReasoningGymTasks,
        "posttrain.data.families:reasoning_gym_tasks",
        _named("reasoning_gym"),
        "posttrain.data.preflight:preflight_families",
        generated=True,
    )
)
register(SourceKind(ArithmeticTasks, "posttrain.data.families:arithmetic_tasks", _named("math"), generated=True))
register(
    SourceKind(UserTasks, "posttrain.data.user:user_tasks", _named("user"), "posttrain.data.preflight:preflight_user")
)
register(
    SourceKind(
        CodingTasks,
        "posttrain.data.coding:coding_tasks",
        _named("code"),
        "posttrain.data.preflight:preflight_coding",
        generated=True,
    )
)
register(SourceKind(HFTasks, "posttrain.data.hf:hf_tasks", _own_verifier, "posttrain.data.preflight:preflight_own"))
register(
    SourceKind(
        EnvTasks, "posttrain.data.env:env_tasks", _env_uses, "posttrain.data.preflight:preflight_own", gold="episodes"
    )
)
register(
    SourceKind(
        VerifiersTasks,
        "posttrain.data.vf:verifiers_tasks",
        _named("verifiers"),
        "posttrain.data.preflight:preflight_own",
    )
)
