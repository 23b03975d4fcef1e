"""GRM unit tests, no engine: reading messy judge replies, the score formula, and retries
up to `unscored` (these last use a scripted judge; the real judges are in test_grm.py)."""

import asyncio
import math

import pytest

from posttrain.config import GRMConfig
from posttrain.rewards.grm import GRM, final_score, rubric_schema, verdict_schema
from posttrain.rewards.grm_judge import JudgeReply
from posttrain.rewards.grm_parse import (
    Criterion,
    ParseError,
    extract_json,
    parse_rubric,
    parse_verdict,
    value_probability,
    yes_no_class,
)
from posttrain.types import Completion, Message, Sample, Task

RUBRIC = (
    '{"criteria": [{"text": "Is a poem", "kind": "essential", "weight": 5}, '
    '{"text": "Mentions bicycles", "kind": "important", "weight": 3}, '
    '{"text": "Rambles about taxes", "kind": "pitfall", "weight": 2}]}'
)


@pytest.mark.parametrize(
    "text",
    [
        '{"verdict": "yes", "reason": "ok"}',
        'Sure! Here is my answer:\n```json\n{"verdict": "yes", "reason": "ok"}\n```\nHope it helps.',
        'The JSON is {"verdict": "yes", "reason": "ok",} and that is all',  # trailing comma
        "{'verdict': 'yes', 'reason': 'ok'}",  # Python quoting
        'noise {"a": {"verdict": "no"}} then {"verdict": "yes", "reason": "a } brace in a string"}',
    ],
)
def test_extract_json_from_messy_text(text):
    value = extract_json(text)
    assert isinstance(value, dict)
    assert value.get("verdict") == "yes" or value.get("a") == {"verdict": "no"}


def test_extract_json_rejects_text_without_json():
    with pytest.raises(ParseError):
        extract_json("I think the answer is fine.")


def test_rubric_from_json_dedupes_and_caps():
    doubled = RUBRIC.replace(
        "]}",
        ', {"text": "is a  POEM!", "kind": "essential", "weight": 4}, '
        '{"text": "Rhymes", "kind": "optional", "weight": 1}]}',
    )
    criteria = parse_rubric(doubled, 3, 3)
    assert [c.text for c in criteria] == ["Is a poem", "Mentions bicycles", "Rambles about taxes"]
    assert [c.kind for c in criteria] == ["essential", "important", "pitfall"]


def test_rubric_drops_invalid_items_and_needs_the_minimum():
    bad = (
        '{"criteria": [{"text": "Is a poem", "kind": "essential", "weight": 5}, '
        '{"text": "x", "kind": "essential", "weight": 5}, {"text": "Good", "kind": "vital", "weight": 2}, '
        '{"text": "Uses rhyme", "kind": "optional", "weight": 0}]}'
    )
    with pytest.raises(ParseError, match="1 valid distinct criteria"):
        parse_rubric(bad, 3, 10)


def test_rubric_fallback_from_prose_lines():
    text = (
        "Here is the rubric:\n1. [essential, 5] Is a poem about bicycles\n"
        "2. important (weight 3): Uses imagery\n- pitfall, 2 - Talks about taxes\nThanks!"
    )
    criteria = parse_rubric(text, 3, 10)
    assert [(c.kind, c.weight) for c in criteria] == [("essential", 5), ("important", 3), ("pitfall", 2)]
    assert criteria[0].text == "Is a poem about bicycles" and criteria[2].text == "Talks about taxes"


@pytest.mark.parametrize(
    "text, yes, reason",
    [
        ('{"verdict": "no", "reason": "It is about taxes."}', False, "It is about taxes."),
        ("Verdict: YES. Reason: it rhymes", True, "it rhymes"),
        ('{"verdict": "yes", "reason": "cut short by the tok', True, "cut short by the tok"),  # truncated reply
        ("No, the answer never mentions bicycles.", False, "the answer never mentions bicycles."),
    ],
)
def test_verdicts_from_messy_text(text, yes, reason):
    verdict = parse_verdict(text)
    assert verdict.yes is yes and verdict.score == float(yes) and verdict.reason == reason


