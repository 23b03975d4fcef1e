"""Tasks where reasoning length matters for a small model, with exact scratchpads written
by code, and a train/eval split of each problem space that is disjoint by construction.

- `long_arithmetic`: a + b or a - b with 3-5 digit operands. The full scratchpad works
  column by column from the right with carries (or borrows); the short one writes the
  carries only; without one the model must answer directly.
- `linear_code`: write `solve(n)`, a linear function given by two of its values. The full
  scratchpad computes the slope and intercept step by step; the short one the two results.

A task carries its scratchpads in `entry["scratchpads"]` (`{"full": ..., "short": ...}`);
SFT chooses a form per conversation (`think.forms`), and the experts' token budgets then
decide how much each effort thinks. The split: a problem belongs to the eval part when a
hash of its canonical form falls in the eval share (arithmetic), or when its prompt
template is one of the held-out templates (code), so no eval prompt can be a training one.
"""

from __future__ import annotations

import hashlib
import random

FORMS = ("full", "short", "none")
SCRATCH_PREFIX = {"full": "Work:", "short": "Short:"}
EVAL_SHARE = 8  # one problem in 8 is reserved for eval


def in_eval_part(key: str, share: int = EVAL_SHARE) -> bool:
    """Whether a problem (by its canonical key) is reserved for eval."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % share == 0


def keep(part: str, is_eval: bool) -> bool:
    return part == "all" or (part == "eval") == is_eval


# ---------------------------------------------------------------- long arithmetic


def _digits(n: int) -> list[int]:
    return [int(c) for c in reversed(str(n))]


def column_work(a: int, b: int, op: str) -> tuple[str, str, int]:
    """(full scratchpad, short scratchpad, result) of `a op b`, a >= b >= 0 for '-'.

    full, for 4721 + 385:  `1+5=6 2+8=10 7+3+1=11 4+0+1=5`   (right to left, carry added)
    full, for 4721 - 385:  `11-0-5=6 12-1-8=3 7-1-3=3 4-0-0=4` (10 borrowed where needed)
    short: the carries (borrows) into each column, right to left: `0 0 1 1` / `0 1 1 0`
    """
    da, db = _digits(a), _digits(b)
    width = max(len(da), len(db))
    da += [0] * (width - len(da))
    db += [0] * (width - len(db))
    steps, carries, carry = [], [], 0
    for x, y in zip(da, db):
        carries.append(carry)
        if op == "+":
            total = x + y + carry
            steps.append(f"{x}+{y}" + (f"+{carry}" if carry else "") + f"={total}")
            carry = total // 10
        else:
            borrow = 1 if x - carry - y < 0 else 0
            top = x + 10 * borrow
            steps.append(f"{top}-{carry}-{y}={top - carry - y}")
            carry = borrow
    result = a + b if op == "+" else a - b
    return " ".join(steps), " ".join(map(str, carries)), result


def arithmetic_problem(rng: random.Random, min_digits: int, max_digits: int, ops: list[str]) -> tuple[int, str, int]:
    op = rng.choice(ops)
    a = rng.randint(10 ** (min_digits - 1), 10 ** rng.randint(min_digits, max_digits) - 1)
    b = rng.randint(10 ** (min_digits - 1), 10 ** rng.randint(min_digits, max_digits) - 1)
    if op == "-" and b > a:
        a, b = b, a
    return a, op, b


def arithmetic_problems(
    size: int, seed: int, part: str, min_digits: int, max_digits: int, ops: list[str]
) -> list[tuple[int, str, int]]:
    """`size` distinct problems of the part, in a seeded order (the seed picks which)."""
    rng, seen, out = random.Random(seed), set(), []
    attempts = 0
    while len(out) < size:
        attempts += 1
        if attempts > 50 * size + 1000:
            raise ValueError(f"cannot find {size} distinct {part} problems of {min_digits}-{max_digits} digits")
        a, op, b = arithmetic_problem(rng, min_digits, max_digits, ops)
        key = f"{a}{op}{b}"
        if key in seen or not keep(part, in_eval_part(key)):
            continue
        seen.add(key)
        out.append((a, op, b))
    return out


def arithmetic_entry(a: int, op: str, b: int) -> dict:
    full, short, result = column_work(a, b, op)
    return {"answer": str(result), "scratchpads": {"full": full, "short": short}}


# ---------------------------------------------------------------- linear functions as code

# How two values of the function are stated. The last two are held out: eval prompts use
# templates the model never trained on.
LINEAR_TEMPLATES = (
    "solve({x1}) returns {y1} and solve({x2}) returns {y2}.",
    "solve({x1}) == {y1}, solve({x2}) == {y2}.",
    "For n = {x1} it returns {y1}; for n = {x2} it returns {y2}.",
    "Examples: solve({x1}) -> {y1}, solve({x2}) -> {y2}.",
    "It maps {x1} to {y1} and {x2} to {y2}.",
    "Given solve({x1}) = {y1} and solve({x2}) = {y2}.",
    "When n is {x1} the result is {y1}, and when n is {x2} it is {y2}.",
    "solve({x1}) gives {y1}; solve({x2}) gives {y2}.",
)
LINEAR_EVAL_TEMPLATES = (6, 7)
LINEAR_INSTRUCTION = "Write solve(n) = a * n + b. "


def linear_problem(rng: random.Random) -> tuple[int, int, int, int]:
    """(slope, intercept, x1, x2): small numbers, so each step is one a small model can do."""
    a, b = rng.randint(1, 9), rng.randint(0, 19)
    x1 = rng.randint(0, 6)
    return a, b, x1, x1 + rng.randint(1, 3)


def linear_work(a: int, b: int, x1: int, x2: int) -> tuple[str, str]:
    """(full, short) scratchpads: slope from the two values, then the intercept."""
    y1, y2 = a * x1 + b, a * x2 + b
    full = f"{y2}-{y1}={y2 - y1} {x2}-{x1}={x2 - x1} {y2 - y1}/{x2 - x1}={a} {a}*{x1}={a * x1} {y1}-{a * x1}={b}"
    return full, f"{y2 - y1}/{x2 - x1}={a} {y1}-{a * x1}={b}"


def linear_code(a: int, b: int) -> str:
    return f"def solve(n):\n    return {a} * n + {b}\n"


def linear_tasks(size: int, seed: int, part: str) -> list[tuple[str, dict, str, str]]:
    """(prompt, entry, reference code, problem key) of `size` distinct problems of the part."""
    rng, seen, out = random.Random(seed), set(), []
    templates = [i for i in range(len(LINEAR_TEMPLATES)) if keep(part, i in LINEAR_EVAL_TEMPLATES)]
    space = 9 * 20 * 7 * 3 * len(templates)
    if size > space:
        raise ValueError(f"linear_code has {space} distinct {part} problems, not {size}")
    while len(out) < size:
        a, b, x1, x2 = linear_problem(rng)
        t = rng.choice(templates)
        key = f"{t}:{a},{b},{x1},{x2}"
        if key in seen:
            continue
        seen.add(key)
        y1, y2 = a * x1 + b, a * x2 + b
        prompt = LINEAR_INSTRUCTION + LINEAR_TEMPLATES[t].format(x1=x1, y1=y1, x2=x2, y2=y2)
        full, short = linear_work(a, b, x1, x2)
        tests = [f"assert solve({n}) == {a * n + b}" for n in dict.fromkeys((x1, x2, 0, 7, 11, 25))]
        entry = {"entry_point": "solve", "tests": tests, "scratchpads": {"full": full, "short": short}}
        out.append((prompt, entry, linear_code(a, b), key))
    return out
