"""`posttrain rewards try --task-file TASK.json --response-file RESPONSE.txt`: score one
response with the verifier its task row names, and show why.

TASK.json is one task row as a file source holds it, plus `verifier`: `code` (a coding row:
entry_point and tests, check or io), `reasoning_gym` (`family`, `answer`, `metadata`),
`math` (`answer`), `agent` (the entry: `check`, `initial_kv`, `corpus_seed`, `max_turns`;
the response is the model's turns, a JSON list of strings or one text), `user` (`answer`
and `metadata`, and `reward: module:function` or none to match the answer), or `grm`
(the judge from `--reward`). A row may also carry its entry whole (`entry`, as a saved
task dataset does). Prints the score, the reason and the verifier's details.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from posttrain.types import Completion, Message, RewardResult, Sample, Task

VERIFIERS = ("code", "reasoning_gym", "math", "agent", "user", "grm")
TASK_KEYS = ("verifier", "id", "prompt", "messages", "question", "family", "entry")


class TryError(ValueError):
    """A task or response file that cannot be scored; str() is the one line shown."""


def read_task_file(path: str) -> dict:
    try:
        row = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise TryError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise TryError(f"{path}: not JSON ({exc})") from None
    if not isinstance(row, dict):
        raise TryError(f"{path}: a task row must be a JSON object")
    if row.get("verifier") not in VERIFIERS:
        raise TryError(f"{path}: verifier must be one of {', '.join(VERIFIERS)} (got {row.get('verifier')!r})")
    return row


def _messages(row: dict) -> tuple[Message, ...]:
    from posttrain.data.user import row_messages

    if row.get("question") is not None and row.get("prompt") is None:  # a reasoning-gym entry
        row = dict(row, prompt=row["question"])
    return row_messages(row, None)


def _entry(row: dict) -> dict:
    """The verifier's data: `entry` (a dict or its JSON text), else the row's other fields."""
    entry = row.get("entry")
    if isinstance(entry, str):
        entry = json.loads(entry)
    if entry is None:
        entry = {k: v for k, v in row.items() if k not in TASK_KEYS}
    if not isinstance(entry, dict):
        raise ValueError("entry must be an object")
    return entry


def task_of(row: dict, name: str) -> Task:
    """A `Task` from a row (ValueError naming the problem)."""
    verifier = row["verifier"]
    if verifier == "code":
        from posttrain.config import CodingTasks
        from posttrain.data.coding import coding_row_task, validate_entry

        if "entry" in row:
            entry = validate_entry({"reward": "all_pass", "timeout_s": 5.0, **_entry(row)})
            return Task(str(row.get("id", name)), "coding", _messages(row), entry=entry, verifier="code")
        fields = {k: v for k, v in row.items() if k != "verifier"}
        return coding_row_task(fields, 1, CodingTasks(type="coding"), name)
    entry = _entry(row)
    answer = entry.get("answer", row.get("answer"))
    family = row.get("family") or verifier
    if verifier == "reasoning_gym" and not row.get("family"):
        raise ValueError("a reasoning_gym row needs its `family` (e.g. basic_arithmetic)")
    if verifier == "agent" and not isinstance(entry.get("check"), dict):
        raise ValueError("an agent row needs its success `check` (an object)")
    answer = None if answer is None else str(answer)
    messages = _messages(row)
    form = answer_form(row, entry, verifier, family, messages)
    if verifier == "user":
        entry = {"answer": answer, "metadata": entry.get("metadata") or {}}
    entry = {**entry, "answer_form": form} if form else entry
    return Task(
        str(row.get("id", name)), family, messages, answer=answer, entry=entry, verifier=verifier, answer_form=form
    )


def answer_form(row: dict, entry: dict, verifier: str, family: str, messages) -> str | None:
    """The form the row's answer must take, decided as the pipeline's source of such rows
    decides it (so that `try` scores what training pays): the row's `answer_form`, else for
    reasoning_gym the family's or the question's (`data.tasks.family_answer_form`), for math
    the question's wording (a math source's `answer_form: infer`); user files state theirs."""
    from posttrain.types import ANSWER_FORMS, infer_answer_form

    form = row.get("answer_form", entry.get("answer_form"))
    if form is not None and form != "infer" and form not in ANSWER_FORMS:
        raise ValueError(f"answer_form {form!r} is not one of {', '.join(ANSWER_FORMS)}")
    question = "\n".join(m.content for m in messages if m.role == "user")
    if verifier == "reasoning_gym" and form in (None, "infer"):
        from posttrain.data.tasks import family_answer_form

        return family_answer_form(family, question)
    if verifier == "math" and form in (None, "infer"):
        return infer_answer_form(question)
    return None if form == "infer" else form


def _agent_env(task: Task, response: str) -> tuple[dict, int]:
    """Run the model's turns against the task's real environment: (final state, turns)."""
    from posttrain.data import builtin_env

    try:
        turns = json.loads(response)
    except json.JSONDecodeError:
        turns = [response]
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        turns = [response]
    state = builtin_env.initial_state(task.entry)
    for turn in turns[: task.entry.get("max_turns", 4)]:
        if builtin_env.step(state, turn, task.entry.get("corpus_seed", 0)) is None:
            break
    return state.to_dict(), len(turns)


def _source(task: Task, user_reward: str | None):
    if task.verifier == "code":
        from posttrain.rewards.code import CodeVerifier

        return CodeVerifier(workers=1)
    if task.verifier == "reasoning_gym":
        from posttrain.rewards.reasoning_gym import ReasoningGymVerifier

        return ReasoningGymVerifier()
    if task.verifier == "math":
        from posttrain.rewards.math_verifier import MathVerifier

        return MathVerifier()
    if task.verifier == "agent":
        from posttrain.rewards.agent_verifier import AgentVerifier

        return AgentVerifier()
    from posttrain.rewards.user import UserReward

    return UserReward(user_reward)


def try_task_file(task_file: str, response_file: str, reward: str | None, as_json: bool, tokens: int | None) -> dict:
    """Score the response with the task row's verifier; print it (or one JSON line)."""
    row = read_task_file(task_file)
    try:
        response = Path(response_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TryError(f"{response_file}: cannot read: {exc}") from None
    if row["verifier"] == "grm":
        from posttrain.rewards.try_grm import try_pair

        prompt = next((m.content for m in reversed(_messages(row)) if m.role == "user"), "")
        return try_pair(prompt, response, reward, as_json, tokens)
    try:
        task = task_of(row, Path(task_file).stem)
    except (ValueError, TypeError) as exc:
        raise TryError(f"{task_file}: {exc}") from None
    env = None
    if task.verifier == "agent":
        env, _ = _agent_env(task, response)
    n = tokens if tokens is not None else len(response.split())
    sample = Sample(task, 0, (0,), Completion((0,) * n, (0.0,) * n, response, "stop"), env=env)
    source = _source(task, row.get("reward") if task.verifier == "user" else None)
    try:
        from posttrain.rewards.base import score_safely

        result = asyncio.run(score_safely(source, [sample]))[0]
    finally:
        if hasattr(source, "close"):
            source.close()
    out = {"score": result.score, "ok": result.ok, "reason": result.reason, "source": result.source}
    out["details"] = result.details
    if as_json:
        print(json.dumps(out, default=repr))
    else:
        print_result(task, result)
    return out


def print_result(task: Task, result: RewardResult) -> None:
    print(f"task {task.task_id}  verifier {task.verifier}  ({task.family})")
    print(f"score {result.score:.3f}" if result.ok else f"unscored: {result.reason}")
    print(f"reason: {result.reason}")
    details = dict(result.details)
    tests = details.pop("tests", None)
    if tests is not None:
        print(f"tests: {details.get('passed')}/{details.get('total')} passed")
        for t in tests:
            mark = "pass" if t["passed"] else "FAIL"
            print(
                f"  [{mark}] {' '.join(str(t['test']).split())[:100]}"
                + (f"\n         {t['error']}" if t["error"] else "")
            )
    run = details.pop("run", None)
    for key, value in details.items():
        print(f"{key}: {value}")
    if run:
        print(f"run: {run.get('status')} ({run.get('reason')}), {run.get('wall_seconds')} s")
        for name in ("stdout_tail", "stderr_tail"):
            if run.get(name, "").strip():
                print(f"{name.split('_')[0]}:\n  " + run[name].strip().replace("\n", "\n  "))