@pytest.mark.parametrize(
    "text",
    [
        '{"verdict": "maybe", "reason": "x"}',
        "I cannot tell.",
        "",
        # hedges: read as their first word before, so a judge (or a judge in training) that hedged was
        # credited with whichever word came first
        "yes or no",
        "Yes/No",
        "no... actually yes",
        "Verdict: yes. Verdict: no.",
    ],
)
def test_unreadable_verdicts_raise(text):
    with pytest.raises(ParseError):
        parse_verdict(text)


def test_verdict_probability_from_top_logprobs():
    # tokens as a vLLM judge returns them; at the value's first token the judge gave
    # yes 0.6 and no 0.2 (plus a 0.2 token that is neither): P(yes) = 0.6 / 0.8 = 0.75
    tokens = ['{"', "verdict", '":', ' "', "yes", '",', ' "', "reason", '":', ' "', "fine", '"}']
    top = [{t: 0.0} for t in tokens]
    top[4] = {"yes": math.log(0.6), "no": math.log(0.2), "maybe": math.log(0.2)}
    verdict = parse_verdict("".join(tokens), tokens, top)
    assert verdict.yes and verdict.probability == pytest.approx(0.75) and verdict.score == pytest.approx(0.75)
    # the value may start inside a token (`":"yes`): alternatives sharing the token's prefix count
    tokens2 = ['{"verdict', '":"n', 'o","reason":"x"}']
    top2 = [{tokens2[0]: 0.0}, {'":"n': math.log(0.3), '":"y': math.log(0.1), '": ': math.log(0.6)}, {tokens2[2]: 0.0}]
    assert value_probability(tokens2, top2, "verdict", yes_no_class) == pytest.approx(0.25)


def test_final_score_formula():
    # weights 5 (essential, met c=1), 3 (important, c=0.5), 2 (pitfall, hit c=1):
    # got = 5*1 + 3*0.5 + 2*(1-1) = 6.5 of 10 -> r = 2*0.65 - 1 = 0.3
    criteria = [Criterion("a", "essential", 5), Criterion("b", "important", 3), Criterion("c", "pitfall", 2)]
    assert final_score(criteria, [1.0, 0.5, 1.0]) == pytest.approx(0.3)
    assert final_score(criteria, [1.0, 1.0, 0.0]) == pytest.approx(1.0)
    assert final_score(criteria, [0.0, 0.0, 1.0]) == pytest.approx(-1.0)


def test_schemas_bound_what_the_judge_may_write():
    schema = rubric_schema(3, 6)["properties"]["criteria"]
    assert (schema["minItems"], schema["maxItems"]) == (3, 6)
    assert schema["items"]["properties"]["kind"]["enum"] == ["essential", "important", "optional", "pitfall"]
    assert verdict_schema(50)["properties"]["reason"]["maxLength"] == 50


# ---------------------------------------------------------------- retries, with a scripted judge


class ScriptedJudge:
    """Answers rubric calls and verdict calls from two scripts, one reply per call, in order."""

    model_id = "scripted@test"

    def __init__(self, rubric_replies, verdict_replies):
        self.rubric_replies, self.verdict_replies = list(rubric_replies), list(verdict_replies)
        self.calls = []

    def start(self):
        pass

    def close(self):
        pass

    async def complete(self, calls):
        self.calls.append(calls)
        out = []
        for call in calls:
            script = self.rubric_replies if "criteria" in call.schema["properties"] else self.verdict_replies
            out.append(JudgeReply(script.pop(0)) if script[0] is not None else JudgeReply(script.pop(0), "timed out"))
        return out


def writing_sample(text="Wheels hum.", tokens=3, task_id="w/1"):
    task = Task(task_id, "writing", (Message("user", "Write a short poem about bicycles."),), verifier="grm")
    return Sample(task, 0, (1,), Completion(tuple(range(tokens)), (0.0,) * tokens, text, "stop"))


