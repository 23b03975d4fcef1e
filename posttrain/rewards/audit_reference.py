"""The audit's second opinion: every answer the verifier under audit scored is judged again
by the strict reference (`rewards/strict_reference.py`), and every disagreement is reported,
grouped by class: a **false positive** (the verifier gives full credit, the reference
refuses) or a **false negative** (the verifier refuses an honest control the reference
credits). And the evidence rule: an audit whose verifier credits fewer than
`MIN_CONTROLS` of its honest controls tested nothing, and is not clean.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from posttrain.config.verifiers import verifier_facts
from posttrain.rewards.audit import EPS, Outcome, VerifierAudit, expected, prompt_of
from posttrain.rewards.strict_reference import judge

MIN_CONTROLS = 0.95


@dataclass(frozen=True)
class Disagreement:
    cls: str  # the attack class, or the control's form for a false negative
    task: str
    name: str
    response: str
    score: float
    verifier_reason: str
    reference_reason: str


@dataclass
class ReferenceCheck:
    verifier: str
    controls: int = 0  # honest right answers scored
    controls_credited: int = 0  # of them, given full credit by the verifier under audit
    false_positives: list[Disagreement] = field(default_factory=list)
    false_negatives: list[Disagreement] = field(default_factory=list)
    unread_controls: int = 0  # honest controls the reference itself cannot read (not counted as disagreements)

    @property
    def share(self) -> float:
        return self.controls_credited / self.controls if self.controls else 0.0

    @property
    def evidence(self) -> bool:
        """Whether the verifier credited enough honest controls for its audit to mean anything
        (a verifier of programs or episodes whose tasks hold no honest right answer is
        measured against its honest wrong ones alone)."""
        if self.controls == 0:
            return not verifier_facts(self.verifier).final_answer
        return self.share >= MIN_CONTROLS

    def by_class(self, kind: str) -> dict[str, list[Disagreement]]:
        out: dict[str, list[Disagreement]] = {}
        for d in self.false_positives if kind == "fp" else self.false_negatives:
            out.setdefault(d.cls, []).append(d)
        return out

    def no_evidence_line(self) -> str:
        return (
            f"not clean, no evidence: verifier {self.verifier} credited {self.controls_credited} of {self.controls} "
            f"honest controls ({100 * self.share:.0f} %, under {100 * MIN_CONTROLS:.0f} %): refusing the attacks "
            "proves nothing when honest answers are refused too; audit it on tasks whose answers it reads "
            "(--task-file with your own rows)"
        )


def _credited(o: Outcome) -> bool:
    return o.ok and not o.relative and o.score >= 1 - EPS


def _control(o: Outcome) -> bool:
    return o.probe.cls == "honest" and o.probe.name.startswith("right")


def check(audit: VerifierAudit) -> ReferenceCheck:
    """The reference's verdict on every outcome of `audit` (answer verifiers: the response is
    the answer; others: only the share of honest answers credited)."""
    report = ReferenceCheck(audit.verifier)
    for o in audit.outcomes:
        if _control(o):
            report.controls += 1
            report.controls_credited += _credited(o)
        if not verifier_facts(audit.verifier).final_answer or expected(o.probe.task) is None:
            continue
        verdict = judge(o.probe.text, expected(o.probe.task) or "", prompt_of(o.probe.task))
        if _control(o) and not verdict.credited:
            report.unread_controls += 1
        elif _control(o) and not _credited(o):
            report.false_negatives.append(_disagreement(o, _form(o), verdict.reason))
        elif not _control(o) and _credited(o) and not verdict.credited:
            report.false_positives.append(_disagreement(o, o.probe.cls, verdict.reason))
    return report


def _form(o: Outcome) -> str:
    name = o.probe.name
    return name[len("right (control: ") : -1] if name.startswith("right (control: ") else name[len("right (") : -1]


def _disagreement(o: Outcome, cls: str, reason: str) -> Disagreement:
    return Disagreement(cls, o.probe.task.task_id, o.probe.name, o.probe.text[-300:], o.score, o.reason[:300], reason)


def to_json(report: ReferenceCheck) -> dict:
    def rows(kind: str) -> list[dict]:
        return [
            {"class": cls, "count": len(ds), "examples": [d.__dict__ for d in ds[:3]]}
            for cls, ds in report.by_class(kind).items()
        ]

    return {
        "controls": report.controls,
        "controls_credited": report.controls_credited,
        "evidence": report.evidence,
        "false_positives": rows("fp"),
        "false_negatives": rows("fn"),
        "unread_controls": report.unread_controls,
    }


def _short(text: str, width: int) -> str:
    text = " ".join(text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\n", " \\n ").split())
    return text if len(text) <= width else "..." + text[-(width - 3) :]


def format_check(report: ReferenceCheck) -> list[str]:
    """The lines of the table under a verifier's class rows."""
    lines = [
        f"  honest controls credited: {report.controls_credited}/{report.controls} "
        f"({100 * report.share:.0f} %; an audit needs {100 * MIN_CONTROLS:.0f} %)"
    ]
    fp, fn = report.by_class("fp"), report.by_class("fn")
    if fp or fn:
        lines.append(
            f"  strict reference: {len(report.false_positives)} false positives (credited, the reference refuses) "
            f"in {', '.join(fp) or 'no class'}; {len(report.false_negatives)} false negatives (an honest control "
            f"refused) in {', '.join(fn) or 'no form'}"
        )
    for kind, groups in (("false positive", fp), ("false negative", fn)):
        for cls, ds in groups.items():
            d = ds[0]
            lines.append(
                f'    {kind} {cls} ({len(ds)}): {d.name} on {d.task}: "{_short(d.response, 60)}" '
                f"scored {d.score:g} (reference: {_short(d.reference_reason, 60)})"
            )
    return lines
