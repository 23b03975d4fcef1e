"""Verification stages of synthesized trajectories, in order: format, outcome, length,
dedup. Each gives a verdict `{"pass": bool, "reason": str}` that is recorded with the
trajectory (a disabled stage records `{"pass": true, "reason": "disabled"}`); a
trajectory is kept only if every stage passed. Then the review rule picks some for a
person: those near the outcome threshold (if every other stage passed) and a random
share of the kept ones.

Pure functions over messages and reward results: unit-testable without an engine.
"""

from __future__ import annotations

import random
import re

from posttrain.config import SynthesisStage
from posttrain.data.builtin_env import TOOLS
from posttrain.data.chat import TemplateError, parse_calls, parse_response, sft_example, wants_tools
from posttrain.types import Message, RewardResult

STAGES = ("format", "outcome", "length", "dedup")
PASSED, REJECTED, REVIEW = "passed", "rejected", "review"


def verdict(ok: bool | None, reason: str) -> dict:
    """ok None: the stage could not run (no conversation was read back: see format)."""
    return {"pass": None if ok is None else bool(ok), "reason": reason}


NOT_RUN = verdict(None, "not run: no conversation was read back (format)")


def check_messages(messages: tuple[Message, ...], tools: bool) -> dict:
    """The conversation is in the template's shape: known roles, ends with an assistant
    answer (no call), every call well formed; `tools`: whether the task has tools."""
    if not messages or messages[-1].role != "assistant":
        return verdict(False, "the conversation does not end with an assistant message")
    for i, m in enumerate(messages):
        if m.role not in ("system", "user", "assistant", "tool"):
            return verdict(False, f"message {i}: unknown role {m.role!r}")
        if m.role == "tool" and (
            i == 0 or messages[i - 1].role != "assistant" or not wants_tools(messages[i - 1].content)
        ):
            return verdict(False, f"message {i}: a tool result that follows no tool call")
        if m.role != "assistant":
            continue
        if not wants_tools(m.content):
            continue
        if not tools:
            return verdict(False, f"message {i}: a tool call in a task without tools")
        calls, errors = parse_calls(m.content)
        if errors:
            return verdict(False, f"message {i}: malformed tool call: {errors[0].removeprefix('error: ')}")
        for name, arguments in calls:
            if name not in TOOLS:
                return verdict(False, f"message {i}: unknown tool {name!r}")
            if sorted(arguments) != sorted(TOOLS[name]):
                return verdict(
                    False, f"message {i}: {name} takes {', '.join(TOOLS[name])}, got {', '.join(arguments) or 'none'}"
                )
        if i == len(messages) - 1:
            return verdict(False, "the last turn is a tool call, not an answer")
        if i + 1 >= len(messages) or messages[i + 1].role != "tool":
            return verdict(False, f"message {i}: a tool call with no tool result after it")
    return verdict(True, "ok")


def check_format(
    prompt: tuple[Message, ...],
    response_ids,
    action_mask,
    finish_reason: str,
    env: dict | None,
    teacher_tokenizer,
    student_tokenizer,
    tools: bool,
) -> tuple[dict, tuple[Message, ...] | None]:
    """(verdict, the whole conversation or None): the teacher's tokens read back through
    the template, the shape is right, and the conversation survives the student's template
    (render, then parse, gives it back)."""
    if env and env.get("error"):
        return verdict(False, f"environment failed: {env['error']}"), None
    try:
        turns = parse_response(teacher_tokenizer, response_ids, action_mask)
    except TemplateError as exc:
        return verdict(False, f"template: {exc} (finish: {finish_reason})"), None
    messages = tuple(prompt) + turns
    shape = check_messages(messages, tools)
    if not shape["pass"]:
        return shape, messages
    ids, prompt_len, mask = sft_example(student_tokenizer, messages, 10**9)
    try:
        back = parse_response(student_tokenizer, ids[prompt_len:], mask)
    except TemplateError as exc:
        return verdict(False, f"student template: {exc}"), messages
    if back != turns:
        return verdict(
            False, "the student's template does not give the conversation back (render, then parse)"
        ), messages
    return verdict(True, "ok"), messages


