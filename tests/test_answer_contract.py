"""The final-answer contract (docs/rewards.md), by class: each attack class of issue 55 over
several values and wordings scores 0 with a reason that names its class or word, in every
answer verifier (reasoning_gym, math, user); an honest control of each class scores 1; and no
response with 100,000 unclosed delimiters stalls the reading of its answer."""

import time

import pytest

from posttrain.rewards.base import score_sync
from posttrain.rewards.math_verifier import MathVerifier, judge
from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
from posttrain.rewards.user import UserReward
from posttrain.types import Completion, Message, Sample, Task


def three_verifiers(gold: str, text: str, question: str):
    """(reasoning_gym, math, user) results for `text` answering a task whose answer is `gold`."""
    messages = (Message("user", question),)
    entry = {"question": question, "answer": gold, "metadata": {}}
    tasks = [
        (ReasoningGymVerifier(), Task("r", "basic_arithmetic", messages, answer=gold, entry=entry)),
        (MathVerifier(), Task("m", "math", messages, answer=gold, verifier="math")),
        (UserReward(None), Task("u", "user", messages, answer=gold, entry={"answer": gold}, verifier="user")),
    ]
    sample = lambda t: Sample(t, 0, (1,), Completion((5,), (-0.1,), text, "stop"))  # noqa: E731
    return [score_sync(verifier, [sample(task)])[0] for verifier, task in tasks]


VALUES = [60, 7, 1250]


def assert_refused(gold: str, text: str, *needles: str, question: str = "Compute the value."):
    results = three_verifiers(gold, text, question=question)
    assert [r.score for r in results] == [0.0, 0.0, 0.0], (gold, text, [r.reason for r in results])
    assert all(r.ok for r in results)
    reason = results[1].reason
    assert any(n.lower() in reason.lower() for n in needles), (text, reason)


def assert_credited(gold: str, text: str, question: str = "Compute the value."):
    results = three_verifiers(gold, text, question=question)
    assert [r.score for r in results] == [1.0, 1.0, 1.0], (gold, text, [r.reason for r in results])


NEGATION = [
    "The answer cannot be {v}.",
    "anything but {v}",
    "The answer is not {v}.",
    "<answer>not {v}</answer>",
    "\\boxed{{\\text{{anything but }} {v}}}",
    "It isn't {v}.",
    "The answer is any number except {v}.",
    "The result is never {v}.",
]


@pytest.mark.parametrize("template", NEGATION)
@pytest.mark.parametrize("v", VALUES)
def test_negation_in_words_scores_0(template, v):
    assert_refused(str(v), template.format(v=v), "negat", "hedged", "'not'", "'anything'", "'except'", "'never'")


# every negated auxiliary, with a straight, a curly or no apostrophe: the class, not a list of
# the contractions seen
AUXILIARIES = "do does did is are was were has have had ca could sha should wo would must might need ai".split()


@pytest.mark.parametrize("auxiliary", AUXILIARIES)
@pytest.mark.parametrize("apostrophe", ["'", "’", ""])
def test_a_negated_auxiliary_before_the_answer_scores_0(auxiliary, apostrophe):
    text = f"The answer {auxiliary}n{apostrophe}t be 60."
    assert_refused("60", text, "negat", "hedged")


DOUBT = [
    "I doubt it is {v}.",
    "It is doubtful that the answer is {v}.",
    "It seems to be {v}.",
    "The answer used to be {v}.",
    "The answer was going to be {v}.",
    "The answer is unclear, {v} at best.",
    "Presumably the answer is {v}.",
    "{v}, or so I doubt.",
]


@pytest.mark.parametrize("template", DOUBT)
@pytest.mark.parametrize("v", VALUES)
def test_doubt_and_a_value_it_no_longer_is_score_0(template, v):
    assert_refused(str(v), template.format(v=v), "hedged", "doubt", "'or'", "unclear", "no longer", "going to")


RELATION = [
    "at least {v}",
    "The answer is no less than {v}.",
    "<answer>over {v}</answer>",
    "\\boxed{{\\text{{at most }} {v}}}",
    "The answer is more than {v}.",
    "The value is greater than {v}.",
    "It is under {v}.",
    "The answer is at least \\boxed{{{v}}}.",
]


@pytest.mark.parametrize("template", RELATION)
@pytest.mark.parametrize("v", VALUES)
def test_relations_in_words_score_0(template, v):
    assert_refused(str(v), template.format(v=v), "relation", "'least'", "'no'", "'at'")


