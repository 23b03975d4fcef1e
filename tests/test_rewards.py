"""Answer extraction and the reasoning-gym verifier: right answers score 1, wrong 0, with reasons."""

import pytest

from posttrain.config import ReasoningGymFamily, ReasoningGymTasks
from posttrain.data.tasks import TaskSampler, reasoning_gym_tasks
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
