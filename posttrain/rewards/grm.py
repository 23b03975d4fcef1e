"""The agentic generative reward model (docs/recipe.md; Rubrics as Rewards, arXiv 2507.17746):
a fixed procedure of judge calls, each parsed and validated, not one prompt. This is the
`rubric` method; `method: pairwise` judges a task's responses against each other instead
(grm_pairwise.py).

1. read: the task and the candidate; a candidate over `length_cap` tokens scores -1 here;
2. rubric: the judge writes 3-10 weighted criteria for the task (one call per task,
   shared by every candidate of the task and cached);
3. score: one judge call per (candidate, criterion), all batched into one engine call,
   each a yes/no verdict with a one-line reason; c_j = P(yes) where the backend returns
   logprobs, else 1/0;
4. record: a scoreboard entry (RewardResult.details) with every intermediate result.

Final score, pitfalls counted negative and mapped linearly to [-1, 1]:
    r = 2 * (sum_{non-pitfall} w_j c_j + sum_{pitfall} w_j (1 - c_j)) / sum_j w_j - 1
so r = 1 when every criterion is met and no pitfall is hit, and r = -1 in the opposite case.
A reply that cannot be read is retried; after the retries the sample is unscored (ok=False).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict

from posttrain.config import GRMConfig
from posttrain.data.judge_prompts import choice_schema, rubric_messages, verdict_messages
from posttrain.data.judge_tools import run_lines
from posttrain.rewards.grm_calls import LRU, TOP_LOGPROBS, Asked, ask, digest, task_text
from posttrain.rewards.grm_judge import JudgeCall, JudgeReply, make_backend
from posttrain.rewards.grm_pairwise import PAIRWISE_VERSION, score_pairwise
from posttrain.rewards.grm_pairwise import preload as preload_pairs
from posttrain.rewards.grm_parse import KINDS, Criterion, Verdict, parse_rubric, parse_verdict
from posttrain.rewards.judge_code import CodeTool
from posttrain.types import RewardResult, Sample, Task

PROCEDURE_VERSION = "rubric-v3"  # v2: tool results (data/judge_tools.py) in the verdict call; v3: code runs


def rubric_schema(min_criteria: int, max_criteria: int) -> dict:
    item = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 3, "maxLength": 120},
            "kind": {"type": "string", "enum": list(KINDS)},
            "weight": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "required": ["text", "kind", "weight"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "criteria": {"type": "array", "items": item, "minItems": min_criteria, "maxItems": max_criteria}
        },
        "required": ["criteria"],
        "additionalProperties": False,
    }


def verdict_schema(reason_chars: int) -> dict:
    return choice_schema("verdict", ["yes", "no"], reason_chars)


def final_score(criteria: list[Criterion], scores: list[float]) -> float:
    total = sum(c.weight for c in criteria)
    got = sum(c.weight * (1.0 - s if c.kind == "pitfall" else s) for c, s in zip(criteria, scores))
    return 2.0 * got / total - 1.0


class GRM:
    """A reward source (`score(samples) -> list[RewardResult]`) for tasks with verifier `grm`."""

    name = "grm"

    def __init__(self, config: GRMConfig, backend=None, shared=None):
        self.config = config
        self.backend = backend if backend is not None else make_backend(config.judge, shared)
        self.cache: LRU = LRU(config.cache_entries)  # cache key -> scoreboard entry
        self.rubrics: LRU = LRU(config.cache_entries)  # rubric key -> a successful rubric call
        self.pairs: LRU = LRU(config.cache_entries)  # pairwise call key -> its record (grm_pairwise)
        self.code = CodeTool(cache_size=config.cache_entries)  # answers run on their task's examples
        c = config
        if c.method == "pairwise":
            self.procedure = f"{PAIRWISE_VERSION}/{c.verdict}/t{c.temperature}"
        else:
            self.procedure = f"{PROCEDURE_VERSION}/{c.min_criteria}-{c.max_criteria}/{c.verdict}/t{c.temperature}"
        if not c.examples:
            self.procedure += "/bare"

    @property
    def relative(self) -> bool:
        """Scores rank the responses to a task within a batch (`method: pairwise`)."""
        return self.config.method == "pairwise"

    def start(self) -> None:
        """Start the judge now (a vLLM judge loads in the background meanwhile)."""
        self.backend.start()

    def close(self) -> None:
        self.backend.close()
        self.code.close()

    def rubric_key(self, task: Task) -> str:
        return digest(task.task_id, task_text(task), self.backend.model_id, self.procedure)

    def cache_key(self, task: Task, candidate: str) -> str:
        return digest(self.rubric_key(task), candidate)

    def preload(self, entries: list[dict]) -> int:
        """Fill the cache from scoreboard entries judged with this judge and procedure."""
        if self.config.method == "pairwise":
            return preload_pairs(self, entries)
        before = len(self.cache)
        for e in entries:
            if (
                e.get("status") == "scored"
                and e.get("judge_model") == self.backend.model_id
                and e.get("procedure_version") == self.procedure
            ):
                self.cache[e["cache_key"]] = e
        return len(self.cache) - before

    # ------------------------------------------------------------ the procedure

    async def score(self, samples: list[Sample]) -> list[RewardResult]:
        if self.config.method == "pairwise":
            return await score_pairwise(self, samples)
        started = time.perf_counter()
        results: list[RewardResult | None] = [None] * len(samples)
        fresh: dict[str, list[int]] = {}
        for i, s in enumerate(samples):
            if s.model_tokens > self.config.length_cap:
                results[i] = self.capped(s)
                continue
            key = self.cache_key(s.task, s.completion.text)
            if self.config.cache and key in self.cache:
                results[i] = self.result(self.cache[key], cache_hit=True)
            else:
                fresh.setdefault(key, []).append(i)  # identical candidates are judged once
        if fresh:
            entries = await self._judge({key: samples[idx[0]] for key, idx in fresh.items()})
            latency = time.perf_counter() - started
            for key, idx in fresh.items():
                entry = dict(entries[key], latency_s=round(latency, 3))
                if entry["status"] == "scored" and self.config.cache:
                    self.cache[key] = entry
                for n, i in enumerate(idx):
                    results[i] = self.result(entry, cache_hit=n > 0)
        return results  # type: ignore[return-value]

    async def _judge(self, firsts: dict[str, Sample]) -> dict[str, dict]:
        tasks = {self.rubric_key(s.task): s.task for s in firsts.values()}
        rubrics = await self._rubrics(tasks)
        pairs = [
            (key, j, criterion)
            for key, s in firsts.items()
            for j, criterion in enumerate(rubrics[self.rubric_key(s.task)].value or [])
        ]
        runs = {}
        for key, s in firsts.items():
            runs[key] = (await self.code.runs_async(task_text(s.task), [s.completion.text]))[0]
        calls = [self._verdict_call(firsts[key], criterion, runs[key]) for key, _, criterion in pairs]
        asked = await self.ask(calls, self._parse_verdict)
        verdicts: dict[str, list[Asked]] = {key: [] for key in firsts}
        for (key, _, _), outcome in zip(pairs, asked):
            verdicts[key].append(outcome)
        entries = {}
        for key, s in firsts.items():
            entries[key] = self._entry(key, s, rubrics[self.rubric_key(s.task)], verdicts[key])
            if runs[key] is not None:  # what the judge was shown of the answer's code, on the scoreboard
                entries[key]["code_runs"] = run_lines("answer", task_text(s.task), runs[key])
        return entries

    async def _rubrics(self, tasks: dict[str, Task]) -> dict[str, Asked]:
        missing = [key for key in tasks if key not in self.rubrics]
        c = self.config
        calls = [
            JudgeCall(
                rubric_messages(task_text(tasks[key]), c.min_criteria, c.max_criteria, c.examples),
                rubric_schema(c.min_criteria, c.max_criteria),
                c.rubric_tokens,
                c.temperature,
            )
            for key in missing
        ]
        parse = lambda reply: parse_rubric(reply.text, c.min_criteria, c.max_criteria)  # noqa: E731
        fresh = dict(zip(missing, await self.ask(calls, parse)))
        for key, outcome in fresh.items():
            if outcome.value is not None:  # a failed rubric is asked for again next time
                self.rubrics[key] = outcome
        return {key: self.rubrics.get(key) or fresh[key] for key in tasks}

    def _verdict_call(self, sample: Sample, criterion: Criterion, runs=None) -> JudgeCall:
        c = self.config
        return JudgeCall(
            verdict_messages(task_text(sample.task), sample.completion.text, criterion, c.examples, runs),
            verdict_schema(c.reason_chars),
            c.verdict_tokens,
            c.temperature,
            TOP_LOGPROBS if c.verdict == "probability" else 0,
        )

    def _parse_verdict(self, reply: JudgeReply) -> Verdict:
        return parse_verdict(
            reply.text, reply.tokens, reply.top, self.config.verdict == "probability", self.config.reason_chars
        )

    async def ask(self, calls: list[JudgeCall], parse: Callable[[JudgeReply], object]) -> list[Asked]:
        """Each call until its reply parses, at most 1 + `retries` times (`grm_calls.ask`)."""
        return await ask(self.backend, calls, parse, self.config.temperature, self.config.retries)

    # ------------------------------------------------------------ the record

    def base_entry(self, key: str | None, sample: Sample) -> dict:
        """The scoreboard entry's fields both methods share: the task, the candidate, the judge."""
        return {
            "task_id": sample.task.task_id,
            "family": sample.task.family,
            "task": task_text(sample.task),
            "candidate": sample.completion.text,
            "response_tokens": sample.model_tokens,
            "length_cap": self.config.length_cap,
            "judge_model": self.backend.model_id,
            "procedure_version": self.procedure,
            "cache_key": key,
        }

    def _entry(self, key: str, sample: Sample, rubric: Asked, verdicts: list[Asked]) -> dict:
        entry = self.base_entry(key, sample)
        criteria: list[Criterion] = rubric.value or []
        entry.update(
            rubric=[asdict(c) for c in criteria],
            rubric_raw=rubric.raw,
            verdicts=[
                {
                    "criterion": j,
                    "verdict": None if v.value is None else ("yes" if v.value.yes else "no"),
                    "score": None if v.value is None else round(v.value.score, 4),
                    "probability": None
                    if v.value is None or v.value.probability is None
                    else round(v.value.probability, 4),
                    "reason": v.value.reason if v.value is not None else f"unusable: {v.error}",
                    "raw": v.raw,
                }
                for j, v in enumerate(verdicts)
            ],
        )
        entry["judge_tries"] = {"rubric": rubric.tries, "verdicts": sum(v.tries for v in verdicts)}
        entry["judge_resent"] = {"rubric": rubric.resent, "verdicts": sum(v.resent for v in verdicts)}
        failed = [j for j, v in enumerate(verdicts) if v.value is None]
        if rubric.value is None:
            entry.update(
                status="unscored",
                fault="judge_unreadable",
                score=None,
                reason=f"unscored: rubric reply unusable after {rubric.tries} tries: {rubric.error}",
            )
        elif failed:
            entry.update(
                status="unscored",
                fault="judge_unreadable",
                score=None,
                reason=f"unscored: verdict on criterion {failed[0]} unusable after "
                f"{verdicts[failed[0]].tries} tries: {verdicts[failed[0]].error}",
            )
        else:
            score = final_score(criteria, [v.value.score for v in verdicts])
            entry.update(status="scored", score=round(score, 4), reason=_summary(score, criteria, verdicts))
        return entry

    def capped(self, sample: Sample) -> RewardResult:
        """A candidate over `length_cap` tokens: -1, without a judge call."""
        entry = self.base_entry(None, sample)
        entry.update(
            status="length_capped",
            score=-1.0,
            rubric=[],
            rubric_raw=[],
            verdicts=[],
            judge_tries={"rubric": 0, "verdicts": 0},
            latency_s=0.0,
            reason=f"over length cap: {sample.model_tokens} > {self.config.length_cap} tokens",
        )
        return self.result(entry, cache_hit=False)

    def result(self, entry: dict, cache_hit: bool) -> RewardResult:
        """A scoreboard entry as a reward (ok=False where it is unscored)."""
        details = dict(entry, cache_hit=cache_hit)
        if entry["status"] == "unscored":
            return RewardResult(0.0, entry["reason"], self.name, details, ok=False)
        return RewardResult(float(entry["score"]), entry["reason"], self.name, details)


def _summary(score: float, criteria: list[Criterion], verdicts: list[Asked]) -> str:
    """`rubric 0.42: essential yes (0.91) Names..., pitfall no (0.12) ...` in at most 300 characters."""
    parts = [
        f"{c.kind} {'yes' if v.value.yes else 'no'} ({v.value.score:.2f}) {c.text[:40]}"
        for c, v in zip(criteria, verdicts)
    ]
    return f"rubric {score:.2f}: " + "; ".join(parts)[:290]
