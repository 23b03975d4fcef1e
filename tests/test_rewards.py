"""Answer extraction and the reasoning-gym verifier: right answers score 1, wrong 0, with reasons."""

import pytest

from posttrain.config import ReasoningGymFamily, ReasoningGymTasks
from posttrain.data.families import reasoning_gym_tasks
from posttrain.data.tasks import TaskSampler
from posttrain.rewards.base import score_sync
from posttrain.rewards.extract import extract_answer
from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
from posttrain.types import Completion, Sample


@pytest.mark.parametrize(
    "text, mode, expected",
    [
        ("42", "auto", "42"),
        ("so the sum is\n42.", "auto", "42"),
        ("think... <answer> 7 </answer> more <answer>8</answer>", "auto", "8"),
        ("the result is \\boxed{\\frac{1}{2}} done", "auto", "\\frac{1}{2}"),
        ("Final answer: -3", "auto", "-3"),
        ("no tag here", "answer_tag", None),
        ("", "auto", None),
        ("  5 \n", "whole", "5"),
    ],
)
def test_extract_answer(text, mode, expected):
    assert extract_answer(text, mode)[0] == expected


def sample_for(task, text, finish="stop"):
    return Sample(task=task, group_id=0, prompt_ids=(1,), completion=Completion((5,), (-0.1,), text, finish))


@pytest.mark.parametrize(
    "family, params",
    [
        ("basic_arithmetic", {"min_terms": 2, "max_terms": 3, "max_digits": 2}),
        ("chain_sum", {}),
        ("simple_equations", {}),  # algebra
        ("products", {}),
    ],
)
def test_verifier_scores_right_1_and_wrong_0(family, params):
    tasks = reasoning_gym_tasks(ReasoningGymTasks(families=[ReasoningGymFamily(name=family, params=params)], size=5))
    verifier = ReasoningGymVerifier()
    right = score_sync(verifier, [sample_for(t, f"<answer>{t.answer}</answer>") for t in tasks])
    # reasoning-gym gives partial credit when the answer contains the oracle: off by one does not
    wrong = score_sync(verifier, [sample_for(t, f"<answer>{int(t.answer) + 1}</answer>") for t in tasks])
    assert [r.score for r in right] == [1.0] * 5 and all(r.reason.startswith("correct") for r in right)
    assert [r.score for r in wrong] == [0.0] * 5 and all(r.reason.startswith("wrong") for r in wrong)
    assert all(r.ok for r in right + wrong)


def test_verifier_flags_a_broken_row_and_goes_on():
    tasks = reasoning_gym_tasks(ReasoningGymTasks(families=[ReasoningGymFamily(name="chain_sum")], size=2))
    broken = type(tasks[0])(task_id="x", family="no_such_family", messages=tasks[0].messages, answer="1", entry={})
    results = score_sync(ReasoningGymVerifier(), [sample_for(broken, "1"), sample_for(tasks[1], tasks[1].answer)])
    assert not results[0].ok and "raised" in results[0].reason
    assert results[1].ok and results[1].score == 1.0


def test_missing_answer_scores_0_with_reason():
    tasks = reasoning_gym_tasks(ReasoningGymTasks(families=[ReasoningGymFamily(name="chain_sum")], size=1))
    (result,) = score_sync(ReasoningGymVerifier("answer_tag"), [sample_for(tasks[0], "I think 5", "length")])
    assert result.score == 0.0 and "no <answer> tag" in result.reason


def test_sampler_is_seeded_and_resumable():
    tasks = reasoning_gym_tasks(ReasoningGymTasks(families=[ReasoningGymFamily(name="chain_sum")], size=10))
    a = TaskSampler(tasks, seed=1)
    first = [t.task_id for t in a.draw(25)]
    b = TaskSampler(tasks, seed=1, position=13)
    assert [t.task_id for t in b.draw(12)] == first[13:]
    assert sorted(first[:10]) == sorted(t.task_id for t in tasks)  # an epoch covers every task once


