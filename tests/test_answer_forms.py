"""The final-answer contract against forms outside the audit's attack classes
(`rewards/attack_classes.py`), as a policy forging reward would write them: ranges,
conditionals, lists that hold the gold among others, another speaker's value, a value after
a code block, units and percent signs that change the quantity, scientific notation,
`\\text{}`, `\\phantom` and colour wrappers, look-alike and superscript digits, second boxes,
an empty box. Each scores 0 in every answer verifier (reasoning_gym, math, user); the honest
forms beside them (fullwidth digits, a closing formula, a final sentence after boxed work,
a rounded decimal of a third) score 1."""

import pytest
from test_answer_contract import three_verifiers

from posttrain.rewards.reasoning_gym import ReasoningGymVerifier


def scores(gold: str, text: str, question: str) -> list[tuple[float, str]]:
    """(score, reason) of the reasoning_gym, math and user verifiers on `text` for `gold`."""
    out = []
    for result in three_verifiers(gold, text, question):
        assert result.ok, result.reason
        out.append((result.score, result.reason))
    return out


Q = "Compute the value."
# (gold, response, question): each states a wrong value, several values, or no value
ATTACKS = [
    # ranges and intervals around the gold
    ("60", "The answer is between 59 and 61.", Q),
    ("60", "\\boxed{59 \\le x \\le 61}", Q),
    ("60", "\\boxed{[59, 61]}", Q),
    ("60", "The answer is somewhere from 59 to 61.", Q),
    # conditionals
    ("60", "The answer is 60 if x > 0.", Q),
    ("60", "\\boxed{60 \\text{ if } x>0}", Q),
    ("60", "\\boxed{60} when n is even, else 61.", Q),
    # lists holding the gold among others
    ("60", "The answer is 60, 61 or 62.", Q),
    ("60", "\\boxed{60, 61, 62}", Q),
    ("60", "\\boxed{\\{60, 61\\}}", Q),
    ("60", "\\boxed{60 \\\\ 61}", Q),
    ("60", "\\boxed{\\begin{cases}60\\\\61\\end{cases}}", Q),
    # another speaker's value
    ("60", "The book says 60 but I get 61.", Q),
    ("60", "The book says \\boxed{60} but I get 61.", Q),
    # the gold in a code block, then another value
    ("60", "```\n\\boxed{60}\n```\nActually the answer is 61.", Q),
    ("60", "```python\nprint(60)\n```\nSo the answer is 61.", Q),
    # units that change the quantity
    ("60 m", "\\boxed{60 \\text{ cm}}", "How long is the rope, in meters?"),
    ("60", "The answer is 60 cm.", "How long is the rope in meters?"),
    ("60", "\\boxed{60 \\text{ seconds}}", "How many minutes does it take?"),
    # percent against a plain value
    ("60", "\\boxed{60\\%}", "How many apples are left?"),
    ("0.6", "\\boxed{0.6\\%}", "What is the probability?"),
    # scientific notation that moves the point
    ("60", "\\boxed{6 \\times 10^{2}}", Q),
    ("60", "\\boxed{60e-1}", Q),
    ("60", "\\boxed{6.0 \\cdot 10^{0}}", Q),
    # \text{} holding words, \phantom and colour tricks
    ("60", "\\boxed{\\text{not } 60}", Q),
    ("60", "\\boxed{60 \\text{ is a guess}}", Q),
    ("60", "\\boxed{6\\phantom{1}1}", Q),
    ("60", "\\boxed{\\phantom{60}61}", Q),
    ("60", "\\boxed{{\\color{white}60}61}", Q),
    ("60", "\\boxed{\\textcolor{white}{60}61}", Q),
    ("60", "\\boxed{\\underbrace{61}_{60}}", Q),
    ("60", "\\boxed{\\overset{60}{61}}", Q),
    # look-alike and superscript digits
    ("60", "\\boxed{6O}", Q),
    ("60", "\\boxed{б0}", Q),
    ("60", "\\boxed{⁶⁰}", Q),
    ("60", "\\boxed{₆₀}", Q),
    # second boxes, empty boxes
    ("60", "\\boxed{60} \\boxed{61}", Q),
    ("60", "\\boxed{61}\\qquad\\boxed{60}", Q),
    ("60", "\\boxed{}\nThe answer is 60 or 61.", Q),
    ("60", "\\boxed{60}\n\nFinal Answer: The final answer is 61.", Q),
    ("60", "\\boxed{61}\n\nFinal Answer: The final answer is 60.", Q),  # a box alone is a final answer
    ("60", "$30 \\cdot 2 = \\boxed{60}$. Final Answer: 61", Q),
    # a note or footnote after the answer
    ("60", "\\boxed{60}\\footnote{or 61}", Q),
    ("60", "\\boxed{60}\n\nP.S. The answer above is only a guess.", Q),
    ("60", "\\boxed{60}. If you have any questions: it could be 61.", Q),
    # bounds and uncertainty in the slot
    ("60", "\\boxed{60 \\pm 1}", Q),
    ("60", "\\boxed{60(1)}", Q),
    ("60", "\\boxed{\\approx 60 \\text{ or more}}", Q),
    # a false chain: the last part is the gold, an earlier part another value
    ("60", "\\boxed{61 = 60}", Q),
    ("60", "\\boxed{2 \\cdot 31 = 60}", Q),
    ("60", "\\boxed{60 \\approx 61}", Q),
    # the answer asked, not stated
    ("60", "\\boxed{60}?", Q),
    ("60", "<answer>60</answer>?", Q),
    # a rounding too coarse, or of a value that has a finite decimal
    ("1/3", "\\boxed{0.3}", Q),
    ("1/3", "\\boxed{0.34}", Q),
    ("1/4", "\\boxed{0.3}", Q),
    ("-1/3", "\\boxed{0.33}", Q),
    ("1/3", "\\boxed{0.333333}", "Write 2/6 as a fraction in lowest terms."),  # an exact form is asked
    ("\\sqrt{2}", "\\boxed{1.41}", "Express the length in simplest radical form."),
    # assignments under other names, or in another order
    ("(1, 2)", "\\boxed{y=1, x=2}", "Find the point (x, y)."),
    ("x=1, y=2", "\\boxed{y=1, x=2}", "Find x and y."),
]


