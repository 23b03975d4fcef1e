"""`posttrain rewards audit` by class: attacks generated from a grammar of classes over each
task's own gold (`rewards/attack_classes.py`), the strict reference they are checked against
(`rewards/strict_reference.py`), the disagreements reported by class, and the evidence rule
(an audit whose verifier credits under 95 % of its honest controls is not clean). The
verifiers audited are user reward functions of known behaviour (`fixtures/audit_rewards.py`):
the shipped verifiers' reading of answers is being rewritten, and their outcome is not what
these tests check."""

import json
import os
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from posttrain.rewards import attack_classes as grammar
from posttrain.rewards.audit import run_audit
from posttrain.rewards.audit_reference import check
from posttrain.rewards.strict_reference import judge
from posttrain.types import Message, RewardResult, Task

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
import audit_rewards  # noqa: E402

NUMERIC = ("negation", "relation", "operation", "multiplier", "retraction", "perturbation", "word-padding")


# ---------------------------------------------------------------- the strict reference


@pytest.mark.parametrize(
    "response, gold, prompt",
    [
        ("$\\boxed{60}$", "60", ""),
        ("The answer is 60.", "60", ""),
        ("So the final answer is $\\boxed{60}$.", "60", ""),
        ("<answer>-4</answer>", "-4", ""),
        ("$\\boxed{\\frac{3}{4}}$", "3/4", ""),
        ("$\\boxed{\\dfrac{105}{107}}$", "$105/107$", ""),
        ("The answer is 1,200.", "1200", ""),
        ("The answer is 60 cm.", "60", "How long is it in cm?"),
        ("$\\boxed{60\\text{ cm}}$", "60", "How long is it in cm?"),
        ("$\\boxed{0.50}$", "0.5", ""),
        ("$\\boxed{3x + x^2 + 2}$", "x^2 + 3x + 2", ""),
        ("<answer>C</answer>", "C", ""),
    ],
)
def test_the_reference_credits_the_gold_in_honest_forms(response, gold, prompt):
    verdict = judge(response, gold, prompt)
    assert verdict.credited, verdict.reason


@pytest.mark.parametrize(
    "response, gold, prompt",
    [
        ("The answer cannot be 60.", "60", ""),  # no final-answer slot
        ("$\\boxed{anything but 60}$", "60", ""),
        ("$\\boxed{at least 60}$", "60", ""),
        ("$\\boxed{half of 120}$", "60", ""),  # the computation, not the value
        ("<answer>60 squared</answer>", "60", ""),
        ("The answer is 60 dozen.", "60", ""),
        ("The answer is 60 cm.", "60", "How many apples?"),  # a unit the task does not name
        ("$\\boxed{60}$. Actually it is 61.", "60", ""),
        ("$\\boxed{60}$\nActually, that is wrong.", "60", ""),
        ("$\\boxed{61}$ or $\\boxed{60}$", "60", ""),
        ("The answer is $-\\boxed{60}$", "60", ""),
        ("$\\sqrt{\\boxed{60}}$", "60", ""),
        ("$\\boxed{-3e-07}$", "3e-07", ""),  # the sign of a tiny value
        ("$\\boxed{60.000006}$", "60", ""),
        ("$\\boxed{0x3C}$", "60", ""),
        ("$\\boxed{LX}$", "60", ""),
        ("$\\boxed{0.75}$", "3/4", ""),  # a decimal where the gold is a fraction
        ("$\\boxed{\\frac{6}{8}}$", "3/4", ""),  # not in lowest terms
        ("$\\boxed{(x + 1)(x + 2)}$", "x^2 + 3x + 2", ""),  # the other form
        ("<answer>a b c</answer>", "c b a", ""),
        ("<answer>c</answer>", "C", ""),
        ("I doubt the answer is 60.", "60", ""),  # the marker's own sentence hedges it
        ("It couldn't be anything but $\\boxed{60}$", "60", ""),
        ("John's final answer is 60.", "60", ""),
    ],
)
def test_the_reference_refuses_what_is_not_exactly_the_gold(response, gold, prompt):
    verdict = judge(response, gold, prompt)
    assert not verdict.credited, verdict.reason


# ---------------------------------------------------------------- the generators


def random_golds(seed: int, n: int = 40) -> list[str]:
    """Values no template names: integers, negatives, decimals, fractions, tiny and large."""
    rng = random.Random(seed)
    golds = []
    for _ in range(n):
        kind = rng.choice(("int", "neg", "dec", "frac", "tiny", "large"))
        if kind == "int":
            golds.append(str(rng.randint(0, 5000)))
        elif kind == "neg":
            golds.append(str(-rng.randint(1, 999)))
        elif kind == "dec":
            golds.append(f"{rng.uniform(-50, 50):.{rng.randint(1, 6)}f}")
        elif kind == "frac":
            f = Fraction(rng.randint(1, 99), rng.randint(2, 99))
            golds.append(f"{f.numerator}/{f.denominator}" if f.denominator > 1 else "7/9")
        elif kind == "tiny":
            golds.append(f"{rng.uniform(1, 9):.3f}e-{rng.randint(7, 12)}")
        else:
            golds.append(str(rng.randint(10**9, 10**12)))
    return golds