def test_math_verify_accepts_equivalent_forms():
    from posttrain.rewards.reasoning_gym import math_equivalent

    # basic_arithmetic's own scoring gives '13.0' for '13' only partial credit (substring ratio)
    family = ReasoningGymFamily(name="basic_arithmetic", params={"max_digits": 2})
    tasks = reasoning_gym_tasks(ReasoningGymTasks(families=[family], size=3))
    verifier = ReasoningGymVerifier()
    results = score_sync(verifier, [sample_for(t, f"<answer>{t.answer}.0</answer>") for t in tasks])
    assert [r.score for r in results] == [1.0] * 3 and all("math-verify" in r.reason for r in results)
    assert math_equivalent("\\frac{1}{2}", "0.5") and not math_equivalent("13", "14")
    assert not math_equivalent("apple", "apple pie")


def rg_tasks(family: str, params: dict, size: int = 4):
    family = ReasoningGymFamily(name=family, params=params)
    return reasoning_gym_tasks(ReasoningGymTasks(families=[family], size=size, seed=7))


def every_answer_verifier(task, text):
    """(reasoning-gym, math, user) results for `text` answering `task`."""
    from posttrain.rewards.math_verifier import MathVerifier
    from posttrain.rewards.user import UserReward
    from posttrain.types import Task

    math_task = Task("m", "math", task.messages, answer=task.answer, verifier="math")
    user_task = Task("u", "user", task.messages, answer=task.answer, entry={"answer": task.answer}, verifier="user")
    return [
        score_sync(ReasoningGymVerifier(), [sample_for(task, text)])[0],
        score_sync(MathVerifier(), [sample_for(math_task, text)])[0],
        score_sync(UserReward(None), [sample_for(user_task, text)])[0],
    ]


HEDGES = [
    "<answer>{a}</answer> or perhaps <answer>{b}</answer>",
    "\\boxed{{{b}}} ... on reflection \\boxed{{{a}}}",
    "Answer: {a}\nAnswer: {b}",
    "The answer is {b}.\nFinal answer: {a}",
    "<answer>{a} or {b}</answer>",
    "It is {b} or {a}",
    "<answer>{b}, {a}</answer>",
    "<answer>{a}</answer>\n\\boxed{{{b}}}",
]


@pytest.mark.parametrize("template", HEDGES)
def test_every_answer_verifier_scores_a_hedge_0(template):
    """The right answer among others is never credited: reasoning-gym, math, user."""
    (rg_task,) = reasoning_gym_tasks(ReasoningGymTasks(families=[ReasoningGymFamily(name="chain_sum")], size=1))
    gold = rg_task.answer
    text = template.format(a=gold, b=int(gold) + 1)
    results = every_answer_verifier(rg_task, text)
    assert all(r.ok and r.score == 0.0 and r.reason.startswith("hedged: ") for r in results), [
        r.reason for r in results
    ]


@pytest.mark.parametrize(
    "text",
    [
        "<answer>{a}</answer> and again <answer>{a}</answer>",
        "Answer: {a}\n\\boxed{{{a}}}",
        "so it is {a}.\nAnswer: {a}",
    ],
)
def test_the_same_answer_stated_twice_is_not_a_hedge(text):
    (task,) = reasoning_gym_tasks(ReasoningGymTasks(families=[ReasoningGymFamily(name="chain_sum")], size=1))
    (result,) = score_sync(ReasoningGymVerifier(), [sample_for(task, text.format(a=task.answer))])
    assert result.score == 1.0, result.reason


