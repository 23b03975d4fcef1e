"""Reading judge replies: JSON extraction from messy text, then fallbacks, then
validation into rubric criteria and verdicts. A reply that cannot be read raises
`ParseError` (the GRM retries it). With token logprobs, a verdict's score is the
judge's probability of "yes" at the verdict token (G-Eval style), not only its pick.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from typing import Any

KINDS = ("essential", "important", "optional", "pitfall")


class ParseError(ValueError):
    """A judge reply that does not hold what was asked for."""


@dataclass(frozen=True)
class Criterion:
    text: str
    kind: str  # one of KINDS; for a pitfall, "yes" means the answer makes the mistake
    weight: float


@dataclass(frozen=True)
class Verdict:
    yes: bool  # the judge's pick
    score: float  # c_j in [0, 1]: P(yes) when logprobs came back, else 1.0 / 0.0
    reason: str
    probability: float | None = None


# ---------------------------------------------------------------- JSON out of text

_FENCE = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_json(text: str) -> Any:
    """The first JSON object (or array) in `text`: the whole text, a ```json fence, or a
    balanced {...} span, each also tried after light repairs (trailing commas, single
    quotes, Python literals)."""
    if text is None:
        raise ParseError("empty reply")
    candidates = [text.strip()] + [m.strip() for m in _FENCE.findall(text)] + _balanced_spans(text)
    for candidate in candidates:
        value = _loads(candidate)
        if isinstance(value, (dict, list)):
            return value
    raise ParseError(f"no JSON object in reply: {text[:120]!r}")


def _loads(candidate: str) -> Any:
    if not candidate:
        return None
    try:
        return json.loads(candidate, strict=False)  # control characters inside strings are fine here
    except ValueError:
        pass
    repaired = re.sub(r",\s*([}\]])", r"\1", candidate.replace("\u201c", '"').replace("\u201d", '"'))
    try:
        return json.loads(repaired, strict=False)
    except ValueError:
        pass
    try:  # single quotes, True/False/None
        return ast.literal_eval(repaired)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _balanced_spans(text: str, limit: int = 20) -> list[str]:
    """Substrings from an opening brace to its matching close, quotes respected."""
    spans = []
    for start in (i for i, ch in enumerate(text) if ch in "{["):
        depth, quote, escaped = 0, None, False
        for end in range(start, len(text)):
            ch = text[end]
            if quote:
                escaped = not escaped and ch == "\\"
                if ch == quote and not escaped:
                    quote = None
                continue
            if ch in "\"'":
                quote = ch
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    spans.append(text[start : end + 1])
                    break
        if len(spans) >= limit:
            break
    return spans


# ---------------------------------------------------------------- rubrics


def parse_rubric(text: str, min_criteria: int, max_criteria: int) -> list[Criterion]:
    """Valid, distinct criteria (at most `max_criteria`, the first ones); fewer than
    `min_criteria` is a ParseError."""
    try:
        value = extract_json(text)
        items = value.get("criteria", value.get("rubric")) if isinstance(value, dict) else value
        if not isinstance(items, list):
            raise ParseError("no `criteria` list")
    except ParseError:
        items = _rubric_lines(text or "")
    criteria, seen = [], set()
    for item in items:
        criterion = _criterion(item)
        key = re.sub(r"\W+", " ", criterion.text.lower()).strip() if criterion else None
        if criterion and key not in seen:
            seen.add(key)
            criteria.append(criterion)
    if len(criteria) < min_criteria:
        raise ParseError(f"rubric has {len(criteria)} valid distinct criteria, needs at least {min_criteria}")
    return criteria[:max_criteria]


def _criterion(item: Any) -> Criterion | None:
    if not isinstance(item, dict):
        return None
    text = str(item.get("text") or item.get("criterion") or item.get("description") or "").strip()
    kind = str(item.get("kind") or item.get("type") or "").strip().lower()
    try:
        weight = float(item.get("weight"))
    except (TypeError, ValueError):
        return None
    if len(text) < 3 or kind not in KINDS or not (0 < weight <= 10) or not math.isfinite(weight):
        return None
    return Criterion(" ".join(text.split()), kind, weight)


_KIND_RE = re.compile(r"\b(" + "|".join(KINDS) + r")\b", re.IGNORECASE)


def _rubric_lines(text: str) -> list[dict]:
    """Fallback for prose rubrics: one criterion per line that names a kind and a weight,
    e.g. `1. [essential, 5] Names three colours`."""
    items = []
    for line in text.splitlines():
        kind = _KIND_RE.search(line)
        weight = re.search(r"(?<![\w.])(10|[1-9])(?![\w.])", line[kind.end() :] if kind else "")
        if not kind or not weight:
            continue
        rest = line[kind.end() :]
        body = rest[: weight.start()] + rest[weight.end() :]
        body = re.sub(r"^[\s\]\)\},:;\-\u2013]*(weight)?[\s:=\]\),;\-\u2013]*", "", body, flags=re.IGNORECASE)
        items.append({"text": body.strip(" -:;,.[](){}\"'"), "kind": kind.group(1).lower(), "weight": weight.group(1)})
    return items


# ---------------------------------------------------------------- verdicts

_YES = {"yes", "y", "true", "pass", "passed", "met", "1"}
_NO = {"no", "n", "false", "fail", "failed", "not met", "0"}
_VERDICT_WORD = re.compile(r"\b(not met|yes|no|pass(?:ed)?|fail(?:ed)?|true|false|met)\b", re.IGNORECASE)


def parse_verdict(
    text: str,
    tokens: list[str] | None = None,
    top: list[dict[str, float]] | None = None,
    use_probability: bool = True,
    reason_chars: int = 200,
) -> Verdict:
    """The verdict and its one-line reason; JSON first, else the first yes/no word."""
    try:
        value = extract_json(text)
        if not isinstance(value, dict) or "verdict" not in value:
            raise ParseError("no `verdict` key")
        word, reason = str(value["verdict"]).strip().lower(), str(value.get("reason", ""))
    except ParseError:
        labelled = re.findall(r"verdict\W{0,4}(\w+(?: met)?)", text or "", re.IGNORECASE)
        if len({w.lower() in _YES for w in labelled if w.lower() in _YES | _NO}) > 1:
            raise ParseError(f"two verdicts that differ: {(text or '')[:120]!r}") from None
        match = re.search(r"verdict\W{0,4}(\w+(?: met)?)", text or "", re.IGNORECASE)
        if match is None:  # no labelled verdict: the reply's yes/no words, which must all agree
            words = [w.lower() for w in _VERDICT_WORD.findall(text or "")]
            if len({w in _YES for w in words}) > 1:
                raise ParseError(f"both yes and no, no labelled verdict: {(text or '')[:120]!r}") from None
            match = _VERDICT_WORD.search(text or "")
        if not match:
            raise ParseError(f"no verdict in reply: {(text or '')[:120]!r}") from None
        word, reason = match.group(1).lower(), (text or "")[match.end() :]
    if word not in _YES | _NO:
        raise ParseError(f"verdict {word!r} is not yes or no")
    yes = word in _YES
    reason = " ".join(re.sub(r'^[\s"\',:;.\-]*(reason)?[\s"\':=]*', "", reason, flags=re.IGNORECASE).split())
    reason = reason.rstrip('"}').strip()[:reason_chars] or "(no reason given)"
    probability = value_probability(tokens, top, "verdict", yes_no_class) if use_probability and top else None
    return Verdict(yes, probability if probability is not None else float(yes), reason, probability)


def yes_no_class(continuation: str) -> str | None:
    head = continuation.lstrip(" \"'").lower()
    return "yes" if head.startswith("y") else "no" if head.startswith("n") else None


def value_probability(
    tokens: list[str] | None, top: list[dict[str, float]] | None, key: str, classify, positive: str = "yes"
) -> float | None:
    """P(positive) / P(any class) at the token where the value of `key` starts, from the
    top alternatives the judge considered there; None when they cannot be read."""
    mass = value_mass(tokens, top, key, classify)
    total = sum(mass.values())
    return mass.get(positive, 0.0) / total if total > 0 else None


def value_mass(tokens, top, key: str, classify) -> dict[str, float]:
    """Probability mass per class over the alternatives at the start of `key`'s value."""
    if not tokens or not top or len(tokens) != len(top):
        return {}
    text = "".join(tokens)
    match = re.search(rf'"{re.escape(key)}"\s*:\s*"?', text)
    if not match:
        return {}
    offset, position = 0, match.end()
    for token, alternatives in zip(tokens, top):
        if offset + len(token) > position:
            cut = position - offset  # the value starts `cut` characters into this token
            mass: dict[str, float] = {}
            for alt, logprob in alternatives.items():
                if alt is None or alt[:cut] != token[:cut] or len(alt) <= cut:
                    continue
                label = classify(alt[cut:])
                if label is not None and logprob is not None and logprob > -1e9:
                    mass[label] = mass.get(label, 0.0) + math.exp(logprob)
            return mass
        offset += len(token)
    return {}


# ---------------------------------------------------------------- pairwise choices


@dataclass(frozen=True)
class Choice:
    first: bool  # the judge's pick: answer A (shown first)
    p_first: float  # P(A) over A and B at the choice token when logprobs came back, else 1.0 / 0.0
    reason: str
    probability: float | None = None


def a_b_class(continuation: str) -> str | None:
    """`A` or `B` for an alternative at the choice token (`A`, ` B"`, ...), not a word that
    starts with one of them."""
    head = continuation.lstrip(" \"'")
    if head[:1] in ("A", "B") and not head[1:2].isalpha():
        return head[:1]
    return None


def parse_choice(
    text: str,
    tokens: list[str] | None = None,
    top: list[dict[str, float]] | None = None,
    use_probability: bool = True,
    reason_chars: int = 200,
) -> Choice:
    """A pairwise reply `{"better": "A" | "B", "reason": ...}`: JSON first, else one labelled
    choice (`better: B`); two labelled choices that differ do not read."""
    try:
        value = extract_json(text)
        if not isinstance(value, dict) or "better" not in value:
            raise ParseError("no `better` key")
        said, reason = str(value["better"]).strip(), str(value.get("reason", ""))
    except ParseError:
        labelled = re.findall(r"better\W{0,4}([AB])\b", text or "")
        if not labelled:
            raise ParseError(f"no choice in reply: {(text or '')[:120]!r}") from None
        if len(set(labelled)) > 1:
            raise ParseError(f"two choices that differ: {(text or '')[:120]!r}") from None
        said, reason = labelled[0], ""
    if said not in ("A", "B"):
        raise ParseError(f"choice {said[:20]!r} is not A or B")
    reason = " ".join(reason.split())[:reason_chars] or "(no reason given)"
    probability = value_probability(tokens, top, "better", a_b_class, positive="A") if use_probability and top else None
    first = said == "A"
    return Choice(first, probability if probability is not None else float(first), reason, probability)
