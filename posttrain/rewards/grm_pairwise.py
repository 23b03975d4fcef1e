"""The GRM's pairwise method (`grm.method: pairwise`): the responses to one task in a batch
(an RL group) are judged against each other two at a time, each pair in both orders, in
one prompt that shows both (`judge_prompts.pairwise_messages`: every line of a response
quoted, so nothing in it can read as the frame).

For two different responses x and y to one task:

    p(x, y)   = the judge's P(A) with x shown as A and y as B (its pick, 1 or 0, without logprobs)
    win(x, y) = (p(x, y) + 1 - p(y, x)) / 2            so win(y, x) = 1 - win(x, y)

Both orders always count, so a judge that prefers the first (or the second) answer adds
the same to both sides and the order cancels. With `orders: agreeing`, a comparison whose
two orders pick different responses is a tie (win 0.5): only verdicts that agree across
orders move a reward. A response over `length_cap` scores -1 and
loses every comparison with one under it, without a judge call. The score of x is

    r(x) = 2 * mean over the other responses y of win(x, y) - 1      in [-1, 1]

over the other distinct responses to its task in the batch (identical responses are judged
once). A task whose responses in the batch are all the same scores 0 (a tie); a response
alone in the batch has nothing to be compared with and is unscored. A comparison whose
judge replies cannot be read after the retries is left out (a response cannot void the
others' scores); a response none of whose comparisons reads is unscored.

Each judge call is cached by (task, first, second, judge, procedure) in a bounded LRU, and
filled again from the scoreboard on resume, so a rescored batch gets the same numbers.
"""

from __future__ import annotations

import time
from itertools import permutations

from posttrain.data.judge_prompts import pairwise_messages, pairwise_schema
from posttrain.data.judge_tools import run_lines
from posttrain.rewards.grm_calls import TOP_LOGPROBS, digest, task_text
from posttrain.rewards.grm_judge import JudgeCall, JudgeReply
from posttrain.rewards.grm_parse import Choice, parse_choice
from posttrain.types import RewardResult, Sample

PAIRWISE_VERSION = "pairwise-v3"  # v2: tool results (data/judge_tools.py) follow the answers; v3: code runs


def call_key(task_key: str, first: str, second: str) -> str:
    return digest(task_key, first, second)


async def score_pairwise(grm, samples: list[Sample]) -> list[RewardResult]:
    started = time.perf_counter()
    results: list[RewardResult | None] = [None] * len(samples)
    groups: dict[str, dict[str, list[int]]] = {}  # task key -> response -> sample indices
    capped: dict[str, dict[str, int]] = {}  # task key -> response over the cap -> its tokens
    for i, s in enumerate(samples):
        key = grm.rubric_key(s.task)
        if s.model_tokens > grm.config.length_cap:
            results[i] = grm.capped(s)
            capped.setdefault(key, {})[s.completion.text] = s.model_tokens
        else:
            groups.setdefault(key, {}).setdefault(s.completion.text, []).append(i)
    tasks = {key: task_text(samples[next(iter(texts.values()))[0]].task) for key, texts in groups.items()}
    runs = {}  # task key -> response -> its code runs on the task's examples (None: the task states none)
    for key, texts in groups.items():
        runs[key] = dict(zip(texts, await grm.code.runs_async(tasks[key], list(texts))))
    calls = await _judged(grm, groups, tasks, runs)
    latency = round(time.perf_counter() - started, 3)
    for key, texts in groups.items():
        for text, idx in texts.items():
            entry, cached = _entry(grm, samples[idx[0]], key, text, texts, capped.get(key, {}), calls)
            entry["latency_s"] = latency
            if runs[key][text] is not None:  # what the judge was shown of the answer's code
                entry["code_runs"] = run_lines("answer", tasks[key], runs[key][text])
            for n, i in enumerate(idx):
                results[i] = grm.result(entry, cache_hit=cached or n > 0)
    return results  # type: ignore[return-value]


async def _judged(
    grm, groups: dict[str, dict[str, list[int]]], tasks: dict[str, str], runs: dict[str, dict]
) -> dict[str, dict]:
    """Every ordered pair's call record ({p, pick, reason, raw, tries, cached} or {error, raw,
    tries}), from the cache (tries 0: no call made now) or asked now, all fresh calls of the
    batch in one round."""
    c = grm.config
    out: dict[str, dict] = {}
    wanted: dict[str, JudgeCall] = {}
    for key, texts in groups.items():
        task, ran = tasks[key], runs[key]
        for first, second in permutations(texts, 2):
            ck = call_key(key, first, second)
            if c.cache and ck in grm.pairs:
                out[ck] = dict(grm.pairs[ck], cached=True, tries=0)
            elif ck not in wanted:
                wanted[ck] = JudgeCall(
                    pairwise_messages(task, first, second, (ran[first], ran[second])),
                    pairwise_schema(c.reason_chars),
                    c.verdict_tokens,
                    c.temperature,
                    TOP_LOGPROBS if c.verdict == "probability" else 0,
                )

    def parse(reply: JudgeReply) -> Choice:
        return parse_choice(reply.text, reply.tokens, reply.top, c.verdict == "probability", c.reason_chars)

    asked = await grm.ask(list(wanted.values()), parse)
    for ck, a in zip(wanted, asked):
        if a.value is None:
            out[ck] = {"error": a.error, "raw": a.raw, "tries": a.tries}
            continue
        record = {
            "p": round(a.value.p_first, 4),
            "pick": "A" if a.value.first else "B",
            "reason": a.value.reason,
            "raw": a.raw,
            "tries": a.tries,
        }
        if c.cache:
            grm.pairs[ck] = record
        out[ck] = dict(record, cached=False)
    return out


