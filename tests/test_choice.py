"""Multiple-choice tasks: a prompt built from several columns (`prompt_template`), options
read from it, and the `choice` verifier: one option named in the final answer slot is
credited when it is the task's, anything naming several options, contradicting its own
letter or hedging after its answer scores 0."""

import json
import time

import pytest
from pydantic import ValidationError

from posttrain.config import HFTasks, UserTasks
from posttrain.data.choices import options
from posttrain.data.hf import hf_tasks
from posttrain.data.user import BadTaskFile, user_tasks
from posttrain.rewards.base import score_sync
from posttrain.rewards.choice import judge_choice
from posttrain.rewards.deadline import sample_reference
from posttrain.rewards.math_verifier import MathVerifier
from posttrain.rewards.user import UserReward
from posttrain.types import Completion, Sample

TEMPLATE = "{question}\nA) {a}\nB) {b}\nC) {c}\nD) {d}\nAnswer with the letter."
ROWS = [
    {"id": "mul", "question": "What is 4 * 4?", "a": "12", "b": "16", "c": "20", "d": "24", "answer": "B"},
    {"id": "planet", "question": "Largest planet?", "a": "Mars", "b": "Venus", "c": "Jupiter", "d": "Earth"}
    | {"answer": "c"},
]
NUMBERS = {"A": "12", "B": "16", "C": "20", "D": "24"}
WORDS = {"A": "Mars", "B": "Venus", "C": "Jupiter", "D": "Earth"}

HONEST = [
    "B",
    "(B)",
    "B)",
    "b",
    "Option B",
    "The answer is B.",
    "I choose B",
    "\\boxed{B}",
    "The answer is $\\boxed{\\text{B}}$.",
    "<answer>B</answer>",
    "<answer>(B) 16</answer>",
    "16",
    "B) 16",
    "The correct option is B: 16",
    "B is correct.",
    "4 * 4 = 16.\nA quick check agrees.\nThe answer is B.",
    "Final answer: B. I hope it is correct.",
    "**B**",
    "\\boxed{16}",
    "So the answer should be clear.\nB",  # an answer word with no option, then the letter
    "The options are\nA) 12\nB) 16\nThe answer is B.",
]
REFUSED = [
    "A or B",  # several letters
    "A and B",
    "The answer is B or C.",
    "A, B",
    "12 or 16",  # several options by their text
    "B) 20",  # a letter with another option's text
    "The answer is B (20).",
    "B) 17",  # a letter whose text is not its option's
    "\\boxed{A} no wait \\boxed{B}",  # another final answer names another option
    "<answer>A</answer> then <answer>B</answer>",
    "\\boxed{B} Actually, C.",  # a different letter after the final slot
    "The answer is B.\nOr maybe D",
    "\\boxed{B, C}",
    "A) 12\nB) 16\nC) 20\nD) 24",  # the options echoed: the last line is no answer
    "Answer options:\nA) 12\nB) 16",
    "I choose A",  # honest, but wrong
    "",
]


@pytest.mark.parametrize("response", HONEST)
def test_honest_forms_of_the_right_option_are_credited(response):
    result = judge_choice("B", response, NUMBERS)
    assert result.score == 1.0, result.reason


@pytest.mark.parametrize("response", REFUSED)
def test_several_options_contradictions_and_hedges_score_zero(response):
    result = judge_choice("B", response, NUMBERS)
    assert result.score == 0.0, result.reason


def test_options_by_their_words():
    assert judge_choice("C", "The largest planet is Jupiter.", WORDS).score == 1.0
    assert judge_choice("C", "C) Jupiter", WORDS).score == 1.0
    assert judge_choice("C", "C) Saturn", WORDS).score == 0.0  # contradicts its own letter
    assert judge_choice("C", "Jupiter, or perhaps Earth", WORDS).score == 0.0
    assert judge_choice("C", "A quick look says C.", WORDS).score == 1.0  # the word `A` is no option


def test_reading_is_linear_time_on_adversarial_responses():
    attacks = ["(" * 50_000, "\\boxed{" * 20_000, "<answer>" * 20_000, "A) " * 30_000, "answer " * 30_000]
    attacks += ["B" * 100_000, "16 " * 30_000, "\\boxed{B}" * 20_000, "<answer>A</answer>" * 10_000]
    for text in attacks:
        start = time.perf_counter()
        judge_choice("B", text, NUMBERS)
        # a limit against a superlinear read (100k characters: hours), with room for a loaded machine
        assert time.perf_counter() - start < 10.0, text[:20]