OPERATION = [
    ("{v}", "half of {w}", lambda v: 2 * v),
    ("{v}", "The answer is twice {w}.", lambda v: v // 2 if v % 2 == 0 else None),
    ("{v}", "the square root of {w}", lambda v: v * v),
    ("{v}", "<answer>{w} squared</answer>", lambda v: int(v**0.5) if int(v**0.5) ** 2 == v else None),
    ("{v}", "\\boxed{{{w} \\text{{ dozen}}}}", lambda v: v // 12 if v % 12 == 0 else None),
    ("{v}", "{w} factorial", lambda v: 5 if v == 120 else None),
    ("{v}", "The answer is double {w}.", lambda v: v // 2 if v % 2 == 0 else None),
    ("{v}", "<answer>{w} times 2</answer>", lambda v: v // 2 if v % 2 == 0 else None),
]


@pytest.mark.parametrize("gold, template, operand", OPERATION)
@pytest.mark.parametrize("v", [60, 120, 144, 3600])
def test_operations_in_words_are_not_the_value_they_compute(gold, template, operand, v):
    w = operand(v)
    if w is None:
        pytest.skip("no integer operand for this value")
    assert_refused(gold.format(v=v), template.format(w=w), "operation", "not a final value", "'the'")


VALUE_CHANGING = [
    ("60", "60 thousandths"),
    ("60", "60 below zero"),
    ("60", "a loss of $60"),
    ("250", "The answer is 250 below zero."),
    ("7", "7 hundredths"),
    ("1250", "<answer>a deficit of 1250</answer>"),
    ("-60", "60 above zero"),
    ("3", "three quarters"),
]


@pytest.mark.parametrize("gold, text", VALUE_CHANGING)
def test_words_that_change_the_value_are_read_into_it(gold, text):
    assert_refused(gold, text, "wrong", "among other text")


RETRACTION = [
    "\\boxed{{{v}}} Actually it is {w}.",
    "\\boxed{{{v}}}\n\nWait, that's wrong.",
    "<answer>{v}</answer> No, {w}.",
    "\\boxed{{{v}}}. Hmm, or maybe {w}",
    "The final answer is {v}. It is {w}.",
    "\\boxed{{{v}}}\n{w}",
    "\\boxed{{{v}}}, or more",
    "\\boxed{{{v}}} (I made a mistake)",
    "The answer is {v}. Nope.",
    "The answer is {v}. Just kidding.",
    "The answer is {v}. Psych!",
    "<answer>{v}</answer> jk",
]


@pytest.mark.parametrize("template", RETRACTION)
@pytest.mark.parametrize("v", VALUES)
def test_anything_after_the_slot_that_takes_it_back_or_states_another_value_scores_0(template, v):
    assert_refused(str(v), template.format(v=v, w=v + 1), "hedged")


TINY = [("0.0000001", "-0.0000001"), ("1e-9", "2e-9"), ("0.00000003", "0.00000004"), ("-0.0000002", "0.0000002")]


@pytest.mark.parametrize("gold, answer", TINY)
def test_tiny_values_keep_their_sign_and_digits(gold, answer):
    assert judge(gold, f"\\boxed{{{answer}}}").score == 0.0
    assert judge(gold, f"\\boxed{{{gold}}}").score == 1.0


@pytest.mark.parametrize("gold, text", [("1e20", "\\boxed{1.00001e20}"), ("123456789", "\\boxed{123456790}")])
def test_large_values_compare_by_significant_digits(gold, text):
    assert judge(gold, text).score == 0.0


DIGITS = [("0.0955856795273", "0.09558568908586795273"), ("3.14159", "3.1415926"), ("2.5", "2.5000001")]


@pytest.mark.parametrize("gold, answer", DIGITS)
def test_two_written_numbers_compare_digit_for_digit(gold, answer):
    """A perturbation below any relative tolerance (1e-7 of the value) is another number where
    both are written out; the same value in another spelling is credited."""
    assert judge(gold, f"\\boxed{{{answer}}}").score == 0.0
    assert judge(gold, f"\\boxed{{{gold}0}}").score == 1.0  # a trailing zero is the same value
    assert judge(gold, f"The answer is {gold}.").score == 1.0


OTHER_BASE = [("60", "0x3C"), ("0", "\\boxed{0x3C}"), ("60", "<answer>0b111100</answer>"), ("7", "0o7")]


@pytest.mark.parametrize("gold, text", OTHER_BASE)
def test_numerals_in_another_base_are_not_read_as_base_ten(gold, text):
    assert_refused(gold, text, "another base")


UNKNOWN_WORDS = [
    ("60", "60 apples"),  # a noun the question does not count
    ("60", "\\boxed{60 \\text{ widgets}}"),
    ("7", "Jane started 7 hours ago"),
    ("1250", "<answer>roughly speaking 1250 units of something</answer>"),
]


@pytest.mark.parametrize("gold, text", UNKNOWN_WORDS)
def test_a_word_the_grammar_does_not_know_is_named_not_stripped(gold, text):
    assert_refused(gold, text, "answer grammar")


UNIT_MISMATCH = [
    ("60", "The answer is 60 cents.", "How many dollars does it cost?"),
    ("60", "60 seconds", "How many minutes does it take?"),
    ("7", "\\boxed{7 \\text{ grams}}", "How many kilograms?"),
]


@pytest.mark.parametrize("gold, text, question", UNIT_MISMATCH)
def test_a_unit_other_than_the_task_s_of_the_same_dimension_is_refused(gold, text, question):
    assert_refused(gold, text, "is not the task's", question=question)


HONEST = [
    ("-60", "60 below zero", "What is the temperature?"),
    ("-60", "The temperature is 60 below zero.", "What is the temperature?"),
    ("-7", "seven below zero", "Compute the value."),
    ("\\{1, 2\\}", "x = 1 or x = 2", "Solve x^2 - 3x + 2 = 0."),
    ("1, 2", "x = 1 and x = 2", "Solve x^2 - 3x + 2 = 0."),
    ("3/2", "1 1/2", "Compute the value."),
    ("7/2", "\\boxed{3\\frac{1}{2}}", "Compute the value."),
    ("C", "The correct option is C.", "Which option? (A) 1 (B) 2 (C) 3"),
    ("60", "The answer is sixty.", "Compute the value."),
    ("1250", "one thousand two hundred fifty", "Compute the value."),
    ("0.06", "60 thousandths", "Compute the value."),
    ("0.75", "three quarters", "Compute the value."),
    ("-60", "a loss of $60", "What is the profit?"),
    ("60", "\\boxed{60} km/h", "How fast, in km/h?"),
    ("60", "The speed is 60 km/h.", "Compute the speed."),
    ("12", "<answer>12 legs</answer>", "How many legs do 3 chickens and 1.5 cows have?"),
    ("60", "\\boxed{60}. Check: 2 \\cdot 30 = 60.", "Compute the value."),
    ("60", "\\boxed{60} I hope it is correct.", "Compute the value."),
    ("\\frac{\\sqrt{3}}{2}", "\\boxed{\\frac{\\sqrt{3}}{2}}", "Compute sin(pi/3)."),
    ("(1, 2]", "The interval is $(1, 2]$.", "Solve."),
    ("\\pi", "The answer is $\\pi$.", "Compute."),
    ("0.0000001", "\\boxed{1e-7}", "Compute."),
    ("60", "approximately \\boxed{60} dollars", "How much does it cost?"),
    ("19", "The maximum number of points that could be in the domain is 19.", "Compute."),
    # a connective or a plain verb before the value states nothing; GSM8K's `####` marks the answer
    ("60", "So x = 60.", "Compute x."),
    ("60", "So, 60.", "Compute the value."),
    ("60", "So we get 60.", "Compute the value."),
    ("60", "In total, 60.", "Compute the value."),
    ("60", "That makes 60.", "Compute the value."),
    ("60", "She has 60 left.\n#### 60", "Compute the value."),
    ("60", "The store doesn't sell 61; it has 60.", "Compute the value."),
]


@pytest.mark.parametrize("gold, text, question", HONEST)
def test_honest_forms_of_each_class_score_1(gold, text, question):
    assert_credited(gold, text, question=question)


@pytest.mark.parametrize(
    "opener", ["\\boxed{", "\\[", "$", "(", "<answer>", "\\(", "$$", "{", "Answer: ", " ", ", ", "is the answer "]
)
def test_unclosed_delimiters_are_read_in_linear_time(opener):
    start = time.monotonic()
    verdict = judge("60", "$1$ a" + opener * 100_000 + "b")
    assert verdict.score == 0.0
    assert time.monotonic() - start < 10, opener  # quadratic: minutes
