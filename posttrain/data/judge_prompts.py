"""What the GRM's judge is asked: the system prompts, the worked examples and the two calls'
messages (the rubric call and a criterion's verdict call). In the data layer, so that the
judge's own training data (`data/judgements.py`) is built in exactly the formats the GRM
(`rewards/grm.py`) asks in.

`examples=False` leaves the worked examples out: a judge post-trained on these formats
(`type: judgements` tasks) needs none, and its prompts are a third as long."""

from __future__ import annotations

import json

JUDGE_SYSTEM = "You are a careful, strict grader of written answers."
# Worked examples as earlier chat turns: a small judge copies the shape of an answer far
# better than it follows a description of it. They open every prompt, so the engine's
# prefix cache computes them once.
_RUBRIC_EXAMPLES = [
    (
        "What is 7 times 8?",
        [
            ("Says that 7 times 8 is 56", "essential", 5),
            ("Shows the multiplication", "optional", 1),
            ("Gives a number other than 56", "pitfall", 5),
        ],
    ),
    (
        "Write a limerick about a cat.",
        [
            ("Is a limerick of five lines", "essential", 5),
            ("Is about a cat", "essential", 4),
            ("Is funny", "important", 2),
            ("Talks about something other than a cat", "pitfall", 3),
        ],
    ),
]
_VERDICT_EXAMPLES = [
    (
        "What is 7 times 8?",
        "7 times 8 is 54.",
        "Says that 7 times 8 is 56",
        "essential",
        {"verdict": "no", "reason": "It says 54."},
    ),
    (
        "Write a limerick about a cat.",
        "There once was a cat named Lou,\nwho slept in a size-seven shoe...",
        "Is about a cat",
        "essential",
        {"verdict": "yes", "reason": "The limerick is about a cat named Lou."},
    ),
    (
        "Write a limerick about a cat.",
        "Dogs bark at the mailman every morning.",
        "Talks about something other than a cat",
        "pitfall",
        {"verdict": "yes", "reason": "It talks about dogs."},
    ),
]


def rubric_messages(task: str, min_criteria: int, max_criteria: int, examples: bool = True) -> tuple[dict, ...]:
    system = (
        f"Write a grading rubric for answers to a task: {min_criteria} to {max_criteria} criteria, each one "
        'short check that an answer passes or fails. kind: "essential" (the answer must do it), "important" '
        '(it should), "optional" (nice to have), or "pitfall" (a mistake to avoid). weight: 1 (minor) to 5 '
        "(crucial). Reply in JSON."
    )
    turns = [{"role": "system", "content": system}]
    for example, criteria in _RUBRIC_EXAMPLES if examples else ():
        rubric = {"criteria": [{"text": t, "kind": k, "weight": w} for t, k, w in criteria]}
        turns += [{"role": "user", "content": f"Task: {example}"}, {"role": "assistant", "content": json.dumps(rubric)}]
    return tuple(turns + [{"role": "user", "content": f"Task: {task}"}])


def _verdict_prompt(task: str, candidate: str, text: str, kind: str) -> str:
    if kind == "pitfall":
        check = f"Mistake to look for: {text}\nDoes the answer make this mistake?"
    else:
        check = f"Check: {text}\nDoes the answer pass this check?"
    return f"Task given to a writer:\n{task}\n\nTheir answer:\n{candidate}\n\n{check}"


def verdict_messages(task: str, candidate: str, criterion, examples: bool = True) -> tuple[dict, ...]:
    """`criterion`: anything with `text` and `kind` (the GRM's `Criterion`)."""
    system = (
        JUDGE_SYSTEM + ' Judge one check at a time. Reply in JSON: {"verdict": "yes" or "no", '
        '"reason": "<one short line>"}.'
    )
    turns = [{"role": "system", "content": system}]
    for example, answer, text, kind, verdict in _VERDICT_EXAMPLES if examples else ():
        turns += [
            {"role": "user", "content": _verdict_prompt(example, answer, text, kind)},
            {"role": "assistant", "content": json.dumps(verdict)},
        ]
    return tuple(
        turns + [{"role": "user", "content": _verdict_prompt(task, candidate, criterion.text, criterion.kind)}]
    )