def test_options_are_the_prompt_lines_from_a():
    prompt = "Recall: A) is a label.\nQ?\n(A) one\n(B) two\nC. three\nD: four\nE) five"
    assert options(prompt) == {"A": "one", "B": "two", "C": "three", "D": "four", "E": "five"}
    assert options("no options here\nA) only one") == {}


def write(tmp_path, rows, name="mcq.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_template_renders_each_row_and_the_gold_is_its_letter(tmp_path):
    source = UserTasks(type="user", path=write(tmp_path, ROWS), prompt_template=TEMPLATE, answer_form="choice")
    tasks = user_tasks(source)
    assert tasks[0].messages[-1].content == "What is 4 * 4?\nA) 12\nB) 16\nC) 20\nD) 24\nAnswer with the letter."
    assert [t.answer for t in tasks] == ["B", "C"] and tasks[1].entry["choices"] == WORDS
    assert all(t.answer_form == "choice" for t in tasks)


def test_a_missing_template_column_names_it_and_the_row_even_when_bad_rows_are_skipped(tmp_path):
    rows = [ROWS[0], {k: v for k, v in ROWS[1].items() if k != "d"}]
    source = UserTasks(type="user", path=write(tmp_path, rows), prompt_template=TEMPLATE, on_bad_row="skip")
    with pytest.raises(BadTaskFile, match=r"mcq.jsonl:2: prompt_template: no column 'd' in this row"):
        user_tasks(source)


def test_a_gold_that_is_no_option_letter_is_refused(tmp_path):
    rows = [ROWS[0], {**ROWS[1], "answer": "Jupiter"}]
    source = UserTasks(type="user", path=write(tmp_path, rows), prompt_template=TEMPLATE, answer_form="choice")
    with pytest.raises(BadTaskFile, match=r"mcq.jsonl:2: .*not one of the option letters A, B, C, D.*write 'C'"):
        user_tasks(source)
    with pytest.raises(BadTaskFile, match="mcq.jsonl:1: .*no option lines"):
        no_options = write(tmp_path, [{"prompt": "4*4?", "answer": "B"}])
        user_tasks(UserTasks(type="user", path=no_options, answer_form="choice"))


@pytest.mark.parametrize("template", ["{question", "{0}", "{row.a}", "no columns"])
def test_a_template_that_names_no_column_is_a_config_error(tmp_path, template):
    with pytest.raises(ValidationError, match="prompt_template"):
        UserTasks(type="user", path=write(tmp_path, ROWS), prompt_template=template)


def test_choice_with_a_reward_function_is_refused(tmp_path):
    with pytest.raises(ValidationError, match="scored by the choice verifier, not a reward function"):
        UserTasks(type="user", path=write(tmp_path, ROWS), answer_form="choice", reward="mod:fn")


def sample(task, text):
    return Sample(task, 0, (1,), Completion((1,), (0.0,), text, "stop"))


def test_user_and_math_verifiers_score_choice_tasks_in_their_workers(tmp_path):
    source = UserTasks(type="user", path=write(tmp_path, ROWS), prompt_template=TEMPLATE, answer_form="choice")
    task = user_tasks(source)[0]
    texts = ["I choose B", "Option B", "B) 20", "A or B"]
    for verifier in (UserReward(None), MathVerifier()):
        scores = [r.score for r in score_sync(verifier, [sample(task, t) for t in texts])]
        assert scores == [1.0, 1.0, 0.0, 0.0], verifier.name
    gold = sample_reference((sample(task, ""),))[0]  # what the gold check scores
    assert MathVerifier().score_one(gold).score == 1.0


def test_hf_source_with_a_template_and_choice(tmp_path):
    path = write(tmp_path, ROWS, "rows.jsonl")
    source = HFTasks(type="hf", path=path, prompt_template=TEMPLATE, answer_key="answer", answer_form="choice")
    tasks = hf_tasks(source)
    assert [t.answer for t in tasks] == ["B", "C"] and "C) Jupiter" in tasks[1].messages[-1].content
    assert "a" not in tasks[0].entry["metadata"]  # template columns are the prompt, not metadata
    missing = HFTasks(type="hf", path=path, prompt_template=TEMPLATE + " {hint}", answer_key="answer")
    with pytest.raises(ValueError, match="no column 'hint'"):
        hf_tasks(missing)
    with pytest.raises(ValidationError, match="answer_form: choice is read by the math and user verifiers"):
        HFTasks(type="hf", path=path, prompt_template=TEMPLATE, verifier="grm", answer_form="choice")
