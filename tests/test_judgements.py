"""The judge's training data (`type: judgements`): cases with known verdicts in the GRM's own
call formats, a `train` and a `heldout` part that share no subject, the `judgement` verifier
that scores a judge's reply as the GRM reads it, and a GRM judge named by the stage that
trained it (`model: stage:NAME`)."""

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

from posttrain.config import GRMConfig, JudgementTasks, PipelineConfig
from posttrain.config.tasks import JUDGEMENT_KINDS
from posttrain.data.judgements import cases, part_of
from posttrain.data.tasks import load_tasks
from posttrain.rewards.grm import GRM
from posttrain.rewards.grm_judge import JudgeReply
from posttrain.rewards.judgement import JudgementVerifier
from posttrain.types import Completion, Message, Sample, Task


def reply(task: Task, text: str) -> Sample:
    return Sample(task, 0, (1,), Completion((1,), (0.0,), text, "stop"))


@pytest.mark.parametrize("part", ["train", "heldout"])
def test_every_kind_has_cases_of_both_verdicts_and_the_known_reply_scores_1(part):
    tasks = load_tasks(
        JudgementTasks(type="judgements", size=60, part=part, calls=["rubric", "verdict", "likert", "pairwise"])
    )
    verifier = JudgementVerifier()
    assert {t.entry["kind"] for t in tasks} == set(JUDGEMENT_KINDS)
    likert = [t for t in tasks if t.entry["call"] == "likert"]
    assert likert and all(t.entry["score"] == 10 for t in likert if t.entry["side"] == "good")
    assert all(t.entry["score"] <= 5 for t in likert if t.entry["side"] == "bad")
    labels = Counter((t.entry["kind"], t.entry["label"]) for t in tasks if t.entry["call"] == "verdict")
    assert all(labels[(kind, "yes")] and labels[(kind, "no")] for kind in JUDGEMENT_KINDS)
    scores = [verifier.score_one(reply(t, t.answer)) for t in tasks]
    assert all(r.ok and r.score == 1.0 for r in scores), [r.reason for r in scores if r.score < 1][:3]


def test_a_wrong_or_unreadable_verdict_scores_0_and_is_scored():
    tasks = [t for t in load_tasks(JudgementTasks(type="judgements", size=20, calls=["verdict"]))]
    verifier = JudgementVerifier()
    for task in tasks[:20]:
        flipped = "no" if task.entry["label"] == "yes" else "yes"
        wrong = verifier.score_one(reply(task, json.dumps({"verdict": flipped, "reason": "x"})))
        assert wrong.ok and wrong.score == 0.0 and f"the answer is {task.entry['label']}" in wrong.reason
        for garbage in ("", "I cannot decide.", '{"verdict": "maybe"}'):
            result = verifier.score_one(reply(task, garbage))
            assert result.ok and result.score == 0.0, garbage
    # the GRM's own reading: a plain-text verdict counts as the GRM would count it
    task = tasks[0]
    assert verifier.score_one(reply(task, f"Verdict: {task.entry['label']}. It does.")).score == 1.0


def conforms(value, schema: dict) -> bool:
    """`value` within the JSON-schema subset the GRM's schemas use (object, array, string,
    integer; enum, bounds, lengths, required, no extra keys)."""
    kind = schema["type"]
    if kind == "object":
        props = schema["properties"]
        return (
            isinstance(value, dict)
            and set(schema["required"]) <= set(value) <= set(props)
            and all(conforms(v, props[k]) for k, v in value.items())
        )
    if kind == "array":
        return (
            isinstance(value, list)
            and schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value))
            and all(conforms(v, schema["items"]) for v in value)
        )
    if kind == "string":
        return (
            isinstance(value, str)
            and schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value))
            and value in schema.get("enum", [value])
        )
    return isinstance(value, int) and schema.get("minimum", value) <= value <= schema.get("maximum", value)  # integer


