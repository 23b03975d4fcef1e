"""The vocabulary passed between stages: tasks, engine completions, scored samples,
and the per-token training records the trainer consumes. Plain frozen dataclasses, no
heavy imports, so every layer can use them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
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


# What went wrong on a sample, machine-readable: `RewardResult.details["fault"]` (set where
# the fault happens; the RL step counts them, records/faults.py). A fault is the user's piece
# failing (their environment, reward function or judge), never the policy's answer being wrong.
Fault = Literal["env_error", "env_timeout", "reward_raised", "reward_timeout", "judge_unreadable"]
FAULTS: tuple[Fault, ...] = ("env_error", "env_timeout", "reward_raised", "reward_timeout", "judge_unreadable")


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
class TeacherTopK:
    """A teacher's k most likely next tokens at each response position of a sequence, and
    their logprobs: arrays of shape [response tokens, k] (numpy: int ids, float logprobs)."""

    ids: Any
    logp: Any

    @property
    def k(self) -> int:
        return int(self.ids.shape[-1])


@dataclass(frozen=True)
class TrainSequence:
    """One sequence for the trainer. Per-token lists cover the response tokens only."""

    token_ids: tuple[int, ...]
    prompt_len: int
    advantages: tuple[float, ...]
    loss_mask: tuple[float, ...]
    logp_engine: tuple[float, ...] = ()
    stale: tuple[float, ...] = ()  # 1 where the token came from an older policy version
    teacher: TeacherTopK | None = field(default=None, compare=False)  # MOPD's distill_topk

    @property
    def response_len(self) -> int:
        return len(self.token_ids) - self.prompt_len


@dataclass(frozen=True)
class LossSpec:
    """Which loss the trainer applies to a batch, and its settings. It has no defaults of
    its own: `posttrain.train.spec.loss_spec` fills it from the config (config/algo.py is
    the one place the defaults are written). A correction's settings are None where that
    correction has none (`tis_cap` is tis's, `mask_lo`/`mask_hi` mask's)."""

    kind: Literal["pg", "nll"]
    clip_eps_lo: float
    clip_eps_hi: float
    kl_beta: float
    temperature: float
    correction: Literal["none", "tis", "mask", "exclude"]
    tis_cap: float | None
    mask_lo: float | None
    mask_hi: float | None
    correct_fresh: bool  # the correction also on fresh tokens (engine/trainer mismatch)
    distill_coef: float  # weight of the top-k KL to the teacher (sequences with `teacher`)
    minibatches: int  # optimizer steps per batch (PPO); logp_old from before the first
    epochs: int  # passes over the minibatches
    entropy_coef: float  # weight of the entropy bonus (pg); RL stages set it each step (algo/entropy.py)
    entropy_target: float | None  # adaptive bonus: its entropy is measured over every sequence (none left out)


@dataclass(frozen=True)
class LoadedModel:
    """What the trainer ranks report after loading a model."""

    parameters: int
    tied_embeddings: bool


@dataclass(frozen=True)
class TrainSums:
    """Sums a train step returns, in which every token counts once: over tokens (trained
    tokens, stale and fresh sampled tokens with their correction weights, entropy;
    positions through the model, padding included, and the sequences' own tokens) and
    over optimizer steps (loss, clipped tokens, kl, distill_kl). Ranks' sums add (`+`)."""

    loss: float = 0.0
    clip_tokens: float = 0.0
    kl: float = 0.0
    distill_kl: float = 0.0
    tokens: float = 0.0
    stale_tokens: float = 0.0
    offpolicy_weight: float = 0.0
    fresh_tokens: float = 0.0
    fresh_weight: float = 0.0
    entropy: float = 0.0
    positions: float = 0.0
    sequence_tokens: float = 0.0

    def __add__(self, other: TrainSums) -> TrainSums:
        return TrainSums(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


@dataclass(frozen=True)
class TrainStepResult:
    """What one train step hands back (one rank's, or the ranks' merged by the group).
    Per sequence (in the batch's order): logp_old of its response tokens, the trainer's
    policy before the step, and their off-policy weights. `skipped`: the loss was NaN or
    inf on some rank, so no rank stepped; `applied`: optimizer steps taken; `empty`: the
    driver had nothing to train on (no step at all). The defaults are such a step's. A
    sequence left out of the passes (`left_out`) has empty lists."""

    logp: list[list[float]] = field(default_factory=list)
    weights: list[list[float]] = field(default_factory=list)
    sums: TrainSums = field(default_factory=TrainSums)
    grad_norm: float = float("nan")  # mean over the applied optimizer steps
    skipped: bool = False
    applied: int = 0
    empty: bool = False
    seconds: float = 0.0
    left_out: int = 0  # sequences left out of the passes: their gradient is exactly 0 (`skip_zero_gradient`)
