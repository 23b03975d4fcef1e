"""Tasks where reasoning length matters for a small model, with exact scratchpads written
by code, and a train/eval split of each problem space that is disjoint by construction.

- `chain_sum`: add a chain of single-digit numbers (`3 + 5 + 7 + 2 + 4`). The full
  scratchpad keeps a running sum term by term (`3+5=8 8+7=15 ...`), the short one the same
  additions without restating the sum so far (`3+5=8 +7=15 ...`); without one the model
  must add them all at once. The
  quickstart's 4-layer model after its SFT gets 11 % answering directly and 75 % with the
  full scratchpad on held-out chains (bench/RESULTS.md).
- `offset_code`: write `solve(xs) = sum(xs) + k` given one example; finding k takes the
  same running sum, then one subtraction (which the tiny model gets wrong).
- `constant_code`: write `solve(xs) = sum(xs) + k` where k is written as a chain; the
  running sum of the chain is the program's constant.

A task carries its scratchpads in `entry["scratchpads"]` (`{"full": ..., "short": ...}`);
SFT chooses a form per conversation (`think.forms`), and the experts' token budgets then
decide how much each effort thinks. The split: a problem belongs to the eval part when a
hash of its canonical form falls in the eval share, and the code tasks' eval prompts are
also phrased by templates never trained on, so no eval prompt can be a training one.
"""

from __future__ import annotations

import hashlib
import random

SCRATCH_PREFIX = {"full": "Work:", "short": "Short:"}
CODE_COMMENT = "# "  # before a code answer's scratchpad, so that the whole answer is a program
EVAL_SHARE = 8  # one problem in 8 is reserved for eval


def in_eval_part(key: str, share: int = EVAL_SHARE) -> bool:
    """Whether a problem (by its canonical key) is reserved for eval."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % share == 0


def keep(part: str, is_eval: bool) -> bool:
    return part == "all" or (part == "eval") == is_eval


def running_sum(terms: list[int]) -> tuple[list[str], list[int]]:
    """Each step `s+t=s'` of adding the terms in order, and the sums after each step."""
    steps, sums, total = [], [], terms[0]
    for t in terms[1:]:
        steps.append(f"{total}+{t}={total + t}")
        total += t
        sums.append(total)
    return steps, sums


def compact(steps: list[str]) -> list[str]:
    """The running sum without restating the sum so far: `3+5=8 8+7=15` -> `3+5=8 +7=15`.
    Every addition is still written (the term, its result), next to the sum it adds to."""
    return steps[:1] + ["+" + step.split("+", 1)[1] for step in steps[1:]]


def chain_work(terms: list[int]) -> tuple[str, str, int]:
    """(full scratchpad, short scratchpad, total): for 3 + 5 + 7 + 2,
    `3+5=8 8+7=15 15+2=17`, `3+5=8 +7=15 +2=17`, 17. The short one is about 3/4 of the full
    one's tokens, and it fits the high budget for shorter chains only."""
    steps, sums = running_sum(terms)
    return " ".join(steps), " ".join(compact(steps)), sums[-1]


def chain_problems(size: int, seed: int, part: str, min_terms: int, max_terms: int) -> list[tuple[int, ...]]:
    """`size` distinct chains of single-digit terms from the part, in a seeded order."""
    rng, seen, out = random.Random(seed), set(), []
    space = sum(9**n for n in range(min_terms, max_terms + 1))
    available = space if part == "all" else space // EVAL_SHARE * (EVAL_SHARE - 1 if part == "train" else 1)
    if size > available // 2:
        raise ValueError(
            f"chains of {min_terms}-{max_terms} terms have {available} distinct {part} problems: too few to draw {size}"
        )
    while len(out) < size:
        terms = tuple(rng.randint(1, 9) for _ in range(rng.randint(min_terms, max_terms)))
        key = "+".join(map(str, terms))
        if key in seen or not keep(part, in_eval_part(key)):
            continue
        seen.add(key)
        out.append(terms)
    return out


def chain_entry(terms: tuple[int, ...]) -> dict:
    full, short, total = chain_work(list(terms))
    return {"answer": str(total), "scratchpads": {"full": full, "short": short}}