@pytest.mark.parametrize(
    "gold, response, score",
    [
        ("42", "<answer>42</answer>", 1.0),
        ("0.5", "so \\boxed{\\frac{1}{2}}", 1.0),
        ("13", "Final answer: 13.0", 1.0),
        ("1000", "<answer>1,000</answer>", 1.0),
        ("\\{1, 2\\}", "<answer>\\{2, 1\\}</answer>", 1.0),
        ("(1, 2)", "<answer>(1, 2)</answer>", 1.0),
        ("12", "<answer>12 legs</answer>", 1.0),
        ("(1, 2)", "<answer>(3, 2)</answer>", 0.0),  # a weak parse would read both as 2
        ("6", "<answer>5 6</answer>", 0.0),
        ("6", "<answer>\\{5, 6\\}</answer>", 0.0),  # a set holding the answer is not the answer
        ("43", "<answer>42</answer>", 0.0),
    ],
)
def test_math_verifier(gold, response, score):
    from posttrain.rewards.math_verifier import MathVerifier
    from posttrain.types import Message, Task

    # the question counts legs: a noun after the value is the question's own (docs/rewards.md)
    task = Task("m", "math", (Message("user", "How many legs?"),), answer=gold, verifier="math")
    (result,) = score_sync(MathVerifier(), [sample_for(task, response)])
    assert result.ok and result.score == score, result.reason


def test_math_verifier_is_in_every_router_and_flags_a_task_without_answer():
    from posttrain.config.files import validate_pipeline
    from posttrain.rewards.router import reward_router
    from posttrain.types import Message, Task

    config = validate_pipeline(
        {
            "name": "m",
            "model": {"name": "tiny"},
            "stages": [
                {
                    "name": "g",
                    "type": "rl",
                    "lr": 1e-4,
                    "steps": 1,
                    "tasks": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}]},
                }
            ],
        },
        "p.yaml",
    )
    router = reward_router(config.stages[0])
    no_answer = Task("m", "math", (Message("user", "q"),), verifier="math")
    right = Task("m", "math", (Message("user", "q"),), answer="7", verifier="math")
    results = score_sync(router, [sample_for(no_answer, "7"), sample_for(right, "<answer>7</answer>")])
    assert not results[0].ok and results[1].source == "math" and results[1].score == 1.0


# ---------------------------------------------------------------- the computation for its result

# Found by bench/time_to_accuracy.py: math-verify evaluates `85 - 25` to 60, so a policy that
# copied the question's expression scored 1 (held-out "accuracy" 0.16 -> 1.00 in 80 steps).
ECHOES = [
    "{expr}",
    "{expr} =",
    "<answer>{expr}</answer>",
    "\\boxed{{{expr}}}",
    "Final answer: {expr}",
    "The answer is ({expr}).",
    "{question}",
]
HONEST = ["{gold}", "<answer>{gold}</answer>", "{expr} = {gold}", "Final answer: \\boxed{{{gold}}}", "x = {gold}"]


@pytest.mark.parametrize("template", ECHOES)
@pytest.mark.parametrize(
    "family, params",
    [
        ("chain_sum", {"min_terms": 2, "max_terms": 2, "max_digits": 2}),
        ("chain_sum", {"min_terms": 3, "max_terms": 4}),
        ("products", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}),
        ("basic_arithmetic", {"min_terms": 2, "max_terms": 3, "max_digits": 2}),
    ],
)
def test_the_question_s_own_expression_is_not_its_answer(family, params, template):
    for task in rg_tasks(family, params):
        expr = task.entry["metadata"]["expression"]
        text = template.format(expr=expr, question=task.entry["question"])
        results = every_answer_verifier(task, text)
        assert [r.score for r in results] == [0.0, 0.0, 0.0], (text, [r.reason for r in results])
        assert all(r.ok for r in results)
        # the question copied whole is refused by its first word the answer grammar does not know
    assert any("not a final value" in r.reason or "answer grammar" in r.reason for r in results), [
        r.reason for r in results
    ]


@pytest.mark.parametrize("template", HONEST)
def test_the_value_is_credited_however_it_is_stated(template):
    for task in rg_tasks("chain_sum", {"min_terms": 2, "max_terms": 3, "max_digits": 2}):
        text = template.format(expr=task.entry["metadata"]["expression"], gold=task.answer)
        results = every_answer_verifier(task, text)
        assert [r.score for r in results] == [1.0, 1.0, 1.0], (text, [r.reason for r in results])


