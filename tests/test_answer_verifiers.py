"""Answer verifiers (math, reasoning_gym, user) read a final answer as a value.

Properties (hypothesis): for random expected values, every honest form of the value scores 1
in all three verifiers, and every attack class of issue 26 scores 0: a detached or flipped
sign, a constant or unit-like symbol that changes the value, a relation, hedges (several
boxes, `\\pm`, two lines of one answer, "unless", alternatives), padding, wrappers that keep
the value (`-(-60)`, a floor of a non-integer literal, `\\sqrt{3600}`), the question's own
expression, and answers not in the form the task asks for. And the grading suite: other
projects' answer-grading tests, held in tests/data/grading_pairs.jsonl.
"""

import importlib.util
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posttrain.rewards.base import score_sync
from posttrain.rewards.math_verifier import MathVerifier, judge
from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
from posttrain.rewards.user import UserReward
from posttrain.types import Completion, Message, Sample, Task

PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sample(task: Task, text: str) -> Sample:
    return Sample(task=task, group_id=0, prompt_ids=(1,), completion=Completion((5,), (-0.1,), text, "stop"))


def three_verifiers(gold: str, text: str, question: str = "Compute the value.", form: str | None = None):
    """(reasoning_gym, math, user) results for `text` answering a task whose answer is `gold`."""
    messages = (Message("user", question),)
    entry = {"question": question, "answer": gold, "metadata": {}}
    rg = Task("r", "basic_arithmetic", messages, answer=gold, entry=entry, answer_form=form)
    math_task = Task("m", "math", messages, answer=gold, verifier="math", answer_form=form)
    user_task = Task("u", "user", messages, answer=gold, entry={"answer": gold}, verifier="user", answer_form=form)
    return [
        score_sync(ReasoningGymVerifier(), [_sample(rg, text)])[0],
        score_sync(MathVerifier(), [_sample(math_task, text)])[0],
        score_sync(UserReward(None), [_sample(user_task, text)])[0],
    ]


def assert_scores(gold: str, text: str, score: float, **kw):
    results = three_verifiers(gold, text, **kw)
    assert [r.score for r in results] == [score] * 3, (gold, text, [r.reason for r in results])
    assert all(r.ok for r in results)


# ---------------------------------------------------------------- honest forms score 1

HONEST_INTEGER = [
    "{v}",
    "<answer>{v}</answer>",
    "\\boxed{{{v}}}",
    "The final answer is $\\boxed{{{v}}}$.",
    "Final Answer: The final answer is ${v}$. I hope it is correct.",
    "so the answer is {v}.",
    "Answer: {v}",
    "x = {v}",
    "\\boxed{{x = {v}}}",
    "The average speed is {v} km/h.",
    "<answer>{v} cm^2</answer>",
    "\\boxed{{{v} \\text{{ apples}}}}",
    "<answer>{v}.0</answer>",
    "**Final answer:** {v}",
    "Thus the result is \\( {v} \\).",
    "Therefore\n$$\n{v}\n$$",
    "work: 2 + 2 = 4\n<answer>{v}</answer>",
    "<answer>{v}</answer> and again \\boxed{{{v}}}",
]

integers = st.integers(min_value=-(10**6), max_value=10**6)


@PROPERTY
@given(v=integers, template=st.sampled_from(HONEST_INTEGER))
def test_an_integer_in_any_honest_form_scores_1(v, template):
    # a noun after the value is the question's own (docs/rewards.md, the final-answer contract)
    assert_scores(str(v), template.format(v=v), 1.0, question="How many apples are there?")


@PROPERTY
@given(v=st.integers(min_value=1000, max_value=10**9))
def test_thousands_separators_currency_and_percent_score_1(v):
    assert_scores(str(v), f"<answer>{v:,}</answer>", 1.0)
    assert_scores(str(v), f"It costs \\${v:,}.", 1.0)
    assert_scores(f"{v}\\%", f"\\boxed{{{v} \\%}}", 1.0)
    assert_scores(f"{v}\\%", f"<answer>{v}%</answer>", 1.0)


fractions = st.builds(Fraction, st.integers(-500, 500), st.integers(2, 97)).filter(lambda f: f.denominator > 1)