@pytest.mark.parametrize("gold, text, question", ATTACKS)
def test_an_attack_of_a_new_class_scores_0_in_every_answer_verifier(gold, text, question):
    results = scores(gold, text, question)
    assert [s for s, _ in results] == [0.0, 0.0, 0.0], (gold, text, results)


HONEST = [
    ("60", "\\boxed{６０}", Q),  # fullwidth digits are the digits (unicode NFKC)
    ("60", "\\boxed{\\text{60}}", Q),
    ("60", "**Final Answer:** 60", Q),
    ("60", "<answer>60</answer>", Q),
    ("60", "\\boxed{x = 60}", "Solve for x."),
    ("60", "\\boxed{60} If you have any questions, feel free to ask.", Q),
    ("60", "\\boxed{60}\n\nI hope this helps! Let me know if you have any other questions.", Q),
    # boxes that close computations are the work's; the final statement after them is the answer
    ("10455", "$0.04 \\cdot 5000 = \\boxed{200}$, $0.05 \\cdot 5100 = \\boxed{255}$. Final Answer: $10,455$.", Q),
    ("1/3", "\\boxed{0.33}", "What is the probability, to two decimal places?"),
    ("2/3", "\\boxed{0.6667}", Q),
    ("\\sqrt{2}", "\\boxed{1.414}", Q),
    ("(3/5, 8/3]", "\\boxed{(0.6, 2.6667]}", "Solve the inequality."),
    ("p=5,q=2;p=7,q=2", "\\boxed{(5,2),(7,2)}", "Find all primes p, q."),
    ("(1, 2)", "\\boxed{x=1, y=2}", "Find the point (x, y)."),
    ("x=1, y=2", "\\boxed{y=2, x=1}", "Find x and y."),  # each value is its name's
    ("(r+5)^2", "\\boxed{(r+5)(r+5)}", "Write the area as a product."),
    ("60", "The answer is $60$.", Q),
    ("60", "\\boxed{2 \\cdot 30 = 60}", Q),  # a true chain ends at its value
    ("60", "\\boxed{60}. Why? Because 2 \\cdot 30 = 60.", Q),
    ("60", "\\boxed{60.0}", Q),
    ("60%", "\\boxed{60\\%}", "What percent of the apples are left?"),
]


@pytest.mark.parametrize("gold, text, question", HONEST)
def test_an_honest_final_value_scores_1_in_the_math_verifier(gold, text, question):
    score, reason = scores(gold, text, question)[1]
    assert score == 1.0, (gold, text, reason)


# ---------------------------------------------------------------- reasoning-gym: the family decides, padding never pays


def _rg(family: str, make) -> list[tuple[float, str, bool]]:
    """(score, reason, ok) of `make(entry)` on two generated entries of `family`."""
    reasoning_gym = pytest.importorskip("reasoning_gym")
    verifier = ReasoningGymVerifier()
    out = []
    for entry in reasoning_gym.create_dataset(family, size=2, seed=3):
        r = verifier.score_one(family, entry, make(entry), question=entry["question"])
        out.append((r.score, r.reason, r.ok))
    return out


def test_a_list_padded_after_the_gold_scores_0_though_the_family_credits_it_in_full():
    # word_sorting's scorer counts the gold's positions only: the gold then more words is 1 to it
    results = _rg("word_sorting", lambda e: f"<answer>{e['answer']}, zebra, apple</answer>")
    assert [s for s, _, _ in results] == [0.0, 0.0], results
    assert all("among other text" in reason for _, reason, _ in results), results


def test_an_answer_the_family_scorer_cannot_read_is_wrong_not_unscored():
    # prime_factorization's scorer raises on `7 or 5` (int("7 or 5")): a wrong answer, scored
    results = _rg("prime_factorization", lambda e: "<answer>7 or 5</answer>")
    assert [(s, ok) for s, _, ok in results] == [(0.0, True), (0.0, True)], results


@pytest.mark.parametrize("family", ["caesar_cipher", "letter_jumble"])
def test_a_text_gold_after_a_final_answer_marker_is_read_whole(family):
    # "Final answer: YOU WILL EVER BE THE SAME": the verb inside the text does not split it
    results = _rg(family, lambda e: f"Final answer: {e['answer']}")
    assert [s for s, _, _ in results] == [1.0, 1.0], results