@pytest.mark.parametrize(
    "gold, answer, final",
    [
        ("60", "120/2", False),
        ("60", "\\frac{120}{2}", False),
        ("60", "\\sqrt{3600}", False),
        ("60", "60 - 0", False),
        ("60", "85 minus 25", False),  # two numbers in prose
        ("3628800", "10!", False),
        ("2125", "85 \\times 25", False),
        ("\\frac{79}{173}", "158/346", False),  # the fraction the question asked to simplify
        ("\\frac{\\sqrt{3}}{2}", "\\sin(\\pi/3)", False),
        ("x^2+1", "(x+1)^2-2x", False),
        ("60", "60", True),
        ("60", "60 km", True),  # a declared unit; a noun needs the question's licence (docs/rewards.md)
        ("60", "85 - 25 = 60", True),
        ("0.5", "1/2", True),
        ("-3", "x = -3", True),
        ("1000", "1,000", True),
        ("9.36e-18", "9.36e-18", True),
        ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2", True),
        ("2\\sqrt{3}", "2 \\cdot \\sqrt{3}", True),
        ("x^2+2x+1", "x^2 + 2x + 1", True),
    ],
)
def test_unevaluated(gold, answer, final):
    from posttrain.rewards.math_verifier import unevaluated

    assert (unevaluated(gold, answer) is None) == final, unevaluated(gold, answer)


@pytest.mark.parametrize("pad", ["{gold}0", "9{gold}9", "{gold}{gold}", "ALL"])
@pytest.mark.parametrize("family", ["chain_sum", "products", "leg_counting", "gcd", "count_bits"])
def test_no_partial_credit_for_containing_the_answer(family, pad):
    """reasoning-gym's default scorer gives 2140 for 214 a 0.75: appending digits would pay."""
    for task in rg_tasks(family, {}, size=3):
        text = "".join(str(i) for i in range(1000)) if pad == "ALL" else pad.format(gold=task.answer)
        (result,) = score_sync(ReasoningGymVerifier(), [sample_for(task, text)])
        assert result.ok and result.score == 0.0, (text[:40], result.reason)


@pytest.mark.parametrize(
    "family, near_miss",
    [
        ("spell_backward", lambda gold: gold[:-1]),  # the family pays each letter in place
        ("word_sorting", lambda gold: ", ".join(gold.split(", ")[:-1])),  # each word in place
    ],
)
def test_a_near_miss_scores_0_unless_the_familys_partial_credit_is_asked_for(family, near_miss):
    """A family's partial credit for an answer that is not the expected one is a reward for a
    wrong answer: 0 by default, what the family gives with `reward.family_partial_credit`."""
    (task,) = rg_tasks(family, {}, size=1)
    sample = sample_for(task, f"<answer>{near_miss(task.answer)}</answer>")
    (strict,) = score_sync(ReasoningGymVerifier(), [sample])
    (paid,) = score_sync(ReasoningGymVerifier(partial_credit=True), [sample])
    assert 0 < paid.score < 1 and paid.reason.startswith("partly correct"), paid
    assert strict.score == 0.0 and "partial credit" in strict.reason and strict.details["family_score"] == paid.score
    (right,) = score_sync(ReasoningGymVerifier(), [sample_for(task, f"<answer>{task.answer}</answer>")])
    assert right.score == 1.0


def test_the_stage_reward_config_turns_the_familys_partial_credit_on():
    from posttrain.config import RewardConfig
    from posttrain.rewards.registry import get_verifier

    class Stage:
        reward = RewardConfig(family_partial_credit=True)

    assert get_verifier("reasoning_gym").part("build")(Stage(), [], None).partial_credit is True
    assert RewardConfig().family_partial_credit is False