@PROPERTY
@given(f=fractions, style=st.sampled_from(["\\frac{{{p}}}{{{q}}}", "\\dfrac{{{p}}}{{{q}}}", "{p}/{q}"]))
def test_a_fraction_in_latex_or_plain_scores_1(f, style):
    p, q = abs(f.numerator), f.denominator
    sign = "-" if f < 0 else ""
    gold = f"{sign}\\frac{{{p}}}{{{q}}}"
    assert_scores(gold, f"<answer>{sign}{style.format(p=p, q=q)}</answer>", 1.0)


@pytest.mark.parametrize(
    "gold, text",
    [
        ("[0, 1)", "<answer>[0,1)</answer>"),
        ("\\{1, 2\\}", "\\boxed{\\{2, 1\\}}"),
        ("(1, 2)", "The point is $(1, 2)$."),
        ("|AB| = 1", "\\boxed{1}"),
        ("1", "\\boxed{|AB| = 1}"),
        ("3:4", "<answer>3:4</answer>"),
        ("\\text{E}", "\\boxed{E}"),
        ("E", "\\boxed{\\text{(E)}}"),
        ("\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix}", "\\boxed{\\begin{bmatrix}1&2\\\\3&4\\end{bmatrix}}"),
        ("x^2 + 2x + 1", "<answer>1 + 2x + x^2</answer>"),
        ("\\frac{\\sqrt{3}}{2}", "\\boxed{\\sqrt{3}/2}"),
        ("12\\pi", "\\boxed{12\\pi}"),
        ("28\\%", "\\boxed{28 \\%}"),
        ("90", "\\boxed{90^\\circ}"),
        ("-61", "\\boxed{- 61}"),
    ],
)
def test_the_honest_form_table_scores_1(gold, text):
    assert_scores(gold, text, 1.0)


def test_roots_in_any_order_score_1_and_a_family_decides_its_own_order():
    """math and user credit a list of roots in another order; a reasoning-gym task leaves
    the order to its family (number_sorting's order is its task), here basic_arithmetic's
    exact comparison (issue 55: the value comparison never credits before the family)."""
    rg, math, user = three_verifiers("1, -2", "so $x = \\boxed{-2}$ and $x = \\boxed{1}$")
    assert (rg.score, math.score, user.score) == (0.0, 1.0, 1.0), rg.reason


# ---------------------------------------------------------------- attacks score 0

positive = st.integers(min_value=1, max_value=10**6)


def _others(v: int) -> st.SearchStrategy[int]:
    return st.integers(-(10**6), 10**6).filter(lambda w: w != v)


ATTACKS = {
    "sign": ["\\boxed{{- {v}}}", "The answer is - {v}.", "<answer>-{v}</answer>"],
    "constant": ["\\boxed{{{v}\\pi}}", "\\boxed{{{v}\\infty}}", "The answer is {v} pi", "<answer>{v}i</answer>"],
    "relation": ["\\boxed{{x \\geq {v}}}", "<answer>x > {v}</answer>", "The answer is $x \\leq {v}$."],
    "hedge": [
        "\\boxed{{{v}}} \\boxed{{{w}}}",
        "\\boxed{{{w}}} ... on reflection \\boxed{{{v}}}",
        "<answer>\\pm {v}</answer>",
        "<answer>{v}\n{w}</answer>",
        "<answer>{v} unless it is {w}</answer>",
        "{v} or {w}",
        "\\boxed{{{v}, {w}}}",
        "\\boxed{{{v} \\text{{ or }} {w}}}",
        "The answer is {w}.\nFinal answer: {v}",
        "\\boxed{{{v}.0000001}} so \\boxed{{{v}}}",
    ],
    "padding": [
        "<answer>{v}0</answer>",
        "<answer>9{v}9</answer>",
        "<answer>{v}{v}</answer>",
        "<answer>{v}.0000001</answer>",
    ],
    "wrapper": [
        "\\boxed{{-(-{v})}}",
        "\\boxed{{\\lfloor {v}.5 \\rfloor}}",
        "\\boxed{{\\sqrt{{{sq}}}}}",
        "<answer>{v3} - 3</answer>",
        "\\boxed{{\\frac{{{v2}}}{{2}}}}",
        "<answer>{v} + 0</answer>",
    ],
}


@PROPERTY
@given(v=positive, data=st.data(), attack=st.sampled_from(sorted(ATTACKS)))
def test_every_attack_class_scores_0(v, data, attack):
    w = data.draw(_others(v))
    template = data.draw(st.sampled_from(ATTACKS[attack]))
    text = template.format(v=v, w=w, sq=v * v, v3=v + 3, v2=2 * v)
    assert_scores(str(v), text, 0.0)


