"""Each answer verifier's per-sample check in a worker process, with a hard time limit.

The math, reasoning_gym and user verifiers compare answers with a symbolic library whose
own timeout works only in a main thread, and a runaway computation there (`9^{999999999}`)
runs in C, holding the interpreter lock of every thread in the process. So the check of
each sample (the verifier's own `score_one` or the like, unchanged) runs in the process's
shared answer-check workers (`rollout.workers`), with `timeout_s` per sample. Whatever the
response makes of its check, its sample gets a verdict: past the limit, a crashed worker
or an exception all score 0 with the reason (the worker is replaced; the other samples go
on). Only a worker that cannot be started leaves samples unscored.
"""

from __future__ import annotations

import pickle
from dataclasses import replace

from posttrain.rollout.workers import (
    CallRaised,
    CallTimeout,
    WorkerCrashed,
    WorkerUnavailable,
    call_method,
    import_modules,
    prepare_instance,
    shared_pool,
)
from posttrain.types import RewardResult, Sample

ANSWER_TIMEOUT_S = 10.0  # default per-sample limit of an answer check (honest checks take milliseconds)
ANSWER_WORKERS = 2


def warm_answer_checks(*modules: str) -> None:
    """A worker's set-up: import the checkers and run one comparison (math-verify loads its
    grammar on first use), so that no sample's time limit pays for it."""
    import_modules(*modules)
    if "math_verify" in modules:
        from math_verify import parse, verify

        verify(parse("$1$"), parse("$\\frac{2}{2}$"))


def slim(sample: Sample) -> Sample:
    """The sample without its token ids and logprobs, which no answer check reads (less to
    send to the worker)."""
    completion = replace(sample.completion, token_ids=(), logprobs=())
    return replace(sample, prompt_ids=(), completion=completion, env=None, action_mask=())


def sample_reference(args: tuple) -> tuple:
    """A `score_one(sample)` call on the task's own answer instead of the response."""
    (sample,) = args
    gold = sample.task.answer if sample.task.answer is not None else sample.task.entry.get("answer")
    text = "" if gold is None else f"The answer is $\\boxed{{{gold}}}$"
    return (replace(sample, completion=replace(sample.completion, text=text)),)


def entry_reference(args: tuple) -> tuple:
    """A `score_one(family, entry, response, finish_reason, ...)` call on the entry's own
    answer (or, with none, an answer that reaches the family's scorer)."""
    family, entry, _, _, *rest = args
    return (family, entry, str(entry.get("answer", "0")), "stop", *rest)


def check_in_workers(
    verifier,
    method: str,
    calls: list[tuple],
    timeout_s: float,
    preload: tuple[str, ...] = ("math_verify",),
    reference=sample_reference,
) -> list[RewardResult]:
    """`verifier.method(*args)` for each args in `calls`, in the answer-check workers (one
    pool per `preload`, shared by the whole process), each within `timeout_s`. A check that
    raises is asked again on the task's own answer (`reference(args)`): if that raises too,
    the task is broken (unscored); else the response made it raise (0)."""
    if not calls:
        return []
    pool = shared_pool(warm_answer_checks, tuple(preload), ANSWER_WORKERS)
    blob = pickle.dumps(verifier)
    setup = (blob, prepare_instance, (blob,))  # the verifier's module imported outside the limit
    outcomes = pool.map(call_method, [(blob, method, args) for args in calls], timeout_s, setup)
    out = []
    for args, (value, error) in zip(calls, outcomes):
        if isinstance(error, CallRaised) and reference is not None:
            try:
                pool.call(call_method, (blob, method, reference(args)), timeout_s, setup)
            except CallRaised as again:
                reason = f"unscored: task error: the check raised on the task's own answer too: {again}"
                out.append(RewardResult(0.0, reason[:500], verifier.name, ok=False))
                continue
            except Exception:  # the reference timed out or crashed: the response still made it raise
                pass
        out.append(as_verdict(value, error, verifier.name))
    return out


def as_verdict(value, error: BaseException | None, source: str) -> RewardResult:
    """A check's outcome as the sample's reward: its own result, 0 with the reason for what
    the response made of its check, unscored only for the machinery's failure."""
    if error is None:
        if isinstance(value, RewardResult):
            return value
        return RewardResult(0.0, f"unscored: the check returned {type(value).__name__}", source, ok=False)
    if isinstance(error, CallTimeout):
        return RewardResult(0.0, f"scored 0: {error}", source, {"check_error": "timeout"})
    if isinstance(error, WorkerCrashed):
        return RewardResult(0.0, f"scored 0: the check crashed: {error}", source, {"check_error": "crashed"})
    if isinstance(error, CallRaised):
        reason = f"scored 0: the check raised {error}"[:500]
        return RewardResult(0.0, reason, source, {"check_error": "raised"})
    if isinstance(error, WorkerUnavailable):
        return RewardResult(0.0, f"unscored: no answer-check worker: {error}", source, ok=False)
    return RewardResult(0.0, f"unscored: verifier error: {type(error).__name__}: {error}"[:500], source, ok=False)