def test_every_training_reply_is_what_the_engine_lets_the_judge_write():
    """The judge engine forces compact JSON in the schema's key order (xgrammar, no free
    whitespace): a training reply in any other layout teaches the verdict after a prefix the
    judge never sees when it judges (the first trained judge learned `{"verdict": "` and was
    read after `{"verdict":"`)."""
    from posttrain.data.judge_prompts import likert_schema, pairwise_schema
    from posttrain.rewards.grm import rubric_schema, verdict_schema

    schemas = {
        "rubric": rubric_schema(3, 10),
        "verdict": verdict_schema(80),
        "likert": likert_schema(),
        "pairwise": pairwise_schema(80),
    }
    tasks = load_tasks(JudgementTasks(type="judgements", size=60, calls=["rubric", "verdict", "likert", "pairwise"]))
    for task in tasks:
        schema = schemas[task.entry["call"]]
        value = json.loads(task.answer)
        assert conforms(value, schema), task.answer
        assert task.answer == json.dumps(value, separators=(",", ":"), ensure_ascii=False), task.answer
        assert list(value) == list(schema["properties"]), task.answer  # keys in the order the grammar writes them
        for item in value.get("criteria", []):
            assert list(item) == list(schema["properties"]["criteria"]["items"]["properties"]), task.answer


def test_a_1_to_10_reply_scores_1_within_a_point_of_the_known_score():
    tasks = load_tasks(JudgementTasks(type="judgements", size=4, calls=["likert"]))
    verifier = JudgementVerifier()
    for task in tasks:
        known = task.entry["score"]
        near = verifier.score_one(reply(task, json.dumps({"score": max(known - 1, 1), "reason": "x"})))
        far = verifier.score_one(reply(task, json.dumps({"score": 11 - known if known != 5 else 9, "reason": "x"})))
        assert near.score == 1.0 and far.ok and far.score == 0.0, (known, far.reason)
        assert verifier.score_one(reply(task, "ten")).score == 0.0


def test_a_rubric_reply_must_read_and_mark_the_mistake_as_a_pitfall():
    (task,) = [t for t in load_tasks(JudgementTasks(type="judgements", size=1, kinds=["fact"], calls=["rubric"]))]
    verifier = JudgementVerifier()
    assert verifier.score_one(reply(task, task.answer)).score == 1.0
    no_pitfall = {"criteria": [{"text": f"Check {i}", "kind": "essential", "weight": 3} for i in range(3)]}
    assert verifier.score_one(reply(task, json.dumps(no_pitfall))).score == 0.0
    assert verifier.score_one(reply(task, "a rubric")).score == 0.0


def test_train_and_heldout_share_no_subject_and_no_prompt():
    train, heldout = cases(400, 0, "train"), cases(300, 0, "heldout")
    assert not {c.key for c in train} & {c.key for c in heldout}
    assert {part_of(c.key) for c in train} == {"train"} and {part_of(c.key) for c in heldout} == {"heldout"}
    assert not {c.task for c in train} & {c.task for c in heldout}
    assert len({(c.task, c.good, c.bad) for c in heldout}) == 300 and len({c.kind for c in heldout}) >= 6


def test_no_code_body_is_right_or_wrong_by_itself_in_either_part():
    """A judge that learned which body is right, without reading the task, is at chance: in
    each part every body is the right one of some case and the wrong one of another, and the
    right one always gives the test call's stated value while the wrong one does not."""
    for part, count in (("train", 600), ("heldout", 500)):
        code = [c for c in cases(count, 3, part, ("code",))]
        body = lambda response: response.split("return ")[-1].split("\n")[0]  # noqa: E731
        right, wrong = Counter(body(c.good) for c in code), Counter(body(c.bad) for c in code)
        assert set(right) <= set(wrong), part
        if part == "train":
            assert set(wrong) <= set(right)
        for c in code:
            call, value = c.checks[1].why_good.removesuffix(".").split(" gives ")
            name, params = c.good.split("def ")[1].split(":")[0].split("(")
            namespace = {}
            exec(
                f"def {name}({params}:\n    return {body(c.good)}\ndef bad({params}:\n    return {body(c.bad)}",
                namespace,
            )
            args = eval(call[len(name) :])
            assert repr(namespace[name](*args)) == value != repr(namespace["bad"](*args))


