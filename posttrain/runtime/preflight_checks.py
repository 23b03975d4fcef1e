"""Checks before any engine starts of what would otherwise fail inside the run, each a
one-line ConfigError naming the numbers and the key to change (`posttrain validate` and
`posttrain run` call them from the pipeline's preflight): reference answers that are worked
solutions, GRM-scored tasks without a judge, and lengths the model or the engine cannot hold
(`rollout.max_model_len` past the model's `max_position_embeddings`; a prompt, with its tool
schema and gold tool replies, plus `max_tokens` past `max_model_len`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from posttrain.config import PipelineConfig, RolloutStage
from posttrain.config.files import ConfigError
from posttrain.config.verifiers import verifier_facts
from posttrain.data.answers import guesses, read_answer
from posttrain.data.registry import source_kind
from posttrain.data.tasks import sampled
from posttrain.types import Task

LONGEST = 32  # prompts tokenized per source: the longest by characters
GENERATED = 64  # tasks drawn of a generated source to look at its prompts and verifiers
_WORDS = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")


def leaf_tasks(leaf, tasks: list[Task] | None) -> list[Task]:
    """The tasks the preflight read of a source, else (a generated source) its first
    `GENERATED`, for the checks to look at."""
    if tasks is not None:
        return tasks
    size = getattr(leaf, "size", None)
    if not isinstance(size, int):
        return []
    from posttrain.data.tasks import generate_tasks

    return generate_tasks(leaf.model_copy(update={"size": min(size, GENERATED)}))


def _short(text: str, size: int = 60) -> str:
    text = repr(" ".join(text.split()))
    return text if len(text) <= size else text[: size - 4] + "...'"


# ---------------------------------------------------------------- reference answers


def is_worked_solution(reference: str, answer: str) -> bool:
    """A reference that holds far more than its final answer: a derivation around it (five
    words or more, 40 characters or more), not a bare answer or `Answer: 42`."""
    rest = reference.replace(answer, " ", 1)
    return len(_WORDS.findall(rest)) >= 5 and len("".join(rest.split())) >= 40


def check_worked_solutions(leaf, tasks: list[Task], where: str) -> None:
    """A source without `answer_format` whose references are worked solutions with the final
    answer in a form a format reads (MATH's `\\boxed{}` inside a solution): the verifier would
    compare responses with the whole text (math-verify finds the box in it and credits more
    than the answer), so it is refused naming the format that reads the answer out."""
    if getattr(leaf, "answer_format", "") is not None or getattr(leaf, "reward", None):
        return  # a format is set (the verifier sees its answer), or the user's function reads the answer
    if not any(verifier_facts(name).final_answer for name in source_kind(leaf).uses(leaf)):
        return
    references = [t.answer for t in sampled([t for t in tasks if t.answer])]
    for spec in guesses(references):
        worked = [r for r in references if is_worked_solution(r, read_answer(r, spec))]
        if 2 * len(worked) > len(references):
            raise ConfigError(
                f"{where}: {len(worked)} of {len(references)} sampled reference answers are worked solutions "
                f"(e.g. {_short(worked[0])}), and without `answer_format` the verifier compares responses with "
                f"the whole text; set `answer_format: {spec}` so that it compares the final answer "
                f"({_short(read_answer(worked[0], spec), 30)}), or give the bare answer"
            )


# ---------------------------------------------------------------- the judge


def check_judge_configured(stage, tasks: list[Task], where: str) -> None:
    """Tasks scored by the generative reward model (`verifier: grm`, writing tasks) in a stage
    with no `reward.grm`: every sample would be unscored and dropped, and the run would train
    on nothing."""
    if not hasattr(stage, "reward") or stage.grm() is not None or getattr(stage, "alpha", None) == 0:
        return  # MOPD with alpha 0 trains on the teachers' signal alone
    judged = [t for t in tasks if verifier_facts(t.verifier).judged]
    if judged:
        raise ConfigError(
            f"{where}: its tasks are scored by the generative reward model (verifier grm; e.g. task "
            f"{judged[0].task_id}) but stage {stage.name!r} has no `reward.grm`: every sample would be unscored "
            "and the run would train on nothing; set `reward.grm` (a judge, docs/grm.md) or another verifier"
        )


# ---------------------------------------------------------------- lengths


def model_position_limit(folder: Path) -> int | None:
    """`max_position_embeddings` of a model folder's config.json (or its text model's)."""
    path = folder / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    value = config.get("max_position_embeddings", (config.get("text_config") or {}).get("max_position_embeddings"))
    return value if isinstance(value, int) and value > 0 else None


def check_model_limit(config: PipelineConfig, folder: Path | None, source: str) -> None:
    """`rollout.max_model_len` above the model's own limit: vLLM refuses it when the engine
    starts or dies at the first weight push, minutes into the run."""
    engines = any(stage.samples_policy for stage in config.stages)
    limit = model_position_limit(folder) if folder is not None and engines else None
    length = config.rollout.max_model_len
    if limit is not None and length > limit:
        raise ConfigError(
            f"{source}: rollout.max_model_len: {length} is above the model's own limit of {limit} tokens "
            f"(max_position_embeddings in {folder / 'config.json'}); set rollout.max_model_len to {limit} or less"
        )


def stage_max_tokens(stage) -> int:
    """The most tokens the stage lets one response (all its turns) generate."""
    return max([stage.max_tokens, *getattr(stage, "effort_max_tokens", {}).values()])


def context_tokens(tokenizer, task: Task) -> int:
    """Tokens of the task's context before the model's own: the prompt rendered with its
    tools, and the tool replies of its gold episode (what an agent's context takes on the
    way to an answer)."""
    from posttrain.data.chat import tool_turn_ids
    from posttrain.data.tools import render_task

    prompt = len(render_task(tokenizer, task.messages, task.entry.get("tools")))
    replies = [content for role, content in task.entry.get("gold") or [] if role == "tool"]
    return prompt + sum(len(tool_turn_ids(tokenizer, reply)) for reply in replies)


def check_prompt_room(config: PipelineConfig, stage, tokenizer, tasks: list[Task], where: str) -> None:
    """The longest context of the source plus the stage's `max_tokens` above
    `rollout.max_model_len`: those responses are cut at max_model_len, not at max_tokens, so
    raising max_tokens does nothing."""
    candidates = sorted(tasks, key=lambda t: -sum(len(m.content) for m in t.messages))[:LONGEST]
    if not candidates:
        return
    longest, task = max(((context_tokens(tokenizer, t), t) for t in candidates), key=lambda pair: pair[0])
    limit, max_tokens = config.rollout.max_model_len, stage_max_tokens(stage)
    if longest + max_tokens <= limit:
        return
    what = "prompt with its tool schema and gold tool replies" if task.entry.get("tools") else "prompt"
    fix = f" or lower max_tokens to {limit - longest}" if longest < limit else ", or shorten the prompts"
    raise ConfigError(
        f"{where}: the longest {what} is {longest} tokens (task {task.task_id}) + max_tokens {max_tokens} = "
        f"{longest + max_tokens} > rollout.max_model_len {limit}: responses would be cut at max_model_len, "
        f"and raising max_tokens changes nothing; raise rollout.max_model_len to {longest + max_tokens}{fix}"
    )


def check_source(config: PipelineConfig, stage, leaf, tasks: list[Task] | None, where: str, tokenizer) -> None:
    """The checks of one task source of a stage that scores its tasks (after its gold
    check); `tokenizer()` gives the model's tokenizer, or None where the model is not here."""
    seen = leaf_tasks(leaf, tasks)
    check_judge_configured(stage, seen, where)
    check_worked_solutions(leaf, seen, where)
    if isinstance(stage, RolloutStage) and tokenizer() is not None:
        check_prompt_room(config, stage, tokenizer(), seen, where)