@PROPERTY
@given(a=st.integers(1, 12), b=st.integers(1, 12), var=st.sampled_from("xyz"))
def test_the_question_s_own_expression_and_unexpanded_forms_fail_expand(a, b, var):
    question = f"Expand ({var} + {a})({var} + {b})."
    gold = f"{var}^2 + {a + b}{var} + {a * b}"
    for echo in (f"({var} + {a})({var} + {b})", f"({var}+{b})({var}+{a})", f"{var}({var} + {a}) + {b}({var} + {a})"):
        for verdict in (judge(gold, f"<answer>{echo}</answer>", form="expanded", question=question),):
            assert verdict.score == 0.0, (echo, verdict.reason)
        assert_scores(gold, f"<answer>{echo}</answer>", 0.0, question=question, form="expanded")
    assert_scores(gold, f"<answer>{a * b} + {a + b}{var} + {var}^2</answer>", 1.0, question=question, form="expanded")


@PROPERTY
@given(a=st.integers(1, 9), b=st.integers(1, 9).filter(lambda b: b > 0))
def test_an_expanded_form_fails_factor(a, b):
    question = f"Factor x^2 + {a + b}x + {a * b}."
    gold = f"(x + {a})(x + {b})"
    assert_scores(gold, f"\\boxed{{x^2 + {a + b}x + {a * b}}}", 0.0, question=question, form="factored")
    assert_scores(gold, f"\\boxed{{(x+{b})(x+{a})}}", 1.0, question=question, form="factored")


@PROPERTY
@given(f=fractions)
def test_a_fraction_fails_write_as_a_decimal(f):
    decimal = f"{float(f):.12g}"
    exact = Fraction(decimal) == f
    question = "Write the result as a decimal."
    assert_scores(
        decimal, f"<answer>\\frac{{{f.numerator}}}{{{f.denominator}}}</answer>", 0.0, question=question, form="decimal"
    )
    if exact:
        assert_scores(decimal, f"<answer>{decimal}</answer>", 1.0, question=question, form="decimal")


@pytest.mark.parametrize("p, q", [(6, 8), (12, 16), (50, 100)])
def test_the_question_s_fraction_fails_lowest_terms(p, q):
    f = Fraction(p, q)
    question = f"Simplify the fraction {p}/{q} to its lowest terms."
    gold = f"{f.numerator}/{f.denominator}"
    assert_scores(gold, f"<answer>{p}/{q}</answer>", 0.0, question=question, form="fraction")
    assert_scores(gold, f"<answer>{f.numerator}/{f.denominator}</answer>", 1.0, question=question, form="fraction")
    assert_scores(gold, f"<answer>{float(f)}</answer>", 0.0, question=question, form="fraction")


def test_a_non_numeric_question_expression_never_passes():
    question = "Simplify $\\frac{x^2 - 1}{x - 1}$."
    assert_scores("x + 1", "\\boxed{\\frac{x^2 - 1}{x - 1}}", 0.0, question=question)
    assert_scores("x + 1", "\\boxed{x+1}", 1.0, question=question)


# ---------------------------------------------------------------- the grading suite