def test_the_calls_are_the_grms_own_calls():
    """What the judge trains on is what the GRM sends it: the same messages, with or without
    the worked examples (`examples`), for the rubric and for each criterion's verdict."""

    class Recording:  # isolates the GRM from any judge: records its calls, answers with the known replies
        model_id = "recording"

        def __init__(self, answers):
            self.answers, self.calls = answers, []

        async def complete(self, calls):
            self.calls += calls
            return [JudgeReply(self.answers[json.dumps(c.messages[-1])]) for c in calls]

    for examples in (True, False):
        source = JudgementTasks(type="judgements", size=1, kinds=["fact"], examples=examples)
        tasks = load_tasks(source)
        answers = {json.dumps({"role": "user", "content": t.messages[-1].content}): t.answer for t in tasks}
        backend = Recording(answers)
        grm = GRM(GRMConfig(judge={"type": "http", "base_url": "http://x", "model": "m"}, examples=examples), backend)
        task = Task("t", "writing", (Message("user", tasks[0].entry["case_task"]),), verifier="grm")
        good = next(t for t in tasks if t.entry.get("side") == "good")
        candidate = good.messages[-1].content.split("Their answer:\n", 1)[1].split("\n\nTool results (", 1)[0]
        result = asyncio.run(grm.score([reply(task, candidate)]))[0]
        sent = {tuple((m["role"], m["content"]) for m in c.messages) for c in backend.calls}
        trained = {tuple((m.role, m.content) for m in t.messages) for t in tasks if t.entry.get("side") != "bad"}
        assert sent == trained and result.ok and result.score == 1.0  # the clean answer meets its whole rubric
        assert len(backend.calls[0].messages) == (6 if examples else 2)


def pipeline(judge_model: str, judge_stage_first: bool = True) -> dict:
    judge = {
        "name": "judge",
        "type": "sft",
        "init_from": "model",
        "steps": 1,
        "lr": 1e-4,
        "data": {"type": "judgements"},
    }
    rl = {
        "name": "rl",
        "type": "rl",
        "steps": 1,
        "lr": 1e-4,
        "init_from": "model",
        "tasks": {"type": "writing", "size": 4},
        "reward": {"grm": {"judge": {"type": "vllm", "model": judge_model}, "examples": False}},
    }
    return {"name": "p", "model": {"name": "tiny"}, "stages": [judge, rl] if judge_stage_first else [rl, judge]}


def test_a_grm_judge_can_be_the_checkpoint_of_an_earlier_stage(tmp_path):
    config = PipelineConfig.model_validate(pipeline("stage:judge"))
    rl = config.stages[1]
    assert rl.judge_stage() == "judge" and config.stages[0].judge_stage() is None
    resolved = rl.with_judge_from({"judge": tmp_path / "final"})
    assert resolved.reward.grm.judge.model == str(tmp_path / "final") and rl.reward.grm.judge.model == "stage:judge"
    with pytest.raises(ValueError, match="judge.model: 'judge' names no earlier stage"):
        PipelineConfig.model_validate(pipeline("stage:judge", judge_stage_first=False))
    with pytest.raises(ValueError, match="'nope' names no earlier stage"):
        PipelineConfig.model_validate(pipeline("stage:nope"))
    with pytest.raises(ValueError, match="has made no checkpoint"):
        rl.with_judge_from({})


def test_replay_finds_the_reward_config_of_every_stage_that_scored():
    from posttrain.config.files import load_pipeline
    from posttrain.rewards.debug import DebugError, scoring_stage

    config = load_pipeline(Path(__file__).parent.parent / "pipelines" / "quickstart.yaml")
    job = scoring_stage(config, "experts/coding-low")
    assert job.type == "rl" and job.tasks == config.stage("experts").domains["coding"] and job.budget.effort == "low"
    mopd = scoring_stage(config, "mopd")  # its prompts are the experts' domains, as it ran
    assert set(mopd.task_sources()) == {"domains.general", "domains.coding", "domains.agent"}
    for bad, why in (("eval/sft/general-max", "not a stage whose reward"), ("experts", "name one job"),
                     ("experts/coding-mid", "name one job"), ("sft", "not a stage whose reward")):  # fmt: skip
        with pytest.raises(DebugError, match=why):
            scoring_stage(config, bad)
    judged = PipelineConfig.model_validate(
        {
            "name": "j",
            "model": {"name": "tiny"},
            "stages": [{"name": "judge", "type": "judge", "steps": 1, "lr": 1e-4, "rl": {"steps": 2}}],
        }  # fmt: skip
    )
    assert scoring_stage(judged, "judge/rl").tasks.calls == ["verdict"]


