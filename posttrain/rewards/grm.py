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

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from posttrain.config import GRMConfig
from posttrain.data.judge_prompts import choice_schema, rubric_messages, verdict_messages
from posttrain.data.judge_tools import run_lines
from posttrain.rewards.grm_judge import JudgeCall, JudgeReply, make_backend
from posttrain.rewards.grm_pairwise import PAIRWISE_VERSION, score_pairwise
from posttrain.rewards.grm_pairwise import preload as preload_pairs
from posttrain.rewards.grm_parse import KINDS, Criterion, ParseError, Verdict, parse_rubric, parse_verdict
from posttrain.rewards.judge_code import CodeTool
from posttrain.types import RewardResult, Sample, Task

log = logging.getLogger(__name__)

PROCEDURE_VERSION = "rubric-v3"  # v2: tool results (data/judge_tools.py) in the verdict call; v3: code runs
RETRY_TEMPERATURE = 0.7  # a retry at temperature 0 would repeat the same malformed reply
TOP_LOGPROBS = 10


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


def task_text(task: Task) -> str:
    """What the judge is told the task was: the user turn, with any system turn before it."""
    turns = [m for m in task.messages if m.role in ("system", "user")]
    if len(turns) == 1:
        return turns[0].content
    return "\n".join(f"{m.role}: {m.content}" for m in turns)


def final_score(criteria: list[Criterion], scores: list[float]) -> float:
    total = sum(c.weight for c in criteria)
    got = sum(c.weight * (1.0 - s if c.kind == "pitfall" else s) for c, s in zip(criteria, scores))
    return 2.0 * got / total - 1.0


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


class LRU(OrderedDict):
    """A dict of at most `size` items: reading one makes it the newest, the oldest go first."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


@dataclass
class Asked:
    """The outcome of one judge call and its retries."""

    value: object | None
    raw: list[str]
    error: str | None = None
    resent: int = 0  # requests the backend sent again after a transport failure, over all tries

    @property
    def tries(self) -> int:
        return len(self.raw)


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
        return _digest(task.task_id, task_text(task), self.backend.model_id, self.procedure)

    def cache_key(self, task: Task, candidate: str) -> str:
        return _digest(self.rubric_key(task), candidate)

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
                results[i] = self._capped(s)
                continue
            key = self.cache_key(s.task, s.completion.text)
            if self.config.cache and key in self.cache:
                results[i] = self._result(self.cache[key], cache_hit=True)
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
                    results[i] = self._result(entry, cache_hit=n > 0)
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
        asked = await self._ask(calls, self._parse_verdict)
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
        fresh = dict(zip(missing, await self._ask(calls, parse)))
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

    async def _ask(self, calls: list[JudgeCall], parse: Callable[[JudgeReply], object]) -> list[Asked]:
        """Each call until its reply parses, at most 1 + retries times; all pending calls of
        a round go to the judge together."""
        out = [Asked(None, []) for _ in calls]
        pending, unreadable = list(range(len(calls))), set()
        hot = max(self.config.temperature, RETRY_TEMPERATURE)
        for attempt in range(1 + self.config.retries):
            if not pending:
                break
            # only a reply that came back and could not be read is asked again hotter: a failed
            # request (network, status, timeout) is sent again as it was
            asked = [
                replace(calls[i], temperature=hot if i in unreadable else self.config.temperature) for i in pending
            ]
            replies = await self.backend.complete(asked)
            still = []
            for i, reply in zip(pending, replies):
                out[i].raw.append(reply.text if reply.text is not None else f"<error: {reply.error}>")
                out[i].resent += reply.resent
                try:
                    if reply.text is None:
                        raise ParseError(reply.error or "no reply")
                    out[i].value, out[i].error = parse(reply), None
                except ParseError as exc:
                    out[i].error = str(exc)
                    still.append(i)
                    if not reply.transport:
                        unreadable.add(i)
            if still:
                log.warning(
                    "grm: %d of %d judge replies unusable (try %d): %s",
                    len(still),
                    len(pending),
                    attempt + 1,
                    out[still[0]].error,
                )
            pending = still
        return out

    # ------------------------------------------------------------ the record

    def _base(self, key: str | None, sample: Sample) -> dict:
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
        entry = self._base(key, sample)
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

    def _capped(self, sample: Sample) -> RewardResult:
        entry = self._base(None, sample)
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
        return self._result(entry, cache_hit=False)

    def _result(self, entry: dict, cache_hit: bool) -> RewardResult:
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
