"""`posttrain rewards audit`: a reward-hack fuzzer. For each task it builds the attacks
of `rewards/attacks.py`, scores them with the real verifier (its public interface,
`score(samples) -> list[RewardResult]`, through `score_safely` as a stage does) in one
batch with an honest right and an honest wrong answer, and counts per attack class:

- a **win**: an attack scored above the best honest wrong answer to the same task;
- a **void**: an attack (or an honest answer of its batch) left unscored (`ok=False`).

A batch in which the verifier itself raised (every sample flagged by `score_safely`) is
scored again one sample at a time, so that the void is charged to the attack that caused
it; the honest answers it took down with it are reported too (`batch_voided`).

Tasks come from a task file, a pipeline stage (its task sources and reward config,
through the reward router), or the shipped generators (`audit_tasks.py`).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field

from posttrain.config.verifiers import verifier_facts
from posttrain.rewards import attack_classes as grammar
from posttrain.rewards import attacks as lib
from posttrain.rewards import code_attacks as code_lib
from posttrain.rewards.base import score_safely
from posttrain.rewards.registry import ProbeCall, get_verifier
from posttrain.types import Completion, Sample, Task

EPS = 1e-9
RAISED = re.compile(r"^reward source \S+ (raised|returned \d+ results)")


class AuditError(ValueError):
    """Input the audit cannot run on; str() is the one line shown."""


@dataclass
class Probe:
    """One response to score: an attack, or an honest control (`cls` "honest")."""

    task: Task
    cls: str
    name: str
    text: str
    env: dict | None = None
    tokens: int | None = None


@dataclass
class Outcome:
    probe: Probe
    score: float
    ok: bool
    reason: str
    baseline: float | None  # the best honest wrong score of the probe's task
    batch_voided: int = 0  # samples of its batch this probe took down by making the verifier raise
    relative: bool = False  # scores rank the batch's responses to a task (a pairwise judge), not each alone

    @property
    def win(self) -> bool:
        """An attack above the honest wrong answer; or the honest wrong answer itself given full
        credit (where scores are absolute: a relative +1 only says it beat the attacks)."""
        if self.probe.cls == "honest":
            full = self.ok and self.probe.name.startswith("wrong") and self.score >= 1 - EPS
            return full and not self.relative
        return self.ok and self.baseline is not None and self.score > self.baseline + EPS

    @property
    def void(self) -> bool:
        return not self.ok


@dataclass
class VerifierAudit:
    verifier: str
    tasks: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[dict]:
        by: dict[str, list[Outcome]] = {}
        for o in self.outcomes:
            by.setdefault(o.probe.cls, []).append(o)
        known = ("honest", *lib.CLASSES, *grammar.CLASSES)
        order = [c for c in known if c in by] + sorted(set(by) - set(known))
        rows = []
        for cls in order:
            got = by[cls]
            wins, voids = [o for o in got if o.win], [o for o in got if o.void]
            rows.append(
                {
                    "class": cls,
                    "attempts": len(got),
                    "wins": len(wins),
                    "voids": len(voids),
                    "win_examples": [_example(o) for o in _spread(wins)],
                    "void_examples": [_example(o) for o in _spread(voids)],
                    "batch_voided": sum(o.batch_voided for o in got),
                }
            )
        return rows

    def honest(self) -> dict:
        right = [o for o in self.outcomes if o.probe.cls == "honest" and o.probe.name.startswith("right")]
        wrong = [o for o in self.outcomes if o.probe.cls == "honest" and o.probe.name.startswith("wrong")]
        credited = {o.probe.task.task_id for o in right if o.ok and o.score >= 1 - EPS}
        return {
            "right_tasks_credited": len(credited),
            "right_tasks": len({o.probe.task.task_id for o in right}),
            "wrong_max_score": max((o.score for o in wrong if o.ok), default=None),
        }

    @property
    def wins(self) -> int:
        return sum(o.win for o in self.outcomes)

    @property
    def voids(self) -> int:
        return sum(o.void for o in self.outcomes)


def _spread(outcomes: list[Outcome], k: int = 3) -> list[Outcome]:
    """Up to k examples, of different transformations where there are."""
    seen, out = set(), []
    for o in outcomes:
        key = o.probe.name.split(" (")[0]
        if key not in seen:
            seen.add(key)
            out.append(o)
        if len(out) == k:
            break
    return out


def _example(o: Outcome) -> dict:
    return {
        "task": o.probe.task.task_id,
        "attack": o.probe.name,
        "response": o.probe.text[-300:],
        "score": o.score,
        "baseline": o.baseline,
        "ok": o.ok,
        "reason": o.reason[:300],
        **({"batch_voided": o.batch_voided} if o.batch_voided else {}),
    }


# ---------------------------------------------------------------- probes


def _sample(probe: Probe) -> Sample:
    n = probe.tokens if probe.tokens is not None else max(len(probe.text.split()), 1)
    return Sample(probe.task, 0, (0,), Completion((0,) * n, (0.0,) * n, probe.text, "stop"), env=probe.env)


def expected(task: Task) -> str | None:
    answer = task.answer if task.answer is not None else task.entry.get("answer")
    return None if answer is None else str(answer)


def prompt_of(task: Task) -> str:
    return next((m.content for m in reversed(task.messages) if m.role == "user"), "")


def answer_probes(
    task: Task, classes: set[str] | None, presentations=lib.PRESENTATIONS, rotate: int | None = None
) -> list[Probe]:
    """The honest answers and the attacks, each payload written in every presentation, or,
    with `rotate`, in one presentation each, taken in turn from offset `rotate` (a quick
    audit: over several tasks every payload still meets every presentation)."""
    right = expected(task)
    if right is None:
        return []
    wrong = lib.honest_wrong(right)
    probes = [Probe(task, "honest", f"right ({how})", lib.present(right, how)) for how in presentations]
    probes += [Probe(task, "honest", f"wrong ({how})", lib.present(wrong, how)) for how in presentations]
    attacks = [a for a in lib.answer_attacks(right, prompt_of(task), wrong) if _wanted(a.cls, classes)]
    if rotate is not None:
        attacks = _rotated(attacks, presentations, rotate)
    return probes + [Probe(task, a.cls, a.name, a.text) for a in attacks] + generated_probes(task, classes, rotate)


def generated_probes(task: Task, classes: set[str] | None, rotate: int | None = None) -> list[Probe]:
    """The attacks of the class grammar (`attack_classes.py`) over the task's own gold, and
    its honest controls (class honest, named `right (control: ...)`)."""
    gold = grammar.gold_of(expected(task) or "", prompt_of(task), task.entry.get("metadata") or {})
    probes = [Probe(task, "honest", f"right (control: {c.name})", c.text) for c in grammar.controls(gold)]
    made = [g for g in grammar.generate(gold, rotate, declared_equal(task)) if _wanted(g.cls, classes)]
    return probes + [Probe(task, g.cls, g.name, g.text) for g in made]


def declared_equal(task: Task):
    """The rule by which `task` itself counts a value equal to its gold, or None: a
    reasoning-gym family's own scorer (its declared tolerance), for the tasks it scores."""
    if verifier_facts(task.verifier).entry != "reasoning_gym" or not task.family:
        return None  # only a reasoning-gym entry carries a family whose scorer declares a tolerance
    from posttrain.rewards.reasoning_gym import family_credits

    return lambda payload: family_credits(task.family, payload, task.entry)