def grm_with(judge, **settings):
    config = GRMConfig(
        judge={"type": "http", "base_url": "http://unused", "model": "m", "api_key_env": None},
        verdict="binary",
        **settings,
    )
    return GRM(config, backend=judge)


def test_malformed_replies_are_retried_then_scored():
    yes = '{"verdict": "yes", "reason": "ok"}'
    judge = ScriptedJudge(["not json at all", RUBRIC], ["garbage", yes, yes, None, '{"verdict": "no", "reason": "r"}'])
    result = asyncio.run(grm_with(judge, retries=2).score([writing_sample()]))[0]
    # rubric: 2 tries; verdicts: first round 3 calls (garbage, yes, yes); second round the 1st criterion again
    # (a timeout); third round: "no" -> scores [0, 1, 1 (pitfall hit)]: got = 0 + 3 + 0 of 10 -> 2*0.3-1 = -0.4
    assert result.ok and result.score == pytest.approx(-0.4)
    assert result.details["judge_tries"] == {"rubric": 2, "verdicts": 5}
    assert [len(c) for c in judge.calls] == [1, 1, 3, 1, 1]
    assert judge.calls[1][0].temperature > 0  # a retry is sampled, not a greedy repeat
    assert result.details["verdicts"][0]["raw"] == ["garbage", "<error: timed out>", '{"verdict": "no", "reason": "r"}']


def test_after_the_retries_the_sample_is_unscored_not_zero():
    judge = ScriptedJudge([RUBRIC], ["bad"] * 3 + ['{"verdict": "yes", "reason": "ok"}'] * 2)
    result = asyncio.run(grm_with(judge, retries=0).score([writing_sample()]))[0]
    assert not result.ok and result.reason.startswith("unscored: verdict on criterion 0 unusable after 1 tries")
    assert result.details["status"] == "unscored" and result.details["score"] is None
    judge = ScriptedJudge(["bad", "worse"], [])
    result = asyncio.run(grm_with(judge, retries=1).score([writing_sample()]))[0]
    assert not result.ok and "rubric reply unusable after 2 tries" in result.reason


def test_cache_key_covers_task_candidate_judge_and_procedure():
    class Named:  # only its name is read here
        def __init__(self, model_id):
            self.model_id = model_id

    base = grm_with(Named("judge@1"))
    s = writing_sample("Wheels hum.")
    key = base.cache_key(s.task, s.completion.text)
    assert key == grm_with(Named("judge@1")).cache_key(s.task, s.completion.text)
    assert key != grm_with(Named("judge@2")).cache_key(s.task, s.completion.text)
    assert key != grm_with(Named("judge@1"), max_criteria=4).cache_key(s.task, s.completion.text)
    assert key != base.cache_key(s.task, "Wheels hum!")
    assert key != base.cache_key(writing_sample(task_id="w/2").task, s.completion.text)


def test_grm_metrics_count_unscored_and_capped():
    from posttrain.records.rl_metrics import grm_metrics
    from posttrain.types import RewardResult

    results = [
        RewardResult(0.5, "r", "grm", {"status": "scored", "cache_hit": True, "latency_s": 2.0}),
        RewardResult(-1.0, "over length cap", "grm", {"status": "length_capped", "cache_hit": False}),
        RewardResult(0.0, "unscored: ...", "grm", {"status": "unscored", "latency_s": 2.0}, ok=False),
        RewardResult(1.0, "correct", "reasoning_gym", {}),
    ]
    assert grm_metrics(results) == {
        "grm/score_mean": 0.5,
        "grm/unscored": 1.0,
        "grm/length_capped": 1.0,
        "grm/cache_hit": pytest.approx(1 / 3),
        "grm/latency_s": 2.0,
        "grm/unreadable_frac": 0.0,  # no verdicts recorded on these results
    }
    assert grm_metrics(results[3:]) == {}
