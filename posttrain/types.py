"""The vocabulary passed between stages: tasks, engine completions, scored samples,
and the per-token training records the trainer consumes. Plain frozen dataclasses, no
heavy imports, so every layer can use them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

# the forms a task may ask its answer in (`Task.answer_form`), checked on the parsed answer
ANSWER_FORMS = ("simplified", "expanded", "factored", "decimal", "fraction")
AnswerForm = Literal["simplified", "expanded", "factored", "decimal", "fraction"]
_FORM_WORDS = (
    ("fraction", r"lowest terms|as an? (?:common |improper |reduced )?fraction|simplest fraction"),
    ("decimal", r"as a decimal|decimal (?:form|places?|number)|in decimal|significant (?:digits|figures)"),
    ("expanded", r"\bexpand\b|expanded form|\bmultiply out\b"),
    ("factored", r"^\W*factor(?:i[sz]e)?\b|\bfactor (?:the|this|completely|fully)\b|factored form|\bfactori[sz]e\b"),
    ("simplified", r"\bsimplify\b|simplest form|simplified form"),
)


def infer_answer_form(question: str) -> str | None:
    """The form a question asks its answer in, from its wording ("Expand ...", "... in lowest
    terms", "as a decimal"), or None."""
    for form, words in _FORM_WORDS:
        if re.search(words, question, re.IGNORECASE | re.MULTILINE):
            return form
    return None


@dataclass(frozen=True)
class Message:
    role: Literal["system", "user", "assistant", "tool"]
    content: str


@dataclass(frozen=True)
class Task:
    """One prompt and what is needed to score an answer to it."""

    task_id: str
    family: str
    messages: tuple[Message, ...]
    answer: str | None = None
    entry: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    verifier: str = "reasoning_gym"  # which reward source scores answers to this task
    # the form the question asks the answer in (simplified, expanded, factored, decimal,
    # fraction), checked on the parsed answer; none: any form of the value
    answer_form: str | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """Prompt token ids for an engine, with how many samples and how many new tokens."""

    prompt_ids: tuple[int, ...]
    n: int = 1
    max_tokens: int = 64


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass(frozen=True)
class Completion:
    """What an engine returns for one sampled response."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: str


@dataclass(frozen=True)
class RewardResult:
    """A reward with its reason; `ok=False` flags a sample that could not be scored;
    `over_budget` marks a response longer than its token budget (scored -1 for it)."""

    score: float
    reason: str
    source: str
    details: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    ok: bool = True
    over_budget: bool = False


@dataclass(frozen=True)
class Sample:
    """One finished trajectory: the task, the rendered prompt, and the engine's completion."""

    task: Task
    group_id: int
    prompt_ids: tuple[int, ...]
    completion: Completion
    policy_version: int = 0
    env: dict[str, Any] | None = field(default=None, hash=False, compare=False)  # agent episode's final state
    action_mask: tuple[int, ...] = ()  # 1 on the model's own tokens; empty: all of them

    @property
    def model_tokens(self) -> int:
        return sum(self.action_mask) if self.action_mask else len(self.completion.token_ids)


@dataclass(frozen=True)
class TrainSequence:
    """One sequence for the trainer. Per-token lists cover the response tokens only."""

    token_ids: tuple[int, ...]
    prompt_len: int
    advantages: tuple[float, ...]
    loss_mask: tuple[float, ...]
    logp_engine: tuple[float, ...] = ()
    stale: tuple[float, ...] = ()  # 1 where the token came from an older policy version

    @property
    def response_len(self) -> int:
        return len(self.token_ids) - self.prompt_len


@dataclass(frozen=True)
class LossSpec:
    """Which loss the trainer applies to a batch, and its settings."""

    kind: Literal["pg", "nll"]
    clip_eps_lo: float = 0.2
    clip_eps_hi: float = 0.28
    kl_beta: float = 0.0
    temperature: float = 1.0
    correction: Literal["none", "tis", "mask", "exclude"] = "none"
    tis_cap: float = 2.0
    mask_lo: float = 0.5
    mask_hi: float = 2.0
    correct_fresh: bool = False  # the correction also on fresh tokens (engine/trainer mismatch)
    minibatches: int = 1  # optimizer steps per batch (PPO); logp_old from before the first
    epochs: int = 1  # passes over the minibatches
