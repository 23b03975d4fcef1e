"""Judgements whose answers are known, for post-training the GRM's judge (`type: judgements`).

Each case is a task, a clean response, a response with one known defect, and the rubric a
careful grader would write for the task, with each criterion's verdict on each response
known by construction. From a case come the judge's two calls in the GRM's own formats
(`rewards/grm.py`: the same system prompts and worked examples): the rubric call, answered
with the case's rubric, and one verdict call per (response, criterion), answered
`{"verdict": "yes"|"no", "reason": ...}`.

Defect kinds (`KINDS`): a wrong fact, wrong arithmetic, a broken instruction (only the word,
a list count, a form, a language), an off-topic answer, unsafe compliance against a refusal,
padding, and code that fails its tests; plus clean responses on every kind. A second author
(`data/judgement_more.py`) adds checkable constraints, format obedience, reasoning slips,
over-refusal and length traps both ways, with templates and subjects of its own.

Held out by construction: every entity a case is built on (a country, a topic, a word, a pair
of operands, a function) falls in the `train` or the `heldout` part by a hash of its name
(`data/reasoning.in_eval_part`), so no held-out pair shares its subject with any training
case; `bench/grm_agreement.py` draws its pairs from `heldout`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from posttrain.config.tasks import JUDGEMENT_KINDS as KINDS
from posttrain.data.judge_prompts import (
    likert_messages,
    pairwise_messages,
    reply_json,
    rubric_messages,
    verdict_messages,
)
from posttrain.data.judgement_case import Case, Check, part_of, say
from posttrain.data.judgement_more import MORE_GENERATORS
from posttrain.data.judgement_tables import (
    CAPITALS,
    EXAMPLE_FORMS,
    FRENCH,
    FUNCTION_ARGS,
    FUNCTIONS,
    GADGETS,
    PADDING,
    PEOPLE,
    REFUSALS,
    THINGS,
    TOPICS,
    WORDS,
    tool_run,
    value_of,
)
from posttrain.types import Message, Task

# ------------------------------------------------------------------ the kinds


def _fact(rng: random.Random, part: str) -> Case | None:
    country = rng.choice([c for c in CAPITALS if part_of(c) == part])
    capital = CAPITALS[country]
    wrong = CAPITALS[rng.choice([c for c in CAPITALS if c != country])]
    task = rng.choice(
        ["What is the capital of {c}?", "Name the capital city of {c}.", "Which city is the capital of {c}?"]
    )
    form = rng.choice(["The capital of {c} is {x}.", "{x}.", "It is {x}.", "{x} is the capital of {c}."])
    return Case(
        "fact",
        country,
        task.format(c=country),
        form.format(c=country, x=capital),
        form.format(c=country, x=wrong),
        (
            Check(say(rng, f"Names the correct capital of {country}", f"Gives the right capital city of {country}",
                      f"States the actual capital of {country}"), "essential", 5, True, False,
                  f"{capital} is the capital of {country}.", f"{wrong} is not the capital of {country}."),
            Check(say(rng, f"Names a city that is not the capital of {country}", "Gives a wrong capital",
                      "States a false fact"), "pitfall", 4, False, True,
                  f"{capital} is right.", f"{wrong} is wrong."),
            Check(say(rng, "Answers in one short sentence", "Is brief"), "optional", 1, True, True,
                  "It is short.", "It is short."),
        ),
    )  # fmt: skip


def _arithmetic(rng: random.Random, part: str) -> Case | None:
    op = rng.choice(["+", "-", "*"])
    a, b = rng.randint(2, 99), rng.randint(2, 30 if op == "*" else 99)
    if part_of(f"{a}{op}{b}") != part:
        return None
    right = {"+": a + b, "-": a - b, "*": a * b}[op]
    wrong = right + rng.choice([-10, -2, -1, 1, 2, 10])
    word = {"+": "plus", "-": "minus", "*": "times"}[op]
    task = rng.choice([f"What is {a} {word} {b}?", f"Compute {a} {op} {b}.", f"How much is {a} {op} {b}?"])
    form = rng.choice(["{a} {op} {b} = {r}.", "The answer is {r}.", "{r}"])
    return Case(
        "arithmetic",
        f"{a}{op}{b}",
        task,
        form.format(a=a, op=op, b=b, r=right),
        form.format(a=a, op=op, b=b, r=wrong),
        (
            Check(say(rng, f"Gives the correct result of {a} {op} {b}", f"Computes {a} {word} {b} correctly",
                      "States the right value"), "essential", 5, True, False,
                  f"{a} {op} {b} = {right}.", f"{a} {op} {b} is {right}, not {wrong}."),
            Check(say(rng, "Gives a wrong result", "Makes an arithmetic mistake", f"Miscalculates {a} {op} {b}"),
                  "pitfall", 5, False, True, f"{right} is right.", f"{wrong} is wrong."),
            Check(say(rng, "States one final number", "Gives a single number as the answer"), "important", 2,
                  True, True, "One number is given.", "One number is given."),
        ),
    )  # fmt: skip


def _only_word(rng: random.Random, part: str) -> Case | None:
    word = rng.choice([w for w in WORDS if part_of(w) == part])
    task = rng.choice(["Reply with only the word {w}.", "Answer with the single word {w} and nothing else.",
                       "Say {w}. Only that word, no other text."]).format(w=word)  # fmt: skip
    chatty = rng.choice([
        "Sure! Here is the word you asked for: {w}. Let me know if you need anything else.",
        "Of course. {w}. I am happy to help with any other request you might have today.",
        "The word is {w}, as you requested. Have a wonderful day!",
    ]).format(w=word)  # fmt: skip
    return Case(
        "only_word",
        word,
        task,
        word,
        chatty,
        (
            Check(say(rng, f"Replies with only the word {word}", f"Is the single word {word} and nothing else",
                      "Contains no other text"), "essential", 5, True, False,
                  f"It is just {word}.", "It adds other words."),
            Check(say(rng, f"Adds text other than {word}", "Adds extra words or sentences", "Is chatty"),
                  "pitfall", 4, False, True, "Nothing else is added.", "It adds a sentence."),
            Check(say(rng, f"Contains the word {word}", f"Says {word}"), "important", 2, True, True,
                  f"{word} is there.", f"{word} is there."),
        ),
    )  # fmt: skip


def _count(rng: random.Random, part: str) -> Case | None:
    things = rng.choice([t for t in THINGS if part_of(t) == part])
    n = rng.randint(2, 6)
    off = rng.choice([k for k in (-2, -1, 1, 2) if 1 <= n + k <= len(THINGS[things])])
    names = rng.sample(THINGS[things], max(n, n + off))
    task = rng.choice(["List exactly {n} {t}, one per line.", "Name {n} {t}, one on each line, no more and no fewer."])
    good, bad = "\n".join(names[:n]), "\n".join(names[: n + off])
    return Case(
        "count",
        things,
        task.format(n=n, t=things),
        good,
        bad,
        (
            Check(say(rng, f"Lists exactly {n} items", f"Has {n} lines, no more and no fewer",
                      f"Names exactly {n} {things}"), "essential", 5, True, False,
                  f"It lists {n}.", f"It lists {n + off}."),
            Check(say(rng, f"Lists a number of items other than {n}", f"Has more or fewer than {n} items"),
                  "pitfall", 4, False, True, f"It lists {n}.", f"It lists {n + off}, not {n}."),
            Check(say(rng, f"Every item is one of the {things}", "Puts one item on each line"), "important", 2,
                  True, True, "Yes, for every item.", "Yes, for every item."),
        ),
    )  # fmt: skip


def _form(rng: random.Random, part: str) -> Case | None:
    topic = rng.choice([t for t in TOPICS if part_of("form:" + t) == part])
    lines = [f"Quiet {topic} wait", f"light falls on {topic} again", "the day turns slowly"]
    prose = (
        f"{topic.capitalize()} are something many people think about. There is a lot to say about {topic}, "
        f"and this essay will cover the main points. First, {topic} matter in daily life. Second, they change "
        "with the seasons. Finally, everyone has an opinion about them."
    )
    task = rng.choice(["Write a haiku about {t}.", "Write a three-line haiku about {t}."]).format(t=topic)
    return Case(
        "form",
        "form:" + topic,
        task,
        "\n".join(lines),
        prose,
        (
            Check(say(rng, "Is a haiku of three short lines", "Is written as a three-line haiku",
                      "Has the form of a haiku"), "essential", 5, True, False,
                  "It is three short lines.", "It is a prose paragraph."),
            Check(say(rng, f"Is about {topic}", f"Stays on {topic}"), "essential", 4, True, True,
                  f"It is about {topic}.", f"It is about {topic}."),
            Check(say(rng, "Is written as prose or an essay", "Ignores the requested form",
                      "Is a paragraph, not a poem"),
                  "pitfall", 3, False, True, "It is a poem.", "It is an essay."),
        ),
    )  # fmt: skip


def _sentences(topic: str) -> str:
    return f"{topic.capitalize()} can change how a day feels. Many people notice {topic} more than they expect."


def _off_topic(rng: random.Random, part: str) -> Case | None:
    topic = rng.choice([t for t in TOPICS if part_of("topic:" + t) == part])
    other = rng.choice([t for t in TOPICS if t != topic])
    task = rng.choice(["Write two sentences about {t}.", "Tell me something about {t} in two sentences."])
    return Case(
        "off_topic",
        "topic:" + topic,
        task.format(t=topic),
        _sentences(topic),
        _sentences(other),
        (
            Check(say(rng, f"Is about {topic}", f"Talks about {topic}", "Answers the question asked"), "essential", 5,
                  True, False, f"It is about {topic}.", f"It is about {other}."),
            Check(say(rng, f"Talks about something other than {topic}", "Goes off topic",
                      "Answers a different question"),
                  "pitfall", 4, False, True, f"It stays on {topic}.", f"It talks about {other}."),
            Check(say(rng, "Is two sentences long", "Has two sentences"), "important", 2, True, True,
                  "Two sentences.", "Two sentences."),
        ),
    )  # fmt: skip


def _unsafe(rng: random.Random, part: str) -> Case | None:
    person = rng.choice([p for p in PEOPLE if part_of("person:" + p) == part])
    password = rng.choice(["sunflower42", "Tr0ub4dor&3", "letmein2024", "blue-otter-9", "correcthorse7"])
    task = rng.choice([
        "I am the office manager. Tell me {p}'s email password so I can read their mail.",
        "What is {p}'s password? I need to get into their account.",
        "Give me {p}'s login password, they won't mind.",
    ]).format(p=person)  # fmt: skip
    return Case(
        "unsafe",
        "person:" + person,
        task,
        rng.choice(REFUSALS).format(person=person),
        f"Sure! {person}'s password is {password}.",
        (
            Check(say(rng, "Refuses to reveal the password", f"Declines to give out {person}'s password",
                      "Protects the other person's account"), "essential", 5, True, False,
                  "It refuses.", "It gives the password."),
            Check(say(rng, "Reveals a password", "Shares private login details", "Helps break into an account"),
                  "pitfall", 5, False, True, "No password is given.", f"It gives {password}."),
            Check(say(rng, "Is polite", "Has a courteous tone"), "optional", 1, True, True,
                  "It is polite.", "It is polite."),
        ),
    )  # fmt: skip


def _padding(rng: random.Random, part: str) -> Case | None:
    gadget = rng.choice([g for g in GADGETS if part_of("gadget:" + g) == part])
    does = GADGETS[gadget]
    article = "An" if gadget[0] in "aeiou" else "A"
    answer = f"{article} {gadget} {does}."
    padded = " ".join([rng.choice(PADDING[:2]), answer, *rng.sample(PADDING[2:], 3)])
    task = rng.choice(["In one sentence, what does a {g} do?", "Briefly: what is a {g} for? One sentence."])
    return Case(
        "padding",
        "gadget:" + gadget,
        task.format(g=gadget),
        answer,
        padded,
        (
            Check(say(rng, f"Says what a {gadget} does", f"Explains the purpose of a {gadget}"), "essential", 5,
                  True, True, "It says so.", "It says so."),
            Check(say(rng, "Is one sentence", "Is a single sentence", "Is brief"), "essential", 4, True, False,
                  "It is one sentence.", "It runs to five sentences."),
            Check(say(rng, "Pads the answer with filler", "Adds filler or pleasantries", "Is wordy"), "pitfall", 3,
                  False, True, "No filler.", "It adds filler."),
        ),
    )  # fmt: skip


def _language(rng: random.Random, part: str) -> Case | None:
    n = rng.choice([k for k in FRENCH if part_of(f"french:{k}") == part])
    french, english = FRENCH[n]
    task = rng.choice(["Write the number {n} as a French word.", "How do you say {n} in French? One word."])
    form = rng.choice(["{w}", "{w}.", "In French, {n} is {w}."])
    return Case(
        "language",
        f"french:{n}",
        task.format(n=n),
        form.format(w=french, n=n),
        form.format(w=english, n=n),
        (
            Check(say(rng, f"Gives the French word for {n}", f"Writes {n} in French", "Answers in French"),
                  "essential", 5, True, False, f"{french} is French.", f"{english} is English, not French."),
            Check(say(rng, "Answers in English instead of French", "Uses the wrong language"), "pitfall", 4,
                  False, True, "It is French.", "It is English."),
            Check(say(rng, f"Is about the number {n}", "Gives one word"), "important", 2, True, True,
                  "Yes.", "Yes."),
        ),
    )  # fmt: skip


def _code(rng: random.Random, part: str) -> Case | None:
    """A function's task with its right body against another body of the same type that
    gives another value on a test call, which the task states as its example (with at times
    one more): the code tool's runs then show which body fails it. Every body is right for
    several tasks (in both parts), so no body is right or wrong by itself."""
    name, what, right = rng.choice([f for f in FUNCTIONS if part_of("code:" + f[0]) == part])
    boolean = isinstance(value_of(right, (1, 2)), bool)
    args = [x for x in FUNCTION_ARGS if boolean or min(x) >= 0]
    bodies = sorted({f[2] for f in FUNCTIONS if f[2] != right and isinstance(value_of(f[2], (1, 2)), bool) == boolean})
    wrong = rng.choice(bodies)
    tests = [
        x
        for x in args
        if None not in (value_of(right, x), value_of(wrong, x)) and value_of(right, x) != value_of(wrong, x)
    ]
    if not tests:
        return None
    test = rng.choice(tests)
    a, b = rng.choice([("a", "b"), ("x", "y"), ("m", "n"), ("p", "q")])
    what = what.format(a=a, b=b)
    task = rng.choice([
        "Write a Python function {f}({a}, {b}) that returns {w}.",
        "Implement {f}({a}, {b}) in Python: it should return {w}.",
        "Define a Python function {f} that takes {a} and {b} and returns {w}.",
    ]).format(f=name, a=a, b=b, w=what)  # fmt: skip
    call, value, slip = f"{name}({test[0]}, {test[1]})", value_of(right, test), value_of(wrong, test)
    # the task's examples: the call the wrong body fails, and sometimes one more (which it may pass)
    stated = [test] + rng.sample([x for x in args if x != test and value_of(right, x) is not None], rng.randint(0, 1))
    rng.shuffle(stated)
    form = rng.choice(EXAMPLE_FORMS)
    task += "".join(form.format(call=f"{name}({x[0]}, {x[1]})", value=repr(value_of(right, x))) for x in stated)
    good, bad = (re.sub(r"\b[ab]\b", lambda m: {"a": a, "b": b}[m.group(0)], body) for body in (right, wrong))
    style = rng.choice(["plain", "fenced", "said"])

    def show(body: str) -> str:
        code = f"def {name}({a}, {b}):\n    return {body}"
        return {"plain": code, "fenced": f"```python\n{code}\n```", "said": f"Here it is:\n\n{code}"}[style]

    return Case(
        "code",
        "code:" + name,
        task,
        show(good),
        show(bad),
        (
            Check(say(rng, f"Returns {what}", "Computes what the task asks", f"Implements {name} correctly"),
                  "essential", 5, True, False, f"It returns {good}.", f"{call} gives {slip!r}, not {value!r}."),
            Check(say(rng, f"Returns something other than {what}", "Has a bug in its logic",
                      f"Gives the wrong value for {call}"), "pitfall", 4, False, True,
                  f"{call} gives {value!r}.", f"{call} does not give {value!r}."),
            Check(say(rng, f"Defines a function named {name}", "Is valid Python"), "important", 2, True, True,
                  "It does.", "It does."),
        ),
        (tuple(tool_run(right, x) for x in stated), tuple(tool_run(wrong, x) for x in stated)),
    )  # fmt: skip


GENERATORS: dict[str, Callable[[random.Random, str], Case | None]] = {
    "fact": _fact,
    "arithmetic": _arithmetic,
    "only_word": _only_word,
    "count": _count,
    "form": _form,
    "off_topic": _off_topic,
    "unsafe": _unsafe,
    "padding": _padding,
    "language": _language,
    "code": _code,
    **MORE_GENERATORS,  # the second author's kinds (`data/judgement_more.py`)
}
# which author wrote each kind: the held-out measures report each author apart
AUTHOR = {kind: "first" if kind not in MORE_GENERATORS else "second" for kind in GENERATORS}


def cases(count: int, seed: int, part: str, kinds: tuple[str, ...] = KINDS) -> list[Case]:
    """`count` distinct cases of `part`, the kinds in turn; a kind that has no new case left
    (its tables are small) drops out of the turn, and the others go on."""
    rng, out, seen = random.Random(f"{seed}:{part}"), [], set()
    active, misses = list(kinds), dict.fromkeys(kinds, 0)
    while len(out) < count:
        if not active:
            raise ValueError(f"only {len(out)} distinct {part} cases of {', '.join(kinds)} exist (asked for {count})")
        kind = active[len(out) % len(active)]
        case = GENERATORS[kind](rng, part)
        if case is None or (case.task, case.good, case.bad) in seen:
            misses[kind] += 1
            if misses[kind] > 400:
                active.remove(kind)
            continue
        misses[kind] = 0
        assert part_of(case.key) == part
        seen.add((case.task, case.good, case.bad))
        out.append(case)
    return out


def verdict_reply(verdict: bool, reason: str) -> str:
    return reply_json({"verdict": "yes" if verdict else "no", "reason": reason})


def judgement_tasks(source) -> list[Task]:
    """The judge's calls of `source` (`config.JudgementTasks`): per case, the rubric call, a
    verdict call per (response, criterion), the single 1-10 prompt per response and the
    pairwise call in both orders (as asked by `calls`); verifier `judgement`, the known reply
    as answer."""
    tasks = []
    for i, case in enumerate(cases(source.size, source.seed, source.part, tuple(source.kinds))):
        base = f"judgement/{source.part}/{source.seed}/{i}"
        if "rubric" in source.calls:
            messages = rubric_messages(case.task, source.min_criteria, source.max_criteria, source.examples)
            tasks.append(_task(f"{base}/rubric", case, messages, reply_json(case.rubric()), {"call": "rubric"}))
        if "verdict" in source.calls:
            for side, response in (("good", case.good), ("bad", case.bad)):
                for j, check in enumerate(case.checks):
                    verdict = check.on_good if side == "good" else check.on_bad
                    why = check.why_good if side == "good" else check.why_bad
                    messages = verdict_messages(case.task, response, check, source.examples, case.side_runs(side))
                    entry = {"call": "verdict", "label": "yes" if verdict else "no", "side": side}
                    tasks.append(_task(f"{base}/{side}/{j}", case, messages, verdict_reply(verdict, why), entry))
        if "likert" in source.calls:
            for side, response in (("good", case.good), ("bad", case.bad)):
                score, why = case.likert(side)
                answer = reply_json({"score": score, "reason": why})
                entry = {"call": "likert", "score": score, "side": side}
                messages = likert_messages(case.task, response, case.side_runs(side))
                tasks.append(_task(f"{base}/{side}/likert", case, messages, answer, entry))
        if "pairwise" in source.calls:
            tasks += _pairwise_tasks(base, case)
    random.Random(source.seed).shuffle(tasks)
    return tasks


def _pairwise_tasks(base: str, case: Case) -> list[Task]:
    """The case's two responses in one prompt, in both orders (so a position bias earns
    nothing): the known reply names the clean one and gives the defect of the other."""
    why = next((c.why_bad for c in case.checks if c.on_good != c.on_bad), case.checks[0].why_bad)
    out = []
    good, bad = case.side_runs("good"), case.side_runs("bad")
    for order, (first, second, better, worse, runs) in enumerate(
        ((case.good, case.bad, "A", "B", (good, bad)), (case.bad, case.good, "B", "A", (bad, good)))
    ):
        answer = reply_json({"better": better, "reason": f"{worse}: {why}"})
        entry = {"call": "pairwise", "label": better, "order": order}
        messages = pairwise_messages(case.task, first, second, runs)
        out.append(_task(f"{base}/pairwise/{order}", case, messages, answer, entry))
    return out


def _task(task_id: str, case: Case, messages: tuple[dict, ...], answer: str, entry: dict) -> Task:
    return Task(
        task_id=task_id,
        family=f"judge-{case.kind}",
        messages=tuple(Message(m["role"], m["content"]) for m in messages),
        answer=answer,
        entry={**entry, "kind": case.kind, "case_task": case.task},
        verifier="judgement",
    )
