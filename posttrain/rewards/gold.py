"""The gold check: a source's own reference answers, scored by its verifier as a response
would be, before anything starts (`posttrain validate` and the run's preflight).

A run whose gold cannot score trains on a reward of 0 at every step and learns nothing:
GSM8K's `answer` is a worked solution ending in `#### 72`, and the math verifier compares
a response with all of it. Up to `SAMPLE` tasks of each source (`data/tasks.py`) are
scored with their gold answer as the response (written the way the stage's `reward.answer_format` reads
answers); an environment's gold calls are replayed and its `reward` scores the final
state. Where they do not all score full marks (1), `GoldError` says how many did, shows
one, and names the setting that would fix it: the `answer_format` the references are
written in when one makes them score (tried on the same sample), else what to check.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from posttrain.config.verifiers import verifier_facts
from posttrain.data.answers import guesses, read_answer
from posttrain.data.registry import source_kind
from posttrain.data.tasks import sampled
from posttrain.rewards.base import score_safely
from posttrain.rewards.registry import get_verifier
from posttrain.types import Completion, RewardResult, Sample, Task

FULL_MARKS = 1.0 - 1e-6
_FORMATS_HINT = "gsm8k, boxed, final_line, 'regex: PATTERN' or module:function"


class GoldError(ValueError):
    """The gold does not score full marks; str() is the one line (without the key path)."""


def _short(text: str | None, size: int = 60) -> str:
    text = repr(text if text is None else text.replace("\n", " ").strip())
    return text if len(text) <= size else text[: size - 4] + "...'"


def _plain(text: str, size: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= size else text[: size - 3] + "..."


def as_response(answer: str, mode: str) -> str:
    """A gold answer written as a response the stage's answer extraction reads."""
    if mode == "boxed":
        return f"\\boxed{{{answer}}}"
    if mode == "answer_tag":
        return f"<answer>{answer}</answer>"
    return answer


def _verifier(stage, leaf, name: str):
    """The reward source that scores the leaf's reference answers (the verifier table's
    `gold`), or None where its tasks have no gold answer to check (code, grm)."""
    entry = get_verifier(name)
    return entry.part("gold")(stage, leaf) if entry is not None else None


def _score(verifier, tasks: list[Task], mode: str) -> list[RewardResult]:
    samples = [
        Sample(t, i, (), Completion((), (), as_response(t.answer or "", mode), "stop")) for i, t in enumerate(tasks)
    ]
    return asyncio.run(score_safely(verifier, samples))


def _full(result: RewardResult) -> bool:
    return result.ok and result.score >= FULL_MARKS


def _reread(task: Task, spec: str) -> Task:
    reference = task.entry.get("reference", task.answer)
    answer = read_answer(reference, spec)
    entry = {**task.entry, "answer": answer} if "answer" in task.entry else task.entry
    return replace(task, answer=answer, entry=entry)


def check_reward_returns(stage, leaf, tasks: list[Task]) -> None:
    """The user's own reward (a `reward` function, an environment's `reward`) must return a
    score on the sampled gold, gold check or not: a dict or a string there would score every
    sample of the run 0. GoldError names the function, the type it returned and the task."""
    if source_kind(leaf).gold == "episodes":
        golds = sampled([t for t in tasks if t.entry.get("gold_calls")])
        if verifier_facts(leaf.verifier).episode == "env" and golds:
            _env_rewards(leaf, golds)
        return
    own = any(verifier_facts(name).reward_function for name in source_kind(leaf).uses(leaf))
    spec = getattr(leaf, "reward", None) if own else None  # a user function (user and hf sources)
    golds = sampled([t for t in tasks if t.answer is not None])
    if not spec or not golds:
        return
    from posttrain.data.env import guarded
    from posttrain.rewards.user import load_reward_function, not_a_score, task_view

    function, mode = load_reward_function(spec), getattr(getattr(stage, "reward", None), "answer_format", "auto")
    for task in golds:
        where = f"reward function {spec} (gold answer of task {task.task_id!r})"
        response = as_response(task.answer or "", mode)
        _returned(where, not_a_score(guarded(where, leaf.reward_timeout_s, function, response, task_view(task))))


def _returned(where: str, problem: str | None) -> None:
    if problem is not None:
        raise GoldError(
            f"{where} returned {problem}: a reward returns a float, (float, reason) or {{score, reason}}; "
            "every sample of the run would score 0"
        )