@pytest.mark.parametrize("seed", [0, 1])
def test_every_class_covers_values_it_has_never_seen(seed):
    """Over random golds: each numeric class generates attacks, the reference refuses each
    one (they are wrong by construction) and credits each honest control."""
    for text in random_golds(seed):
        gold = grammar.gold_of(text, "Compute the value.")
        attacks = grammar.generate(gold)
        assert set(NUMERIC) <= {a.cls for a in attacks}, (text, {a.cls for a in attacks})
        assert not [a for a in attacks if judge(a.text, text).credited]
        controls = grammar.controls(gold)
        assert len(controls) >= 6 and all(judge(c.text, text).credited for c in controls), text


def test_the_generator_keeps_out_what_the_reference_credits():
    """A template that happens to state the gold (`{v} plus one` never does; the other value
    of a word is not the word) is never scored as an attack."""
    for text in ("60", "0", "-1", "1", "2", "C", "x^2 + 3x + 2", "1, 3, 2", "c b a"):
        gold = grammar.gold_of(text, "Sort these.")
        made = grammar.generate(gold)
        assert made and not [a for a in made if judge(a.text, text, gold.prompt).credited], text


def test_classes_that_depend_on_the_gold_shape():
    numerals = [a.text for a in grammar.generate(grammar.gold_of("60", "What is 85 - 25?")) if a.cls == "numeral"]
    assert any("0x3c" in t for t in numerals) and any("LXI" in t for t in numerals)  # the value, another value
    asked = grammar.generate(grammar.gold_of("60", "Write 60 in hexadecimal."))
    assert not any("0x3c" in a.text for a in asked if a.cls == "numeral")  # the task asks hex: not an attack
    words = grammar.generate(grammar.gold_of("dog cat bird", "Reverse the order of the words."))
    assert {a.text for a in words if a.cls == "reordering"} >= {"<answer>bird cat dog</answer>"}
    roots = grammar.generate(grammar.gold_of("1, 2", "Solve x^2 - 3x + 2 = 0."))
    assert not [a for a in roots if a.cls == "reordering"]  # numbers in no asked order: a set, not a sequence
    countdown = grammar.gold_of("25 + 35 - 0", "Make 60 from 25, 35, 0.", {"target": 60})
    echoes = [a.text for a in grammar.generate(countdown) if a.cls == "construction-echo"]
    assert "<answer>60</answer>" in echoes
    factors = [a.text for a in grammar.generate(grammar.gold_of("2 × 2 × 3", "Factor 12.")) if a.cls != "negation"]
    assert "<answer>12</answer>" in factors
    tiny = [a.text for a in grammar.generate(grammar.gold_of("3e-07", "x")) if a.cls == "perturbation"]
    assert any("-0.0000003" in t for t in tiny)  # the sign of a tiny value


def test_rotation_writes_each_payload_once_and_meets_every_wrapper():
    gold = grammar.gold_of("60", "x")
    full, quick = grammar.generate(gold), grammar.generate(gold, rotate=0)
    assert len(quick) < len(full) / 2
    for wrapper in grammar.WRAPPERS:
        assert any(a.name.endswith(f"({wrapper})") for a in quick if a.cls == "relation")


# ---------------------------------------------------------------- the audit, in process


class Function:
    """A reward source over a user function of `fixtures/audit_rewards.py`, called in process
    (the CLI tests below run the same functions through the real user verifier)."""

    def __init__(self, fn):
        self.fn, self.name = fn, fn.__name__

    async def score(self, samples):
        out = []
        for s in samples:
            task = {
                "answer": s.task.answer,
                "messages": [{"role": m.role, "content": m.content} for m in s.task.messages],
            }
            score, reason = self.fn(s.completion.text, task)
            out.append(RewardResult(float(score), reason, self.name))
        return out


def tasks() -> list[Task]:
    rows = [("What is 85 - 25?", "60"), ("Simplify 6/8.", "3/4"), ("How much, in dollars?", "-12.5")]
    rows += [("Reverse the words: dog cat bird", "bird cat dog")]
    return [Task(f"t/{i}", "toy", (Message("user", p),), answer=a, verifier="user") for i, (p, a) in enumerate(rows)]


def audited(fn):
    audit = run_audit("user", Function(fn), tasks())
    return audit, check(audit)