def check_outcome(result: RewardResult, stage: SynthesisStage) -> dict:
    cfg = stage.verify.outcome
    if not result.ok:
        return verdict(False, f"unscored: {result.reason}")
    threshold = cfg.grm_threshold if result.source == "grm" else cfg.threshold
    ok = result.score >= threshold
    return verdict(ok, f"{result.source} {result.score:.3g} {'>=' if ok else '<'} {threshold:g}: {result.reason}")


def assistant_tokens(messages: tuple[Message, ...], tokenizer) -> int:
    _, _, mask = sft_example(tokenizer, messages, 10**9)
    return int(sum(mask))


def check_length(tokens: int, stage: SynthesisStage) -> dict:
    cfg = stage.verify.length
    if tokens < cfg.min_tokens:
        return verdict(False, f"{tokens} assistant tokens < min {cfg.min_tokens}")
    if tokens > cfg.max_tokens:
        return verdict(False, f"{tokens} assistant tokens > max {cfg.max_tokens}")
    return verdict(True, f"{tokens} assistant tokens")


def dedup_key(task_id: str, messages, across_tasks: bool) -> str:
    text = "\x1e".join(re.sub(r"\s+", " ", m.content).strip().lower() for m in messages if m.role == "assistant")
    return text if across_tasks else f"{task_id}\x1f{text}"


class Verifier:
    """Runs the stages on one candidate after another; remembers the kept ones (passed or
    waiting for review) for dedup, including those of earlier runs (a resume)."""

    def __init__(self, stage: SynthesisStage, kept: dict[str, str] | None = None):
        self.stage = stage
        self.kept: dict[str, str] = dict(kept or {})  # dedup key -> candidate id

    def run(
        self, cid: str, task_id: str, fmt: dict, messages, result: RewardResult | None, tokens: int | None
    ) -> tuple[dict, str, str]:
        """(verdicts, status, review reason) of one candidate."""
        cfg = self.stage.verify
        verdicts = {"format": fmt if cfg.format.enabled else verdict(True, "disabled")}
        if not cfg.outcome.enabled:
            verdicts["outcome"] = verdict(True, "disabled")
        else:
            verdicts["outcome"] = (
                check_outcome(result, self.stage) if result is not None else verdict(False, "not scored")
            )
        if not cfg.length.enabled:
            verdicts["length"] = verdict(True, "disabled")
        else:
            verdicts["length"] = check_length(tokens, self.stage) if tokens is not None else NOT_RUN
        key = dedup_key(task_id, messages, cfg.dedup.across_tasks) if messages else None
        if not cfg.dedup.enabled:
            verdicts["dedup"] = verdict(True, "disabled")
        elif key is None:
            verdicts["dedup"] = NOT_RUN
        elif key in self.kept:
            verdicts["dedup"] = verdict(False, f"duplicate of {self.kept[key]}")
        else:
            verdicts["dedup"] = verdict(True, "new")
        status, why = self.review_choice(cid, verdicts, result)
        if status != REJECTED and key is not None:
            self.kept[key] = cid
        return verdicts, status, why

    def review_choice(self, cid: str, verdicts: dict, result: RewardResult | None) -> tuple[str, str]:
        review, outcome = self.stage.review, self.stage.verify.outcome
        others = all(verdicts[s]["pass"] for s in STAGES if s != "outcome")
        if others and review.near_threshold > 0 and outcome.enabled and result is not None and result.ok:
            threshold = outcome.grm_threshold if result.source == "grm" else outcome.threshold
            if 0 < abs(result.score - threshold) <= review.near_threshold:
                return REVIEW, f"near the threshold: score {result.score:.3g}, threshold {threshold:g}"
        if not all(v["pass"] for v in verdicts.values()):
            return REJECTED, ""
        if review.fraction > 0 and random.Random(f"{review.seed}:{cid}").random() < review.fraction:
            return REVIEW, f"random share ({review.fraction:g})"
        return PASSED, ""
