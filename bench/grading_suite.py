"""The `math` verifier against other projects' answer-grading test suites.

tests/data/grading_pairs.jsonl holds (gold, prediction, equal) facts taken from the public
test suites of Math-Verify, hendrycks/math and NeMo-Skills (each row names its origin). A
gold written as a whole solution gives its final answer the way the verifier reads one;
the prediction is scored as a response, through `MathVerifier`. Printed: how many pairs the
suites call equal are credited, how many they call unequal are refused, and every
disagreement. A credited unequal pair, or a refused equal one, that `EXCEPTIONS` lists is
one that a rule of "What a reward guarantees" (docs/rewards.md) refuses or credits on purpose;
`CONTRACT_REFUSALS` lists the pairs called equal that the final-answer contract refuses on purpose
(a prediction that is prose, or that states other values after its answer).

.venv/bin/python bench/grading_suite.py [--json] [--quiet]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from posttrain.rewards.extract import after_final, all_boxed, extract_answer
from posttrain.rewards.math_verifier import MathVerifier
from posttrain.types import Completion, Message, Sample, Task

PAIRS = Path(__file__).resolve().parent.parent / "tests" / "data" / "grading_pairs.jsonl"

# (gold, prediction) -> why the verifier's verdict differs from the suite's, by the docs/rewards.md rule
_UNORDERED = (
    "docs/rewards.md, What a reward guarantees: a list written without brackets is a set of values (the answers to "
    "'find all x'), so its order does not count; hendrycks/math compares the strings"
)
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("10, 4, -2", "4, 10, -2"): _UNORDERED,
    ("0.1, 4, 2", "4, .1, 2"): _UNORDERED,
}
_GRAMMAR = (
    "docs/rewards.md, The final-answer contract: the whole slot parses; a word the grammar does not know is named"
)
_AFTER = "docs/rewards.md, The final-answer contract: nothing after the slot states another value or takes it back"
_SHAPE = "docs/rewards.md, The final-answer contract: a sentence slot has a documented shape"
# prediction text (unique in the suite) -> the contract rule that refuses a pair the suite calls equal
CONTRACT_REFUSALS: dict[str, str] = {
    "Soucis : 2,74 $ a..": _GRAMMAR,
    "17\\text{ any text}": _GRAMMAR,
    "Jane started growing Sphere 3 hours ago": _GRAMMAR,
    "there are 12 distinct arithmetic sequences": _GRAMMAR,
    "the position increases by 100%": _SHAPE,
    "located between $\\boxed{12 $ and $13 }": "docs/rewards.md, The final-answer contract: a box that closes no "
    "computation is a final answer ('between' makes this one a relation), whatever a statement after it says",
    "which follows from $4_5\\times2_5=8_{10}=13_5$": _AFTER,
    "the interest is compounded per year, and $t$": _AFTER,
    "If you have any questions or need further clarification": _AFTER,
    "which is a reasonable assumption given the context": _AFTER,
    "\\frac{1}{2} \\$ = \\frac{10}{9}": "docs/rewards.md, The final-answer contract: a chain of `=` between numbers "
    "holds (1/2 = 10/9 states two values)",
    "W(x)=1orW(x)=-1": "docs/rewards.md, The final-answer contract: `or` joins values only where several are "
    "expected (this gold's `\\boxed{` never closes, so it is one value)",
}


def exception_for(row: dict) -> str | None:
    """The docs/rewards.md rule under which the verifier's verdict on `row` differs from the suite's, or None."""
    rule = EXCEPTIONS.get((row["gold"], row["prediction"]))
    if rule is None and row["equal"]:
        rule = next((r for text, r in CONTRACT_REFUSALS.items() if text in row["prediction"]), None)
    return rule


def load_pairs(path: Path = PAIRS) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if not {"gold", "prediction", "equal", "origin"} <= row.keys():
                raise ValueError(f"{path}:{n}: a pair needs gold, prediction, equal and origin")
            rows.append(row)
    return rows


def reference(gold: str) -> str:
    """The expected answer a gold states: a whole solution's final answer (its boxes, where
    they stand side by side as one list: `\\boxed{1} and \\boxed{2}`, `\\boxed{1} papers and \\boxed{2} bins`),
    else the gold itself; a percentage stays one."""
    boxes = all_boxed(gold)
    if len(boxes) > 1:
        between = re.split(r"\\(?:boxed|fbox)\s*\{", gold)[1:]
        gaps = [part.split("}", 1)[-1] for part in between[:-1]]
        if all(
            re.fullmatch(r"[\s,;$\\()]*(?:[A-Za-z]+\s+)?(?:and|\\quad|\\text\{\s*and\s*\})?[\s,;$\\()]*", g)
            for g in gaps
        ):
            return ", ".join(boxes)
    if "\\boxed" in gold or "answer" in gold.lower():
        answer, _ = extract_answer(gold)
        if answer:  # a percentage stays one: "$\\boxed{20}$ percent" expects 20%
            return answer + ("\\%" if re.match(r"\$?\s*(?:\\%|%|percent)", after_final(gold)) else "")
    return gold.strip()


def grade(row: dict, verifier: MathVerifier | None = None) -> tuple[bool, str]:
    verifier = verifier or MathVerifier()
    task = Task("g", "grading", (Message("user", "q"),), answer=reference(row["gold"]), verifier="math")
    sample = Sample(
        task=task, group_id=0, prompt_ids=(1,), completion=Completion((1,), (0.0,), row["prediction"], "stop")
    )
    try:
        result = verifier.score_one(sample)
    except Exception as exc:  # the suite counts a raise as a refusal, and says so
        return False, f"raised {type(exc).__name__}: {exc}"
    return result.score == 1.0, result.reason


def run(rows: list[dict]) -> dict:
    verifier = MathVerifier()
    out = {"equal": 0, "credited": 0, "unequal": 0, "refused": 0, "disagreements": []}
    for row in rows:
        credited, reason = grade(row, verifier)
        key = "equal" if row["equal"] else "unequal"
        out[key] += 1
        if row["equal"] and credited:
            out["credited"] += 1
        elif not row["equal"] and not credited:
            out["refused"] += 1
        else:
            exception = exception_for(row)
            out["disagreements"].append(
                {
                    "gold": row["gold"][-80:],
                    "prediction": row["prediction"][-120:],
                    "suite": key,
                    "verdict": reason[:160],
                    "exception": exception,
                    "origin": row["origin"],
                }
            )
    out["credited_share"] = out["credited"] / max(out["equal"], 1)
    by_contract = sum(1 for d in out["disagreements"] if d["suite"] == "equal" and d["exception"])
    out["refused_by_contract"] = by_contract
    out["credited_share_by_contract"] = out["credited"] / max(out["equal"] - by_contract, 1)
    out["unexplained_unequal_credited"] = sum(
        1 for d in out["disagreements"] if d["suite"] == "unequal" and d["exception"] is None
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true", help="counts only, not each disagreement")
    args = parser.parse_args()
    out = run(load_pairs())
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    if not args.quiet:
        for d in out["disagreements"]:
            mark = f"  [exception: {d['exception']}]" if d["exception"] else ""
            print(f"suite: {d['suite']:8} gold {d['gold']!r}\n    prediction {d['prediction']!r}")
            print(f"    -> {d['verdict']}{mark}")
    print(
        f"pairs called equal: {out['equal']}, credited {out['credited']} ({100 * out['credited_share']:.1f} %); "
        f"{out['refused_by_contract']} refused by a documented contract rule, credited among the rest "
        f"{100 * out['credited_share_by_contract']:.1f} %\n"
        f"pairs called unequal: {out['unequal']}, refused {out['refused']}, credited "
        f"{out['unequal'] - out['refused']} ({out['unexplained_unequal_credited']} not in EXCEPTIONS)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