def chain_prompt(terms: tuple[int, ...], instruction: str = "Compute ") -> str:
    return instruction + " + ".join(map(str, terms))


# ---------------------------------------------------------------- offsets as code

# How the example is stated. The last two are held out: eval prompts use templates the
# model never trained on.
OFFSET_TEMPLATES = (
    "solve({xs}) == {y}.",
    "solve({xs}) returns {y}.",
    "For xs = {xs} it returns {y}.",
    "Example: solve({xs}) -> {y}.",
    "It maps {xs} to {y}.",
    "Given solve({xs}) = {y}.",
    "When xs is {xs} the result is {y}.",
    "solve({xs}) gives {y}.",
)
OFFSET_EVAL_TEMPLATES = (6, 7)
OFFSET_INSTRUCTION = "Write solve(xs) = sum(xs) + k. "


def offset_work(xs: list[int], k: int) -> tuple[str, str]:
    """(full, short) scratchpads: the running sum of the example, then k = y - sum."""
    steps, sums = running_sum(xs)
    y = sums[-1] + k
    last = f"{y}-{sums[-1]}={k}"
    return " ".join([*steps, last]), " ".join([*compact(steps), last])


def offset_code(k: int) -> str:
    return f"def solve(xs): return sum(xs) + {k}"


def offset_tasks(size: int, seed: int, part: str) -> list[tuple[str, dict, str]]:
    """(prompt, entry, reference code) of `size` distinct problems of the part."""
    rng, seen, out = random.Random(seed), set(), []
    templates = [i for i in range(len(OFFSET_TEMPLATES)) if keep(part, i in OFFSET_EVAL_TEMPLATES)]
    while len(out) < size:
        xs = [rng.randint(1, 9) for _ in range(rng.randint(3, 5))]
        k, t = rng.randint(0, 9), rng.choice(templates)
        key = f"{t}:{xs}:{k}"
        if key in seen:
            continue
        seen.add(key)
        y = sum(xs) + k
        prompt = OFFSET_INSTRUCTION + OFFSET_TEMPLATES[t].format(xs=xs, y=y)
        full, short = offset_work(xs, k)
        cases = [xs, [], [7], [1, 2, 3, 4, 5, 6], [40, -3]]
        tests = [f"assert solve({c}) == {sum(c) + k}" for c in cases]
        entry = {"entry_point": "solve", "tests": tests, "scratchpads": {"full": full, "short": short}}
        out.append((prompt, entry, offset_code(k)))
    return out


# ---------------------------------------------------------------- a constant the program needs

CONSTANT_TEMPLATES = (
    "Write solve(xs) = sum(xs) + k, where k = {chain}.",
    "Write solve(xs) that returns sum(xs) + k with k = {chain}.",
    "Write solve(xs): the sum of xs plus k, for k = {chain}.",
    "Write solve(xs) returning sum(xs) + ({chain}).",
)
CODE_CASES = ([], [7], [1, 2, 3, 4, 5, 6], [40, -3])


def constant_tasks(size: int, seed: int, part: str) -> list[tuple[str, dict, str]]:
    """(prompt, entry, reference code): `solve(xs) = sum(xs) + k` where k is written as a
    chain of 4-6 single-digit terms, which the program needs as one number. Thinking finds
    it as in the general domain (the same running sums), and the scratchpad's result
    becomes the program's constant; without one the model adds the chain at once. Chains
    are split between train and eval by the chains' own hash, so no eval chain is in any
    training part."""
    rng = random.Random(seed + 7919)
    out = []
    for terms in chain_problems(size, seed, part, 4, 6):
        full, short, total = chain_work(list(terms))
        prompt = rng.choice(CONSTANT_TEMPLATES).format(chain=" + ".join(map(str, terms)))
        tests = [f"assert solve({c}) == {sum(c) + total}" for c in CODE_CASES]
        entry = {"entry_point": "solve", "tests": tests, "scratchpads": {"full": full, "short": short}}
        out.append((prompt, entry, offset_code(total)))
    return out