def check_gold(stage, leaf, tasks: list[Task]) -> tuple[int, int]:
    """(passed, checked) for the leaf's sampled gold; GoldError when not all pass (or when
    the user's reward returns something that is not a score: `check_reward_returns`)."""
    if not getattr(leaf, "gold_check", False):
        check_reward_returns(stage, leaf, tasks)
        return 0, 0
    kind = source_kind(leaf)
    if kind.gold != "episodes":
        check_reward_returns(stage, leaf, tasks)  # an environment's: checked as its gold is scored
    if kind.gold == "episodes":
        return _check_env(stage, leaf, tasks)
    name = kind.uses(leaf)[0]
    golds = sampled([t for t in tasks if t.answer is not None])
    if not golds:
        return 0, 0
    verifier = _verifier(stage, leaf, name)
    if verifier is None:  # code, grm: no reference answer is compared
        return 0, 0
    mode = getattr(getattr(stage, "reward", None), "answer_format", "auto")
    try:
        results = _score(verifier, golds, mode)
        passed = sum(map(_full, results))
        if passed == len(golds):
            return passed, len(golds)
        fix = _fix(leaf, verifier, golds, mode, name)
    finally:
        if hasattr(verifier, "close"):
            verifier.close()
    task, result = next((t, r) for t, r in zip(golds, results) if not _full(r))
    reference = task.entry.get("reference", task.answer)
    read = f" read as {_short(task.answer, 30)}" if reference != task.answer else ""
    raise GoldError(
        f"gold check: {passed} of {len(golds)} sampled reference answers score full marks through verifier "
        f"{name} (e.g. task {task.task_id}: {_short(reference)}{read} scored {result.score:g}: "
        f"{_plain(result.reason)}); {fix}"
    )


def _fix(leaf, verifier, golds: list[Task], mode: str, name: str) -> str:
    """The setting that would make the gold score: a format the references are written in
    that scores them all, else what to look at."""
    references = [t.entry.get("reference", t.answer) for t in golds]
    for spec in guesses(references):
        if spec == leaf.answer_format:
            continue
        reread = [_reread(t, spec) for t in golds]
        if all(map(_full, _score(verifier, reread, mode))):
            return (
                f"the references are written as `answer_format: {spec}` (all {len(golds)} score full marks "
                "read that way): set it on this source"
            )
    if name == "user" and getattr(leaf, "reward", None):
        return (
            f"your reward function {leaf.reward} gives the source's own reference answers less than 1: check it, "
            "or the answers (`answer_format`), or set `gold_check: false`"
        )
    now = f"`answer_format: {leaf.answer_format}` does not read them right; " if leaf.answer_format else ""
    return (
        f"{now}set `answer_format` ({_FORMATS_HINT}) so that the final answer is read out of the reference, "
        "or `gold_check: false` to skip this check"
    )


def _check_env(stage, leaf, tasks: list[Task]) -> tuple[int, int]:
    """An environment's gold: `verifier: math` compares the final answer; `env` replays the
    gold calls and scores the final state with the environment's `reward`."""
    facts = verifier_facts(leaf.verifier)
    if facts.needs_answer:
        golds = sampled([t for t in tasks if t.answer is not None])
        if not golds:
            return 0, 0
        results = _score(_verifier(None, leaf, leaf.verifier), golds, "auto")
        kind = leaf.verifier
    elif facts.episode == "env":
        golds = sampled([t for t in tasks if t.entry.get("gold_calls")])
        if not golds:
            return 0, 0
        results = _env_rewards(leaf, golds)
        kind = "env (its reward on the gold episode's final state)"
    else:
        return 0, 0
    passed = sum(map(_full, results))
    if passed == len(golds):
        return passed, len(golds)
    task, result = next((t, r) for t, r in zip(golds, results) if not _full(r))
    fix = (
        f"check {leaf.env}.reward and the tasks' `gold` calls and `answer`, or set `gold_check: false`"
        if facts.episode == "env"
        else _fix(leaf, _verifier(stage, leaf, leaf.verifier), golds, "auto", leaf.verifier)
    )
    raise GoldError(
        f"gold check: {passed} of {len(golds)} sampled gold episodes score full marks through verifier {kind} "
        f"(e.g. task {task.task_id}: answer {_short(task.answer, 40)} scored {result.score:g}: "
        f"{_plain(result.reason)}); {fix}"
    )


def _env_rewards(leaf, golds: list[Task]) -> list[RewardResult]:
    from posttrain.data.env import episode_task, gold_episode, guarded, load_env
    from posttrain.rewards.user import as_result, not_a_score

    env = load_env(leaf.env, leaf.args)
    name = type(env).__name__
    out = []
    for task in golds:
        state, _ = gold_episode(env, task, task.entry["gold_calls"], leaf.timeout_s)
        final = task.answer if task.answer is not None else "done"
        where = f"{name}.reward (gold episode of task {task.task_id!r})"
        value = guarded(where, leaf.timeout_s, env.reward, state, episode_task(task), final)
        _returned(where, not_a_score(value))
        out.append(as_result(value, "env"))
    return out
