"""Every reasoning-gym family the project can load decides its own tasks (issue 55, item 2).

For a few generated entries of each family: the gold, in an answer tag (on one line or on
its own lines) or a box, scores 1; where the gold is a construction of a value that the
question states (countdown, puzzle24, prime_factorization), that value alone scores no
more than the family's floor for a wrong answer (countdown gives 0.05 to any answer in form);
where the gold is a list, a sequence or a board, the same items in another order score
what the family gives them (0 where order matters to it), never more. Families that cannot
be scored against a gold are listed with the reason, and the reason is checked.
"""

import ast
import operator
import re

import pytest

reasoning_gym = pytest.importorskip("reasoning_gym")
from reasoning_gym.factory import DATASETS  # noqa: E402

from posttrain.rewards.reasoning_gym import ReasoningGymVerifier  # noqa: E402

ENTRIES = 3  # per family: a few, so the walk over every family stays a few seconds
SEED = 1
# families whose entries carry no gold: many answers are right, only the scorer can tell
NO_GOLD = {
    "boxnet": "plans of box moves: any plan that reaches the goals is right",
    "graph_color": "any proper colouring is right",
    "propositional_logic": "any conclusion that follows is right",
    "rubiks_cube": "any move sequence that solves the cube is right",
    "rush_hour": "any move sequence that frees the car is right",
}
# families that cannot be generated on their own
NOT_GENERATED = {"composite": "a mix of other families: it needs its own list of datasets"}
# order is the task: the reordered gold must score 0 here (whatever the value comparison says)
ORDERED = ("word_sequence_reversal", "sentence_reordering", "number_sorting", "word_sorting", "rotate_matrix")
# the families whose gold is a construction of a number the question states: the echo
# check below must reach each of them (else the generic detection of constructions broke)
CONSTRUCTIONS = ("countdown", "puzzle24", "prime_factorization")


def _entries(family: str) -> list[dict]:
    return list(reasoning_gym.create_dataset(family, size=ENTRIES, seed=SEED))