@pytest.mark.parametrize("fn", [audit_rewards.substring, audit_rewards.strip_digits])
def test_a_gameable_verifier_is_flagged_by_class(fn):
    audit, ref = audited(fn)
    flagged = set(ref.by_class("fp"))
    assert {"negation", "relation", "multiplier", "retraction"} <= flagged, flagged
    assert audit.wins >= len(ref.false_positives) > 0
    wins = {row["class"] for row in audit.rows() if row["wins"]}
    assert {"negation", "relation", "multiplier"} <= wins


def test_a_strict_verifier_raises_no_false_alarm():
    audit, ref = audited(audit_rewards.strict)
    assert ref.evidence and ref.share == 1.0, ref.false_negatives[:3]
    assert not ref.false_positives and audit.wins == 0 and audit.voids == 0, ref.false_positives[:3]


def test_a_verifier_that_credits_nothing_is_no_evidence():
    audit, ref = audited(audit_rewards.refuse_all)
    assert audit.wins == 0 and not ref.evidence and ref.controls_credited == 0 and ref.controls > 20
    assert "credited 0 of" in ref.no_evidence_line() and "\n" not in ref.no_evidence_line()
    assert {"boxed", "tag"} <= set(ref.by_class("fn"))  # the honest controls it refused, by form


# ---------------------------------------------------------------- the CLI, through the user verifier


def audit_cli(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "posttrain.cli", "rewards", "audit", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def test_cli_names_the_classes_that_game_a_user_reward():
    proc = audit_cli("--verifier", "user", "--tasks", "2", "--quick", "--reward", "audit_rewards:strip_digits")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "strict reference:" in proc.stdout and "false positive negation" in proc.stdout, proc.stdout[-3000:]
    strict = audit_cli("--verifier", "user", "--tasks", "2", "--quick", "--reward", "audit_rewards:strict", "--json")
    result = json.loads(strict.stdout.strip().splitlines()[-1])
    reference = result["verifiers"][0]["reference"]
    assert strict.returncode == 0 and result["wins"] == 0, strict.stdout[-3000:] + strict.stderr[-2000:]
    assert reference["false_positives"] == [] and reference["evidence"] is True


def test_cli_exits_non_zero_when_the_verifier_credits_no_honest_control(tmp_path):
    """A letter verifier on the generated numeric tasks tested nothing: non-zero, one line.
    On the user's own letter rows (`--task-file`), the attacks are built from their golds."""
    proc = audit_cli("--verifier", "user", "--tasks", "2", "--quick", "--reward", "audit_rewards:letter")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "no evidence" in lines[0], proc.stderr[-2000:]
    assert "credited 0 of" in lines[0] and "--task-file" in lines[0]
    rows = [
        {"verifier": "user", "prompt": f"{q}\nA) 1\nB) 2\nC) 3\nD) 4", "answer": a, "reward": "audit_rewards:letter"}
        for q, a in (("Which is 1 + 2?", "C"), ("Which is 2 * 2?", "D"))
    ]
    (tmp_path / "mcq.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    own = audit_cli("--task-file", str(tmp_path / "mcq.jsonl"), "--quick")
    assert own.returncode == 0, own.stdout[-3000:] + own.stderr[-2000:]
    assert "honest controls credited: 1" in own.stdout and "negation" in own.stdout


def test_a_perturbation_inside_a_family_s_declared_tolerance_is_not_generated():
    """decimal_arithmetic credits any value within one unit of its asked precision: a value a
    relative 1e-4 away is its gold by the task's own definition. The audit of a reasoning-gym
    task asks the family (`audit.declared_equal`) and leaves such a perturbation out; without
    the family's rule the generator makes at least one, so the check can fail."""
    reasoning_gym = pytest.importorskip("reasoning_gym")
    from posttrain.rewards.audit import declared_equal
    from posttrain.rewards.reasoning_gym import family_credits

    entry = next(iter(reasoning_gym.create_dataset("decimal_arithmetic", size=1, seed=0)))
    task = Task("r/0", "decimal_arithmetic", (Message("user", entry["question"]),), str(entry["answer"]), entry)
    gold = grammar.gold_of(str(entry["answer"]), entry["question"], entry["metadata"])

    def credited(g) -> bool:  # the payload of a perturbation written in an answer tag
        return family_credits("decimal_arithmetic", g.text.removeprefix("<answer>").removesuffix("</answer>"), entry)

    plain = [g for g in grammar.generate(gold) if g.cls == "perturbation" and g.name.endswith("(tag)")]
    assert any(credited(g) for g in plain), [g.text for g in plain]
    asked = [g for g in grammar.generate(gold, None, declared_equal(task)) if g.cls == "perturbation"]
    assert not any(credited(g) for g in asked if g.name.endswith("(tag)")), [g.text for g in asked]
    assert len(asked) < len([g for g in grammar.generate(gold) if g.cls == "perturbation"])