def _entry(
    grm, sample: Sample, key: str, text: str, texts: dict, capped: dict[str, int], calls: dict
) -> tuple[dict, bool]:
    """The scoreboard entry of one response, and whether every judge call it rests on came
    from the cache."""
    entry = grm.base_entry(digest(key, text), sample)
    comparisons, tries, errors, cached = [], 0, [], True
    for other in texts:
        if other == text:
            continue
        shown_first, shown_second = calls[call_key(key, text, other)], calls[call_key(key, other, text)]
        tries += shown_first["tries"] + shown_second["tries"]
        cached = cached and bool(shown_first.get("cached")) and bool(shown_second.get("cached"))
        row = {"opponent": other[:300], "by": "judge"}
        if "error" in shown_first or "error" in shown_second:
            bad = shown_first if "error" in shown_first else shown_second
            errors.append(bad["error"])
            row.update(win=None, error=bad["error"], raw=[*shown_first["raw"], *shown_second["raw"]])
        else:
            as_first, as_second = shown_first["p"], 1.0 - shown_second["p"]
            agree = (shown_first["pick"] == "A") == (shown_second["pick"] == "B")
            summed = (as_first + as_second) / 2
            row.update(
                win=round(summed if agree or grm.config.orders == "summed" else 0.5, 4),
                as_first=round(as_first, 4),  # P(this response is better) when shown as A
                as_second=round(as_second, 4),  # ... and when shown as B
                orders_agree=agree,
                reasons=[shown_first["reason"], shown_second["reason"]],
                raw=[*shown_first["raw"], *shown_second["raw"]],
                calls=[
                    {"key": call_key(key, a, b), "p": shown["p"], "pick": shown["pick"], "replies": len(shown["raw"])}
                    for (a, b), shown in (((text, other), shown_first), ((other, text), shown_second))
                ],
            )
        comparisons.append(row)
    for other, tokens in capped.items():
        comparisons.append({"opponent": other[:300], "by": "length cap", "opponent_tokens": tokens, "win": 1.0})
    entry.update(method="pairwise", rubric=[], rubric_raw=[], verdicts=[], comparisons=comparisons)
    entry["judge_tries"] = {"rubric": 0, "verdicts": 0, "pairwise": tries}
    wins = [row["win"] for row in comparisons if row["win"] is not None]
    if not comparisons and len(texts[text]) > 1:
        entry.update(status="scored", score=0.0, reason="pairwise 0.00: every response to this task here is the same")
    elif not comparisons:
        entry.update(
            status="unscored",
            score=None,
            reason="unscored: pairwise judging compares the responses to one task within a batch, and this "
            "response is the only one to its task here (give the task 2 or more samples)",
        )
    elif not wins:
        entry.update(
            status="unscored",
            fault="judge_unreadable",
            score=None,
            reason=f"unscored: none of its {len(comparisons)} comparisons could be read: {errors[0]}"[:300],
        )
    else:
        score = 2.0 * sum(wins) / len(wins) - 1.0
        judged = [row for row in comparisons if row["by"] == "judge" and row["win"] is not None]
        agree = sum(row["orders_agree"] for row in judged)
        reason = f"pairwise {score:.2f}: won {sum(wins):.1f} of {len(wins)} comparisons"
        if judged:
            reason += f"; both orders picked the same in {agree} of {len(judged)}"
        if len(capped):
            reason += f"; {len(capped)} over the length cap"
        if errors:
            reason += f"; {len(errors)} unreadable, left out"
        entry.update(status="scored", score=round(score, 4), reason=reason)
    return entry, cached and any(row["by"] == "judge" for row in comparisons)


def preload(grm, entries: list[dict]) -> int:
    """Fill the call cache from scoreboard entries judged pairwise with this judge and procedure."""
    before = len(grm.pairs)
    for e in entries:
        if e.get("method") != "pairwise" or e.get("judge_model") != grm.backend.model_id:
            continue
        if e.get("procedure_version") != grm.procedure:
            continue
        for row in e.get("comparisons") or []:
            reasons, raw, start = row.get("reasons") or ["", ""], row.get("raw") or [], 0
            for n, call in enumerate(row.get("calls") or []):
                replies = call.get("replies", 1)  # the row's raw replies: the first call's, then the second's
                grm.pairs[call["key"]] = {
                    "p": call["p"],
                    "pick": call["pick"],
                    "reason": reasons[n] if n < len(reasons) else "",
                    "raw": raw[start : start + replies],
                    "tries": replies,
                }
                start += replies
    return len(grm.pairs) - before