def _score(verifier: ReasoningGymVerifier, family: str, entry: dict, response: str) -> float:
    return verifier.score_one(family, entry, response, question=entry["question"]).score


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _arith(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.left), _arith(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return _arith(node.left) ** _arith(node.right)
    raise ValueError("not arithmetic")


def target_of(gold: str, question: str) -> str | None:
    """The value a construction gold evaluates to, where it is a whole number the question
    states (`94*4 - 61 - 6` for a countdown to 309, `2 × 3 × 5` for 30), else None."""
    if re.fullmatch(r"[-+]?\d+(\.\d+)?", gold.strip()) or not re.fullmatch(r"[\d\s+\-*/×^().]+", gold):
        return None
    try:
        value = _arith(ast.parse(gold.replace("×", "*").replace("^", "**"), mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None
    if value != int(value) or not re.search(rf"(?<![\d.]){int(value)}(?!\.?\d)", question):
        return None
    return str(int(value))


def reordered(gold: str) -> str | None:
    """The gold's items in another order (its lines, else its comma-separated items, else
    its words), or None where it has one item, is an expression's terms, or every order is
    the same text."""
    for sep in ("\n", ", ", ",", " "):
        items = gold.split(sep)
        if len(items) > 1:
            break
    else:
        return None
    if sep == " " and any(item in ("+", "-", "*", "/", "=", "×") for item in items):
        return None  # the terms of an expression (`-15.0 + 3.0i`): their order is not the answer
    other = sep.join(items[::-1])
    if other == gold:
        other = sep.join(items[1:] + items[:1])
    return None if other == gold else other


def swapped_mapping(gold: str) -> str | None:
    """A letter-to-digit mapping (`C=3,E=0,...`) with the digits of two letters swapped."""
    pairs = re.findall(r"([A-Z])=(\d)", gold)
    if len(pairs) < 2 or pairs[0][1] == pairs[1][1]:
        return None
    (a, x), (b, y) = pairs[:2]
    return gold.replace(f"{a}={x}", f"{a}=#").replace(f"{b}={y}", f"{b}={x}").replace(f"{a}=#", f"{a}={y}")


def honest_forms(gold: str) -> list[str]:
    forms = [f"<answer>{gold}</answer>", f"Working it out.\n<answer>\n{gold}\n</answer>"]
    if "\n" not in gold and "{" not in gold and "}" not in gold:
        forms.append(f"So the final answer is \\boxed{{{gold}}}.")
    return forms


SCORED = sorted(set(DATASETS) - set(NO_GOLD) - set(NOT_GENERATED))


def test_every_family_is_walked_or_listed_with_its_reason():
    assert set(NO_GOLD) | set(NOT_GENERATED) <= set(DATASETS)
    assert len(SCORED) > 80
    for family in NO_GOLD:
        assert all(e["answer"] is None for e in _entries(family)), f"{family} has a gold now: walk it"
    for family in NOT_GENERATED:
        with pytest.raises(AssertionError):
            _entries(family)


@pytest.mark.parametrize("family", SCORED)
def test_the_family_decides_gold_echo_and_order(family):
    verifier = ReasoningGymVerifier()
    scorer = reasoning_gym.get_score_answer_fn(family)
    for entry in _entries(family):
        gold = str(entry["answer"])
        assert scorer(gold, entry) == 1.0, f"{family}: its scorer refuses its own gold {gold!r}"
        for response in honest_forms(gold):
            result = verifier.score_one(family, entry, response, question=entry["question"])
            assert result.score == 1.0, (family, response[:120], result.reason)
        target = target_of(gold, entry["question"])
        if target is not None:
            got = _score(verifier, family, entry, f"<answer>{target}</answer>")
            assert got < 1.0 and got <= scorer(target, entry), (family, gold, target, got)  # the family's floor
        for other, zero in ((reordered(gold), family in ORDERED), (swapped_mapping(gold), True)):
            if other is None:
                continue
            got = _score(verifier, family, entry, f"<answer>{other}</answer>")
            assert got <= scorer(other, entry), (family, gold, other, got)
            assert got == 0.0 or not zero, (family, gold, other, got)


def test_the_echo_check_reaches_every_construction_family():
    for family in CONSTRUCTIONS:
        entries = list(reasoning_gym.create_dataset(family, size=20, seed=SEED))
        echoes = [(e, target_of(str(e["answer"]), e["question"])) for e in entries]
        echoes = [(e, t) for e, t in echoes if t is not None]
        assert echoes, f"{family}: no gold read as a construction of a stated value"
        verifier, scorer = ReasoningGymVerifier(), reasoning_gym.get_score_answer_fn(family)
        for entry, target in echoes[:3]:
            got = _score(verifier, family, entry, f"The answer is \\boxed{{{target}}}")
            assert got < 1.0 and got <= scorer(target, entry), (family, target, got)


def test_the_value_side_still_refuses_hedges_and_padding():
    """The family cannot be talked into credit: hedges and padded values still score 0."""
    verifier = ReasoningGymVerifier()
    entry = _entries("basic_arithmetic")[0]
    gold = str(entry["answer"])
    assert _score(verifier, "basic_arithmetic", entry, f"<answer>{gold}</answer>") == 1.0
    assert _score(verifier, "basic_arithmetic", entry, f"<answer>{gold}</answer> or maybe 12345") == 0.0
    assert _score(verifier, "basic_arithmetic", entry, f"\\boxed{{{gold}}} and \\boxed{{{gold}1}}") == 0.0
    words = _entries("word_sorting")[0]
    hedge = f"<answer>{words['answer']}</answer>\nThe answer is: {reordered(str(words['answer']))}"
    assert _score(verifier, "word_sorting", words, hedge) == 0.0