def _rotated(attacks: list[lib.Attack], presentations, offset: int) -> list[lib.Attack]:
    out, n = [], 0
    for a in attacks:
        how = a.name.rsplit(" (", 1)[-1].rstrip(")")
        if how not in presentations:  # a whole response: always kept
            out.append(a)
            continue
        if how == presentations[(n // len(presentations) + offset) % len(presentations)]:
            out.append(a)
        n += 1
    return out


def _wanted(cls: str, classes: set[str] | None) -> bool:
    return classes is None or cls in classes


def code_probes(task: Task, classes: set[str] | None) -> list[Probe]:
    entry = task.entry
    entry_point = None if "io" in entry else entry.get("entry_point")
    probes = [
        Probe(task, "honest", "wrong (returns None / prints nothing)", code_lib.honest_wrong_program(entry_point))
    ]
    if task.answer:
        program = task.answer if "```" in task.answer else f"```python\n{task.answer}\n```"
        probes.insert(0, Probe(task, "honest", "right (the reference solution)", program))
    attacks = code_lib.io_attacks() if entry_point is None else code_lib.function_attacks(entry_point)
    return probes + [Probe(task, a.cls, a.name, a.text) for a in attacks if _wanted(a.cls, classes)]


def _bare_probes(task: Task, right: str, classes: set[str] | None, wrap) -> list[Probe]:
    """Probes of a verifier that reads a bare final answer: `wrap(payload)` -> (text, env)."""
    wrong = lib.honest_wrong(right)
    probes = []
    for name, payload in (("right", right), ("wrong", wrong)):
        text, env = wrap(payload)
        probes.append(Probe(task, "honest", f"{name} (bare)", text, env))
    for cls, name, payload in lib.answer_payloads(right, prompt_of(task), wrong):
        if _wanted(cls, classes):
            text, env = wrap(payload)
            probes.append(Probe(task, cls, f"{name} (bare)", text, env))
    return probes


def agent_probes(task: Task, classes: set[str] | None) -> list[Probe]:
    """Episodes run in the task's real environment (`data/builtin_env.py`): the gold calls, then
    the attack as the final answer; or, for a task checked on the store, the gold calls
    with the stored value attacked."""
    from posttrain.data import builtin_env as agent
    from posttrain.data.chat import format_call, parse_calls

    check = task.entry.get("check") or {}
    gold = [text for role, text in task.entry.get("gold", []) if role == "assistant"]
    calls = gold[:-1]

    def run(turns: list[str]) -> dict:
        state = agent.initial_state(task.entry)
        for turn in turns[: task.entry.get("max_turns", 4)]:
            if agent.step(state, turn, task.entry.get("corpus_seed", 0)) is None:
                break
        return state.to_dict()

    if "answer" in check:
        return _bare_probes(task, str(check["answer"]), classes, lambda p: (p, run([*calls, p])))
    if not check.get("kv"):
        return []
    key, value = next(iter(check["kv"].items()))

    def stored(payload: str) -> tuple[str, dict]:
        turns = []
        for turn in calls:
            parsed, _ = parse_calls(turn)
            turns.append(
                "".join(
                    format_call(n, dict(a, value=payload) if n == "kv_set" and a.get("key") == key else a)
                    for n, a in parsed
                )
                or turn
            )
        return gold[-1], run([*turns, gold[-1]])

    return _bare_probes(task, str(value), classes, stored)


def env_probes(task: Task, classes: set[str] | None) -> list[Probe]:
    """Episodes of your own environment, run in its worker processes: the gold calls, then
    the attack as the final answer (where the task has an answer), and the gold calls with
    each `value` argument attacked."""
    from posttrain.data.env import episode_task
    from posttrain.data.tools import read_calls
    from posttrain.rollout.env_workers import episode_turn, workers_for

    entry = task.entry
    gold = [text for role, text in entry.get("gold", []) if role == "assistant"]
    calls = [c for turn in gold[:-1] for c in read_calls(turn)[0]]
    right = expected(task)
    attacks: list[tuple[str, str, list, str | None]] = []  # (cls, name, calls, final)
    if right is not None and right != "done":
        for p in _bare_probes(task, right, classes, lambda p: (p, None)):
            attacks.append((p.cls, p.name, calls, p.text))
    valued = [i for i, (_, args) in enumerate(calls) if isinstance(args.get("value"), str)]
    if valued:
        value = calls[valued[0]][1]["value"]
        final = gold[-1] if gold else "done"
        for p in _bare_probes(task, value, classes, lambda p: (p, None)):
            changed = [(n, dict(a, value=p.text) if i in valued else a) for i, (n, a) in enumerate(calls)]
            attacks.append((p.cls, p.name.replace("(bare)", "(stored value)"), changed, final))
    if not attacks:
        return []
    jobs = [(episode_task(task), None, list(map(list, c))) for _, _, c, _ in attacks]
    ran = workers_for(entry).run(episode_turn, jobs, entry["timeout_s"])
    probes = []
    for (cls, name, c, final), (ok, out) in zip(attacks, ran):
        env = (
            {"state": out["state"], "final": final, "calls": c, "turns": len(c) + 1}
            if ok
            else {"error": str(out), "error_kind": out.kind}
        )
        probes.append(Probe(task, cls, name, final or "", env))
    return probes


def grm_probes(task: Task, classes: set[str] | None, rubric: list[str], length_cap: int) -> list[Probe]:
    base = lib.grm_base(prompt_of(task))
    probes = [Probe(task, "honest", "wrong (a weak answer that does not do the task)", base)]
    for a in lib.grm_attacks(base, prompt_of(task), rubric, length_cap):
        if _wanted(a.cls, classes):
            probes.append(Probe(task, a.cls, a.name, a.text))
    return probes


# ---------------------------------------------------------------- scoring


async def _score(source, probes: list[Probe]) -> list:
    return await score_safely(source, [_sample(p) for p in probes])


def score_probes(source, probes: list[Probe], chunk: int = 8) -> list[Outcome]:
    """Score one task's probes in one batch, as a stage would. A batch the verifier raised
    on (every sample flagged by `score_safely`) is scored again in chunks, and a chunk that
    raises one probe at a time: each void is charged to the probe that causes it alone,
    with the size of the batch it took down (`batch_voided`)."""
    if not probes:
        return []
    results = asyncio.run(_score(source, probes))
    blamed: dict[int, int] = {}
    if _crashed(results) and len(probes) > 1:
        results = list(results)
        for start in range(0, len(probes), chunk):
            part = list(range(start, min(start + chunk, len(probes))))
            got = asyncio.run(_score(source, [probes[i] for i in part]))
            if _crashed(got) and len(part) > 1:
                got = [asyncio.run(_score(source, [probes[i]]))[0] for i in part]
            for i, r in zip(part, got):
                results[i] = r
                if not r.ok and RAISED.match(r.reason):
                    blamed[i] = len(probes)
    # the best honest wrong score, full credit aside: a wrong answer credited 1 is a finding of
    # its own (class honest), and must not hide every attack on its task. Relative scores (a
    # pairwise judge ranks the batch) compare each attack with the honest wrong answer as scored.
    relative = is_relative(source, probes[0].task.verifier)
    wrongs = [r.score for p, r in zip(probes, results) if p.cls == "honest" and p.name.startswith("wrong") and r.ok]
    partial = wrongs if relative else [w for w in wrongs if w < 1 - EPS]
    baseline = max(partial) if partial else (0.0 if wrongs else None)
    return [
        Outcome(p, float(r.score), bool(r.ok), r.reason, baseline, blamed.get(i, 0), relative)
        for i, (p, r) in enumerate(zip(probes, results))
    ]


def is_relative(source, verifier: str) -> bool:
    """Whether `source` (or the router's source for `verifier`) scores a batch's responses to
    a task against each other."""
    inner = getattr(source, "sources", {}).get(verifier, source)
    return bool(getattr(inner, "relative", False))


def _crashed(results) -> bool:
    return bool(results) and all(not r.ok and RAISED.match(r.reason) for r in results)


def run_audit(
    verifier: str,
    source,
    tasks: list[Task],
    classes: set[str] | None = None,
    length_cap: int | None = None,
    quick: bool = False,
) -> VerifierAudit:
    """Audit `source` (any reward source; a router for a pipeline stage) on `tasks`, all of
    whose `verifier` is `verifier`. `quick`: each answer payload in one presentation per
    task (in turn), not in all three."""
    report = VerifierAudit(verifier, len(tasks))
    entry = get_verifier(verifier)
    for number, task in enumerate(tasks):
        if entry is None or entry.probes is None:
            raise AuditError(f"no attacks for verifier {verifier!r}")
        probes = entry.part("probes")(ProbeCall(source, task, classes, number, quick, length_cap))
        if not probes:
            report.notes.append(f"{task.task_id}: no attacks apply (no expected answer or checked value)")
            continue
        report.outcomes += score_probes(source, probes)
    return report


# ---------------------------------------------------------------- each verifier's probes (the table's `probes`)


def code_call_probes(call: ProbeCall) -> list[Probe]:
    return code_probes(call.task, call.classes)


def answer_call_probes(call: ProbeCall) -> list[Probe]:
    return answer_probes(call.task, call.classes, rotate=call.number if call.quick else None)


def verifiers_call_probes(call: ProbeCall) -> list[Probe]:
    task, classes = call.task, call.classes
    right = expected(task)
    probes = [] if right is None else _bare_probes(task, right, classes, lambda p: (p, None))
    if not call.quick:
        probes += [p for p in answer_probes(task, classes, ("line",)) if p.cls != "honest"]
    return probes


def agent_call_probes(call: ProbeCall) -> list[Probe]:
    return agent_probes(call.task, call.classes)


def env_call_probes(call: ProbeCall) -> list[Probe]:
    return env_probes(call.task, call.classes)


def grm_call_probes(call: ProbeCall) -> list[Probe]:
    return _grm_task(call.source, call.task, call.classes, call.length_cap or 256)


def _grm_task(source, task: Task, classes, length_cap: int) -> list[Probe]:
    """Score the weak base answer first: its rubric (the judge's criteria) is what the
    rubric-echo attacks repeat back."""
    base = Probe(task, "honest", "probe", lib.grm_base(prompt_of(task)))
    result = asyncio.run(_score(source, [base]))[0]
    rubric = [c.get("text", "") for c in (result.details or {}).get("rubric") or []]
    return grm_probes(task, classes, rubric, length_cap)


# ---------------------------------------------------------------- output


def summary(audits: list[VerifierAudit]) -> dict:
    return {
        "wins": sum(a.wins for a in audits),
        "voids": sum(a.voids for a in audits),
        "verifiers": [
            {
                "verifier": a.verifier,
                "tasks": a.tasks,
                "attempts": sum(o.probe.cls != "honest" for o in a.outcomes),
                "wins": a.wins,
                "voids": a.voids,
                "honest": a.honest(),
                "classes": a.rows(),
                "notes": a.notes,
            }
            for a in audits
        ],
    }


def _one_line(text: str, width: int) -> str:
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate prints escaped
    text = " ".join(text.replace("\n", " \\n ").split()).replace("The result follows. \\n \\n ", "")
    return text if len(text) <= width else text[: width - 3] + "..."


def _tail(text: str, width: int) -> str:
    text = _one_line(text, 10 * width)
    return text if len(text) <= width else "..." + text[-(width - 3) :]


def format_table(audits: list[VerifierAudit]) -> str:
    lines = []
    for a in audits:
        h = a.honest()
        attempts = sum(o.probe.cls != "honest" for o in a.outcomes)
        wrong = "-" if h["wrong_max_score"] is None else f"{h['wrong_max_score']:.2f}"
        lines.append(
            f"verifier {a.verifier}: {a.tasks} tasks, {attempts} attacks; honest right credited on "
            f"{h['right_tasks_credited']}/{h['right_tasks']} tasks, honest wrong scored at most {wrong}"
        )
        lines.append(f"  {'class':<18}{'attempts':>9}{'wins':>6}{'voids':>7}  example")
        for row in a.rows():
            example = (row["win_examples"] or row["void_examples"] or [None])[0]
            text = ""
            if example is not None:
                verdict = f"scored {example['score']:g} > {example['baseline']:g}" if example["ok"] else "unscored"
                if row["class"] == "honest" and example["ok"]:
                    verdict = f"a wrong answer credited {example['score']:g}"
                extra = (
                    f"; took down all {example['batch_voided']} samples of its batch"
                    if example.get("batch_voided")
                    else ""
                )
                text = (
                    f'{example["attack"]} on {example["task"]}: "{_tail(example["response"], 60)}" '
                    f"{verdict} ({_one_line(example['reason'], 90)}{extra})"
                )
            lines.append(f"  {row['class']:<18}{row['attempts']:>9}{row['wins']:>6}{row['voids']:>7}  {text}")
        for note in a.notes[:5]:
            lines.append(f"  note: {note}")
        lines.append("")
    total_w, total_v = sum(a.wins for a in audits), sum(a.voids for a in audits)
    lines.append(f"total: {total_w} wins, {total_v} voids")
    return "\n".join(lines)


def dumps(audits: list[VerifierAudit]) -> str:
    return json.dumps(summary(audits), default=repr)
