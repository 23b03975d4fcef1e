"""The judge's tools (data/judge_tools.py): the calculator finds and evaluates the task's
arithmetic in its usual spellings and nothing else, the shape counts an answer's lines and
words, and on the judgement data the tools' lines tell the clean answer from the defective
one where a 135M judge could not compute it."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posttrain.data.judge_tools import calculations, evaluate, shape, tool_notes
from posttrain.data.judgements import cases


@pytest.mark.parametrize(
    "task, expected",
    [
        ("Compute 27 - 76.", ["27 - 76 = -49"]),
        ("How much is 78 * 14?", ["78 * 14 = 1092"]),
        ("What is 3 plus 4?", ["3 + 4 = 7"]),
        ("What is 12 times 7 minus 5?", ["12 * 7 - 5 = 79"]),
        ("What is (3 + 4) * 2?", ["(3 + 4) * 2 = 14"]),
        ("Work out 7 / 2 and 1/3.", ["7 / 2 = 3.5", "1 / 3 = 0.333333"]),
        ("What is 6 x 7? And 6×7?", ["6 * 7 = 42", "6 * 7 = 42"]),
        ("Multiply 3 by 4.", ["3 * 4 = 12"]),
        ("Subtract 8 from 20.", ["20 - 8 = 12"]),
        ("Give the sum of 4 and 9.", ["4 + 9 = 13"]),
        ("What is 2.5 divided by 0.5?", ["2.5 / 0.5 = 5"]),
        ("Is -5 + 3 negative?", ["-5 + 3 = -2"]),
        ("Read pages 10-20 before 2024-05-01.", []),  # a range and a date are not sums
        ("Compute 5 / 0.", []),  # no value
        ("Name 3 metals.", []),
        ("Add 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9.", []),  # past MAX_OPERANDS: not shown
    ],
)
def test_the_calculator_finds_the_tasks_arithmetic(task, expected):
    assert calculations(task) == expected


def test_evaluate_is_exact_and_refuses_anything_but_arithmetic():
    assert evaluate("0.1 + 0.2") == "0.3"
    assert evaluate("10 / 4") == "2.5"
    assert evaluate("__import__('os').system('x') + 1") is None
    assert evaluate("2 ** 100") is None
    assert evaluate("1234567890123456 * 2") is None  # over MAX_DIGITS


def test_shape_counts_lines_and_words_of_every_break():
    assert shape("zinc\nlead\n\n") == "2 lines, 2 words"
    assert shape("one\u2028two three") == "2 lines, 3 words"
    assert shape("") == "0 lines, 0 words"
    notes = tool_notes("Compute 2 + 2.", {"Answer A": "4", "Answer B": "5\n6"})
    assert notes.splitlines()[1:] == ["calculator: 2 + 2 = 4", "Answer A: 1 line, 1 word", "Answer B: 2 lines, 2 words"]


@pytest.mark.parametrize("part", ["train", "heldout"])
def test_the_tools_tell_the_clean_answer_in_arithmetic_and_count_cases(part):
    """Arithmetic: the calculator's value is the clean answer's number, not the defective
    one's. Counts: the clean answer has as many lines as the task asks for, the other not."""
    import re

    seen = {"arithmetic": 0, "count": 0}
    for case in cases(200, seed=5, part=part, kinds=("arithmetic", "count")):
        if case.kind == "arithmetic":
            (line,) = calculations(case.task)
            value = line.rsplit(" = ", 1)[1]
            numbers = lambda text: re.findall(r"-?\d+", text.rsplit("=", 1)[-1])  # noqa: E731
            assert value in numbers(case.good) and value not in numbers(case.bad), case
        else:
            asked = int(re.search(r"\d+", case.task).group(0))
            assert shape(case.good).startswith(f"{asked} line") and not shape(case.bad).startswith(f"{asked} line")
        seen[case.kind] += 1
    assert min(seen.values()) > 20


@pytest.mark.parametrize(
    "task, expected",
    [
        ("Write f(a, b). For example, f(7, 2) should return 5.", [("f(7, 2)", "5")]),
        ("Example: area(3, 4) -> 12", [("area(3, 4)", "12")]),
        ("It must pass: assert same(1, 1) == True", [("same(1, 1)", "True")]),
        ("Like this:\n\n>>> mean(2, 3)\n2.5\n", [("mean(2, 3)", "2.5")]),
        ("greet('Bo') returns 'hi Bo'. greet('') returns 'hi '", [("greet('Bo')", "'hi Bo'"), ("greet('')", "'hi '")]),
        ("f(1, 2) == 3 and g(1) == 2", [("f(1, 2)", "3")]),  # one function: the first named
        ("f(x, 2) == 4 and f(a=1) == 2", []),  # arguments that are not literals: nothing to run
        ("Compute 2 + 2.", []),
        ("Print(hello) returns nothing", []),
        ("stack.pop(0) returns 3", []),  # a method: no function to call
        (
            "So add(2, 3) = 5, add(1, 1) is 2 and add(0, 0) will return 0.",
            [("add(2, 3)", "5"), ("add(1, 1)", "2"), ("add(0, 0)", "0")],
        ),
        (
            "Tests:\nassert clip(5, 1) == 1, 'too big'\nassert clip(0, 1) == 0",
            [("clip(5, 1)", "1"), ("clip(0, 1)", "0")],
        ),
    ],
)
def test_examples_are_the_tasks_stated_calls(task, expected):
    from posttrain.data.judge_tools import examples

    assert [(e.call, e.expected) for e in examples(task)] == expected


def test_a_run_line_says_what_the_code_did_and_whether_it_is_the_stated_value():
    from posttrain.data.judge_tools import Example, Run, passes, run_line

    example = Example("f(7, 2)", "5")
    assert run_line("A", example, Run(value="5")) == "A run: f(7, 2) returns 5; the task says 5: pass"
    assert run_line("A", example, Run(value="14")).endswith("returns 14; the task says 5: fail")
    assert run_line("A", example, Run(error="raises ZeroDivisionError")).endswith(
        "ZeroDivisionError; the task says 5: fail"
    )
    assert passes(Run(value="5.0"), "5") and passes(Run(value="0.30000000000000004"), "0.3")
    assert not passes(Run(value="True"), "1") and not passes(Run(value="'5'"), "5")
    assert len(run_line("A", example, Run(value="'" + "x" * 500 + "'"))) < 120  # a long value is cut
    with pytest.raises(ValueError, match="1 runs for 2 examples"):
        tool_notes("f(1, 2) -> 3 and f(2, 2) -> 4", {"A": "x"}, {"A": [Run(value="3")]})


_PIECES = [
    "f(", "f(1, 2)", ")", " -> ", " == ", " should return ", ">>> ", "\n", "5", "'x'", "[1, 2]", "obj.", "(",
    "__import__('os')", "f(a=1)", "1e9", "True", " returns ", "g(3)", " ", "→", "-", "2.5", '"s"', "f(*x)",
    "f(1, (2, 3))",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30))
def test_examples_are_only_literal_calls_of_one_function_whatever_the_text(pieces):
    """Any text: no exception, at most MAX_EXAMPLES examples, each a call of one named
    function on literal arguments with a literal value, so the harness only ever runs
    `name(literals)`."""
    import ast

    from posttrain.data.judge_tools import MAX_EXAMPLES, examples

    found = examples("".join(pieces))
    assert len(found) <= MAX_EXAMPLES and len({e.function for e in found}) <= 1
    for e in found:
        call = ast.parse(e.call, mode="eval").body
        assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.keywords
        for node in [*call.args, ast.parse(e.expected, mode="eval").body]:
            ast.literal_eval(node)