def test_the_decision_token_of_a_reply_weighs_decision_weight_and_nothing_else_changes():
    from transformers import AutoTokenizer

    from posttrain.config import ModelConfig
    from posttrain.models import resolve_model
    from posttrain.stages.judge import decision_weigher
    from posttrain.stages.sft import sft_sequences

    tok = AutoTokenizer.from_pretrained(resolve_model(ModelConfig(name="smollm2-135m-instruct")))
    tasks = load_tasks(JudgementTasks(type="judgements", size=6, calls=["rubric", "verdict", "likert"], examples=False))
    conversations = [t.messages + (Message("assistant", t.answer),) for t in tasks]
    plain = sft_sequences(tok, conversations, 512)
    weighted = sft_sequences(tok, conversations, 512, decision_weigher(tok, 8.0))
    for task, a, b in zip(tasks, plain, weighted):
        changed = [k for k, (x, y) in enumerate(zip(a.loss_mask, b.loss_mask)) if x != y]
        if task.entry["call"] == "rubric":
            assert changed == [], task.answer
            continue
        (k,) = changed  # exactly one token: the verdict's word or the score's first token
        assert b.loss_mask[k] == 8.0 and set(a.loss_mask) == {1.0}
        decision = tok.decode([b.token_ids[b.prompt_len + k]])
        expected = task.entry["label"] if task.entry["call"] == "verdict" else str(task.entry["score"])
        assert expected.startswith(decision) and decision, (decision, task.answer)


def test_a_pairwise_call_holds_both_answers_in_the_order_asked():
    from posttrain.data.judge_prompts import PAIRWISE_PREFIX, pairwise_messages, quoted, reply_json

    case = cases(1, 0, "train")[0]
    forward, backward = (
        pairwise_messages(case.task, case.good, case.bad),
        pairwise_messages(case.task, case.bad, case.good),
    )
    assert forward[0] == backward[0] and forward[0]["role"] == "system"
    prompt = forward[1]["content"]
    good, bad = quoted(case.good), quoted(case.bad)  # every answer line behind "| "
    assert prompt.index(case.task) < prompt.index("Answer A:\n" + good) < prompt.index("Answer B:\n" + bad)
    assert backward[1]["content"].index("Answer A:\n" + bad) < backward[1]["content"].index("Answer B:\n" + good)
    assert reply_json({"better": "B", "reason": "x"}).startswith(PAIRWISE_PREFIX + "B")


def test_a_pairwise_call_is_asked_in_both_orders_and_scores_the_named_answer():
    tasks = load_tasks(JudgementTasks(type="judgements", size=30, calls=["pairwise"]))
    by_case = {}
    for task in tasks:
        by_case.setdefault(task.entry["case_task"], {})[task.entry["order"]] = task
    assert len(tasks) == 60 and all(set(orders) == {0, 1} for orders in by_case.values())
    assert Counter(t.entry["label"] for t in tasks) == {"A": 30, "B": 30}  # a position bias earns half
    verifier = JudgementVerifier()
    for orders in by_case.values():
        first, second = orders[0], orders[1]
        a_first = first.messages[-1].content.split("Answer B:")[0]
        b_second = second.messages[-1].content.split("Answer B:")[1].split("\n\nTool results (")[0]
        assert a_first.split("Answer A:\n")[1].strip() == b_second.strip()  # the same response, moved
        for task in (first, second):
            other = "B" if task.entry["label"] == "A" else "A"
            assert verifier.score_one(reply(task, task.answer)).score == 1.0
            wrong = verifier.score_one(reply(task, json.dumps({"better": other, "reason": "x"})))
            assert wrong.ok and wrong.score == 0.0 and other in wrong.reason
            for bad in ("A", '{"better": "both"}', '{"choice": "A"}', '["A"]'):
                assert verifier.score_one(reply(task, bad)).score == 0.0, bad


@pytest.mark.parametrize(
    ("calls", "rl_calls"),
    [
        (["rubric", "verdict"], ["verdict"]),
        (["rubric", "pairwise"], ["pairwise"]),
        (["verdict", "pairwise"], ["verdict", "pairwise"]),
        (["rubric"], ["verdict"]),
    ],
)
def test_the_judge_stages_rl_phase_trains_the_decision_calls_it_was_given(calls, rl_calls):
    stage = {
        "name": "judge",
        "type": "judge",
        "steps": 1,
        "lr": 1e-4,
        "data": {"type": "judgements", "size": 10, "calls": calls},
        "rl": {"steps": 2},
    }
    config = PipelineConfig.model_validate({"name": "p", "model": {"name": "tiny"}, "stages": [stage]})
    rl = config.stages[0].rl_stage()
    assert rl.tasks.calls == rl_calls and rl.tasks.seed == config.stages[0].data.seed + 1
