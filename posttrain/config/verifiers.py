"""What the lower layers know of each verifier: facts about its tasks, by its name.

A task names its verifier (`Task.verifier`). The schemas, the task loaders, the rollout's
episodes and the metrics ask these facts instead of comparing names. The verifier table
(`posttrain/rewards/registry.py`) holds the rest (how its reward source is built, its gold
check, its audit, how `rewards try` reads a row); registering a verifier there adds its
facts here. This module imports nothing heavy: `posttrain validate` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Entry = Literal["answer", "code", "reasoning_gym"]
Episode = Literal["agent", "env"]


@dataclass(frozen=True)
class VerifierFacts:
    """What a verifier's tasks are, as the code below the reward layer asks it."""

    name: str
    needs_answer: bool = False
    """It compares a response with the task's reference answer and cannot score without one."""
    reward_function: bool = False
    """It scores with a `reward: module:function` a task source may name."""
    answer_forms: bool = False
    """It reads the task's `answer_form` (a value form, or `choice`: one option letter)."""
    final_answer: bool = False
    """It scores a response's final answer against the task's reference: the audit's answer
    attacks and its strict reference apply."""
    judged: bool = False
    """A judge model reads the response (no reference answer): the audit checks it against no
    strict reference."""
    entry: Entry = "answer"
    """The shape of a task's `entry` it reads: the reference answer and metadata, a program's
    tests (`code`), or a reasoning-gym entry (question, answer, metadata)."""
    episode: Episode | None = None
    """Its tasks run as multi-turn episodes: with the built-in tools (`agent`) or in a user's
    environment workers (`env`); None: one response."""

    @property
    def code(self) -> bool:
        """Its answers are programs (run against tests)."""
        return self.entry == "code"


VERIFIER_FACTS: dict[str, VerifierFacts] = {}


def register_verifier_facts(facts: VerifierFacts) -> VerifierFacts:
    if facts.name in VERIFIER_FACTS and VERIFIER_FACTS[facts.name] != facts:
        raise ValueError(f"verifier {facts.name!r} is already registered with other facts")
    VERIFIER_FACTS[facts.name] = facts
    return facts


def unregister_verifier_facts(name: str) -> None:
    VERIFIER_FACTS.pop(name)


def verifier_facts(name: str) -> VerifierFacts:
    """The facts of a verifier; one that has none registered has the defaults (one response,
    an answer entry)."""
    return VERIFIER_FACTS.get(name) or VerifierFacts(name)


for _facts in (
    VerifierFacts("code", entry="code"),
    VerifierFacts("math", needs_answer=True, answer_forms=True, final_answer=True),
    VerifierFacts("reasoning_gym", needs_answer=True, entry="reasoning_gym", final_answer=True),
    VerifierFacts("user", reward_function=True, answer_forms=True, final_answer=True),
    VerifierFacts("agent", episode="agent"),
    VerifierFacts("env", episode="env"),
    VerifierFacts("verifiers"),
    VerifierFacts("judgement"),
    VerifierFacts("grm", judged=True),
):
    register_verifier_facts(_facts)