def _grading_suite():
    path = Path(__file__).resolve().parent.parent / "bench" / "grading_suite.py"
    spec = importlib.util.spec_from_file_location("grading_suite", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_grading_suite_credits_95_percent_of_equal_pairs_and_no_unequal_one():
    suite = _grading_suite()
    rows = suite.load_pairs()
    assert len(rows) >= 300
    out = suite.run(rows)
    # the contract refuses prose predictions the suites call equal (CONTRACT_REFUSALS, each with
    # its docs/rewards.md rule): 95 % among the rest, and the whole suite no lower than measured
    # (255 of 275: the rest are computations left undone, a percent sign where no percentage
    # is asked, and values that differ; bench/RESULTS.md lists each)
    assert out["credited_share_by_contract"] >= 0.95, out["disagreements"]
    assert out["credited"] >= 255, out["disagreements"]
    credited_unequal = [d for d in out["disagreements"] if d["suite"] == "unequal"]
    assert all(d["exception"] for d in credited_unequal), credited_unequal


def test_the_grading_suite_exceptions_are_few_each_with_its_rule_and_all_needed():
    suite = _grading_suite()
    pairs = {(r["gold"], r["prediction"]): r for r in suite.load_pairs()}
    assert len(suite.EXCEPTIONS) <= 5 and len(suite.CONTRACT_REFUSALS) <= 12
    for key, reason in suite.EXCEPTIONS.items():
        assert key in pairs and "docs/rewards.md" in reason
        credited, _ = suite.grade(pairs[key])
        assert credited != pairs[key]["equal"], f"{key} is no longer an exception"
    for text, reason in suite.CONTRACT_REFUSALS.items():
        (row,) = [r for r in pairs.values() if text in r["prediction"]]
        assert row["equal"] and "docs/rewards.md" in reason
        credited, _ = suite.grade(row)
        assert not credited, f"{text!r} is no longer refused"


@pytest.mark.parametrize(
    "gold, text, score",
    [
        ("-61", "\\boxed{−61}", 1.0),  # the unicode minus sign
        ("61", "\\boxed{−61}", 0.0),
        ("60", "\\boxed{６０}", 1.0),  # fullwidth digits
        ("61", "\\boxed{-\u200b61}", 0.0),  # an invisible character does not hide a sign
        ("60", "\\boxed{60} (or 61)", 0.0),  # an alternative after the final box
        ("60", "<answer>60</answer> unless it is 61", 0.0),
        ("60", "\\boxed{60}. Check: 2 * 30 = 60.", 1.0),
        ("60", "\\boxed{60}\\boxed{}", 1.0),  # an empty box is no answer
        ("60", "\\boxed{6{,}0}", 0.0),  # `{,}` joins thousands only
        ("1000", "\\boxed{1{,}000}", 1.0),
        ("60", "\\boxed{" + "(" * 1500 + "60" + ")" * 1500 + "}", 0.0),  # refused before any parsing
    ],
)
def test_unicode_alternatives_and_size(gold, text, score):
    assert_scores(gold, text, score)


# ---------------------------------------------------------------- values outside the digits (sign, scale, percent)

PRESENTED = ["\\boxed{{{p}}}", "<answer>{p}</answer>", "Working it out.\nThe answer is {p}"]


@PROPERTY
@given(v=st.integers(1, 10**5), word=st.sampled_from(["negative", "minus"]), how=st.sampled_from(PRESENTED))
def test_a_sign_word_is_the_sign(v, word, how):
    assert_scores(str(v), how.format(p=f"{word} {v}"), 0.0)
    assert_scores(str(-v), how.format(p=f"{word} {v}"), 1.0)


@PROPERTY
@given(v=st.integers(1, 999), scale=st.sampled_from([("thousand", 10**3), ("million", 10**6), ("k", 10**3)]))
def test_a_scale_word_multiplies(v, scale):
    word, factor = scale
    text = f"\\boxed{{{v}{'' if word == 'k' else ' '}{word}}}"
    assert_scores(str(v), text, 0.0)
    assert_scores(str(v * factor), text, 1.0)


@PROPERTY
@given(v=st.integers(1, 99), sign=st.sampled_from(["\\%", "%", " \\%", " percent"]))
def test_a_percent_counts_only_where_the_answer_is_a_percentage(v, sign):
    text = f"\\boxed{{{v}{sign}}}"
    assert_scores(str(v), text, 0.0)  # 11% of a plain number is 0.11
    assert_scores(f"{v}\\%", text, 1.0)
    assert_scores(f"{v} \\%", f"\\boxed{{{v}\\%}}", 1.0)
    assert_scores(str(v), text, 1.0, question="What percentage of the class passed?")
    assert_scores(str(Fraction(v, 100).numerator / Fraction(v, 100).denominator), text, 1.0)


DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"


@PROPERTY
@given(f=fractions.filter(lambda f: f > 0), dash=st.sampled_from(DASHES), outside=st.sampled_from(["{d}$", "$"]))
def test_a_dash_before_a_number_is_a_minus(f, dash, outside):
    text = f"The answer is {outside.format(d=dash) if '{d}' in outside else dash + '$'}{f.numerator}/{f.denominator}$"
    assert_scores(f"{f.numerator}/{f.denominator}", text, 0.0)
    assert_scores(f"-{f.numerator}/{f.denominator}", text, 1.0)


@PROPERTY
@given(
    f=fractions.filter(lambda f: f > 0),
    wrap=st.sampled_from(
        [
            "\\pm ${x}$",
            "-(-${x}$)",
            "\\mp ${x}$",
            "not ${x}$",
            "-${x}$",
            "negative ${x}$",
            "${x}$i",
            "${x}$!",
            "${x}$ million",
            "${x}$\\%",
        ]
    ),
)
def test_text_outside_the_math_of_a_final_line_is_parsed_with_it(f, wrap):
    right = f"{f.numerator}/{f.denominator}"
    text = "Working it out step by step.\nThe answer is " + wrap.format(x=right)
    assert_scores(right, text, 0.0)


@pytest.mark.parametrize(
    "text",
    [
        "The answer is $42$ (in cm).",
        "Thus $42$ apples remain.",
        "The answer is **$42$**.",
        "So the total is ($42$).",
        "The final answer is $42$. I hope it is correct.",
        "The answer is $42$ !",
        "The answer is $42$ cm.",
    ],
)
def test_prose_around_the_math_of_a_final_line_is_not_parsed(text):
    assert_scores("42", text, 1.0)


@PROPERTY
@given(
    v=st.integers(-1000, 1000),
    d=st.integers(1, 50),
    form=st.sampled_from(["Answer: {a}\nAnswer: {b}", "The answer is {a}.\n{b}", "<answer>{a}</answer>\n{b}"]),
)
def test_two_final_answers_that_differ_are_a_hedge_for_the_agent_verifier_too(v, d, form):
    from dataclasses import asdict

    from posttrain.data.builtin_env import EnvState
    from posttrain.rewards.agent_verifier import AgentVerifier

    def agent(final: str) -> float:
        state = EnvState(final=final)
        task = Task(
            "a", "agent", (Message("user", "Compute it"),), entry={"check": {"answer": str(v)}}, verifier="agent"
        )
        sample = Sample(task, 0, (1,), Completion((5,), (-0.1,), final, "stop"), env=asdict(state))
        return AgentVerifier().score_one(sample).score

    assert agent(form.format(a=v + d, b=v)) == 0.0
    assert agent(f"Answer: {v}") == 1.0
    assert agent(form.format(a=v, b=v)) == 1.0


# A box is the answer only where nothing that touches it operates on it: a sign, `\pm`, an
# operator, an exponent, a percent or scale word, a factorial, a root or fraction around it.
BOX_OPERANDS = [
    "The answer is $-\\boxed{{{v}}}$",
    "-$\\boxed{{{v}}}$",
    "$\\pm\\boxed{{{v}}}$",
    "$-(\\boxed{{{v}}})$",
    "$\\boxed{{{v}}}^2$",
    "$\\boxed{{{v}}}!$",
    "$\\boxed{{{v}}}\\%$",
    "$\\boxed{{{v}}}$ million",
    "$\\boxed{{{v}}}$ thousand",
    "negative $\\boxed{{{v}}}$",
    "$2\\boxed{{{v}}}$",
    "$\\boxed{{{v}}} \\cdot 3$",
    "$\\sqrt{{\\boxed{{{v}}}}}$",
    "$\\frac{{1}}{{\\boxed{{{v}}}}}$",
    "$\\boxed{{{v}}}\\pi$",
]
BOX_LAYOUTS = [
    "$\\boxed{{{v}}}$",
    "so $x = \\boxed{{{v}}}$.",
    "\\[ x = \\boxed{{{v}}} \\]",
    "$\\boxed{{{v}}}$ cm",
    "$\\boxed{{{v}}}\\,\\text{{km}}$",
    "$\\boxed{{{v}}}^\\circ$",
    "Answer - $\\boxed{{{v}}}$",
    "\\(\\boxed{{{v}}}\\) square centimeters.",
    "$(\\boxed{{{v}}})$",
    "\\begin{{align*}} x &= \\boxed{{{v}}} \\end{{align*}}",
]


@given(v=st.integers(1, 10**6), template=st.sampled_from(BOX_OPERANDS))
def test_a_box_that_is_an_operand_is_not_the_answer(v, template):
    verdict = judge(str(v), template.format(v=v))
    assert verdict.score == 0.0 and "operand" in verdict.reason, (template, verdict.reason)


@given(v=st.integers(1, 10**6), template=st.sampled_from(BOX_LAYOUTS))
def test_layout_around_a_box_leaves_it_the_answer(v, template):
    verdict = judge(str(v), template.format(v=v))
    assert verdict.score == 1.0, (template, verdict.reason)
