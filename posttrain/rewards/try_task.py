"""`posttrain rewards try --task-file TASK.json --response-file RESPONSE.txt`: score one
response with the verifier its task row names, and show why.

TASK.json is one task row as a file source holds it, plus `verifier`: `code` (a coding row:
entry_point and tests, check or io), `reasoning_gym` (`family`, `answer`, `metadata`),
`math` (`answer`), `agent` (the entry: `check`, `initial_kv`, `corpus_seed`, `max_turns`;
the response is the model's turns, a JSON list of strings or one text), `user` (`answer`
and `metadata`, and `reward: module:function` or none to match the answer), or `grm`
(the judge from `--reward`). `answer_form: choice` (math, user) makes the row multiple
choice: its options are the prompt's `A) ...` lines, its answer a letter. A row may also
carry its entry whole (`entry`, as a saved task dataset does). Prints the score, the reason and the verifier's details.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

from posttrain.config.verifiers import verifier_facts
from posttrain.data.choices import CHOICE, choice_entry
from posttrain.rewards.registry import Alone, TryCall, get_verifier, tried
from posttrain.types import ANSWER_FORMS, Completion, Message, RewardResult, Sample, Task, infer_answer_form

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
    if row.get("verifier") not in tried():
        raise TryError(f"{path}: verifier must be one of {', '.join(tried())} (got {row.get('verifier')!r})")
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
    """A `Task` from a row, read as the verifier it names reads rows (ValueError naming the
    problem)."""
    entry = get_verifier(row["verifier"])
    read = entry.part("read_row") if entry is not None and entry.read_row is not None else answer_row
    return read(row, name)


def code_row(row: dict, name: str) -> Task:
    """A coding row: entry_point and tests, check or io (or its entry whole)."""
    from posttrain.config import CodingTasks
    from posttrain.data.coding import coding_row_task, validate_entry

    if "entry" in row:
        entry = validate_entry({"reward": "all_pass", "timeout_s": 5.0, **_entry(row)})
        return Task(str(row.get("id", name)), "coding", _messages(row), entry=entry, verifier="code")
    fields = {k: v for k, v in row.items() if k != "verifier"}
    return coding_row_task(fields, 1, CodingTasks(type="coding"), name)


def answer_row(row: dict, name: str, entry: dict | None = None, inferred=None) -> Task:
    """A row whose entry is the row's other fields (or its `entry`), with its `answer` and the
    form it must take (`answer_form`)."""
    entry = _entry(row) if entry is None else entry
    answer = entry.get("answer", row.get("answer"))
    answer = None if answer is None else str(answer)
    family = row.get("family") or row["verifier"]
    messages = _messages(row)
    form = answer_form(row, entry, family, messages, inferred)
    if form == CHOICE:  # multiple choice: the options are read from the prompt, as a task file's are
        entry = {**entry, **choice_entry(messages[-1].content, answer)}
        answer = entry["answer"]
    entry = {**entry, "answer_form": form} if form else entry
    task_id = str(row.get("id", name))
    return Task(task_id, family, messages, answer=answer, entry=entry, verifier=row["verifier"], answer_form=form)


def math_row(row: dict, name: str) -> Task:
    """A math row: the form its question asks for is inferred, as a math source's
    `answer_form: infer` does."""
    return answer_row(row, name, inferred=lambda family, question: infer_answer_form(question))


def family_row(row: dict, name: str) -> Task:
    """A reasoning-gym row: its `family` names the scorer (and the answer form, with the question)."""
    entry = _entry(row)
    if not row.get("family"):
        raise ValueError("a reasoning_gym row needs its `family` (e.g. basic_arithmetic)")
    from posttrain.data.families import family_answer_form

    return answer_row(row, name, entry, inferred=family_answer_form)


def agent_row(row: dict, name: str) -> Task:
    """An agent row: its entry holds the success `check`."""
    entry = _entry(row)
    if not isinstance(entry.get("check"), dict):
        raise ValueError("an agent row needs its success `check` (an object)")
    return answer_row(row, name, entry)


def user_row(row: dict, name: str) -> Task:
    """A user row: the entry a user function sees (answer and metadata; the form the row
    states, and a multiple-choice row's options)."""
    task = answer_row(row, name)
    kept = {k: task.entry[k] for k in ("choices", "answer_form") if k in task.entry}
    return replace(task, entry={"answer": task.answer, "metadata": task.entry.get("metadata") or {}, **kept})


def answer_form(row: dict, entry: dict, family: str, messages, inferred=None) -> str | None:
    """The form the row's answer must take, decided as the pipeline's source of such rows
    decides it (so that `try` scores what training pays): the row's `answer_form`, else
    `inferred(family, question)` where the verifier's source infers one (reasoning_gym: the
    family's or the question's; math: the question's wording); user files state theirs."""
    form = row.get("answer_form", entry.get("answer_form"))
    if form is not None and form not in ("infer", CHOICE, *ANSWER_FORMS):
        raise ValueError(f"answer_form {form!r} is not one of {', '.join((*ANSWER_FORMS, CHOICE))}")
    if form in (None, "infer") and inferred is not None:
        question = "\n".join(m.content for m in messages if m.role == "user")
        return inferred(family, question)
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


def try_task_file(task_file: str, response_file: str, reward: str | None, as_json: bool, tokens: int | None) -> dict:
    """Score the response with the task row's verifier; print it (or one JSON line)."""
    row = read_task_file(task_file)
    try:
        response = Path(response_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TryError(f"{response_file}: cannot read: {exc}") from None
    call = TryCall(row, response, reward, as_json, tokens, Path(task_file).stem, task_file)
    return get_verifier(row["verifier"]).part("try_row")(call)


def try_scored(call: TryCall) -> dict:
    """A row read into its Task, the response scored by the verifier's reward source."""
    try:
        task = task_of(call.row, call.name)
    except (ValueError, TypeError) as exc:
        raise TryError(f"{call.where}: {exc}") from None
    facts = verifier_facts(task.verifier)
    env = _agent_env(task, call.response)[0] if facts.episode == "agent" else None
    n = call.tokens if call.tokens is not None else len(call.response.split())
    sample = Sample(task, 0, (0,), Completion((0,) * n, (0.0,) * n, call.response, "stop"), env=env)
    alone = Alone(reward=call.row.get("reward") if facts.reward_function else None, workers=1)
    source, _ = get_verifier(task.verifier).part("alone")(alone)
    try:
        from posttrain.rewards.base import score_safely

        result = asyncio.run(score_safely(source, [sample]))[0]
    finally:
        if hasattr(source, "close"):
            source.close()
    out = {"score": result.score, "ok": result.ok, "reason": result.reason, "source": result.source}
    out["details"] = result.details
    if call.as_json:
        print(json.dumps(out, default=repr))
    else:
        print_result(task, result)
    return out


def try_judged(call: TryCall) -> dict:
    """The judge (from `--reward`) on the row's prompt and the response."""
    from posttrain.rewards.try_grm import try_pair

    prompt = next((m.content for m in reversed(_messages(call.row)) if m.role == "user"), "")
    return try_pair(prompt, call.response, call.reward, call.as_json, call.tokens)


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
