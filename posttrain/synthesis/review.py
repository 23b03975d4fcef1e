"""`posttrain review RUN_DIR`: the human review queue of a run's synthesis stages.

  posttrain review RUN_DIR                     show each waiting trajectory, ask a/r/e/s/q
  posttrain review RUN_DIR --list              the queue (and the counts), no questions
  posttrain review RUN_DIR --show ID           one candidate in full, with its verdicts
  posttrain review RUN_DIR --accept ID [--reject ID] [--edit ID --file F.json] ...

Answers are read from stdin, one per line, so a script can pipe them in: `a` accept,
`r` reject, `e` edit (the next line is the path of a JSON file holding the edited
conversation: a list of {"role", "content"} or {"messages": [...]}), `s` skip, `q` quit.
Every decision is appended to synthesis/NAME/review.jsonl and sft.jsonl is rebuilt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from posttrain.synthesis.store import ReviewError, SynthesisStore


def stages_of(run_dir: Path) -> list[str]:
    folder = Path(run_dir) / "synthesis"
    return sorted(p.name for p in folder.iterdir() if (p / "candidates.jsonl").is_file()) if folder.is_dir() else []


def pick_stage(run_dir: Path, stage: str | None) -> SynthesisStore:
    names = stages_of(run_dir)
    if stage is None:
        if len(names) != 1:
            raise ReviewError(
                f"{run_dir}: "
                + (
                    f"several synthesis stages ({', '.join(names)}): give --stage"
                    if names
                    else "no synthesis stage has written candidates"
                )
            )
        stage = names[0]
    if stage not in names:
        raise ReviewError(f"{run_dir}: no synthesis stage {stage!r} (stages: {', '.join(names) or 'none'})")
    return SynthesisStore(run_dir, stage)


def load_edit(path: str) -> list[dict]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReviewError(f"cannot read the edited conversation {path}: {exc}") from None
    return data["messages"] if isinstance(data, dict) and "messages" in data else data


def render(row: dict, out=sys.stdout) -> None:
    out.write(
        f"=== {row['id']}  task {row['task_id']} ({row['family']})  status {row['status']}"
        + (f" - {row['review_reason']}" if row.get("review_reason") else "")
        + "\n"
    )
    for m in row["messages"] or [{"role": "raw", "content": row.get("response", "")}]:
        out.write(f"--- {m['role']}\n{m['content']}\n")
    if row.get("answer") is not None:
        out.write(f"--- reference answer: {row['answer']}\n")
    if "score" in row:
        out.write(f"--- reward {row['score']:.3g} ({row['source']}): {row['reason']}\n")
    for stage, v in row["verdicts"].items():
        shown = {True: "pass", False: "FAIL", None: "-"}[v["pass"]]
        out.write(f"    {stage:8s} {shown:4s}  {v['reason']}\n")


def summary_line(store: SynthesisStore) -> str:
    s = store.summary()
    return (
        f"{store.folder.name}: {s['candidates']} candidates, {s['passed']} passed, {s['rejected']} rejected, "
        f"{s['sent_to_review']} sent to review, {s['queue']} waiting; reviewed {s['reviewed']}; SFT set {s['sft_set']}"
    )


def review(
    run_dir: Path,
    stage: str | None = None,
    accept=(),
    reject=(),
    edit=(),
    files=(),
    show=None,
    list_only: bool = False,
    stdin=None,
    out=sys.stdout,
) -> int:
    store = pick_stage(run_dir, stage)
    if show:
        render(store.row(show), out)
        return 0
    if len(edit) != len(files):
        raise ReviewError("give one --file per --edit (the edited conversations, in order)")
    scripted = [(cid, "accept", None) for cid in accept] + [(cid, "reject", None) for cid in reject]
    scripted += [(cid, "edit", load_edit(f)) for cid, f in zip(edit, files)]
    for cid, decision, messages in scripted:
        store.decide(cid, decision, messages)
        out.write(f"{cid}: {decision}\n")
    if scripted or list_only:
        if list_only:
            for row in store.queue():
                out.write(f"{row['id']}\t{row['task_id']}\t{row.get('score', '')}\t{row['review_reason']}\n")
        out.write(summary_line(store) + "\n")
        return 0
    return interactive(store, stdin or sys.stdin, out)


def interactive(store: SynthesisStore, stdin, out) -> int:
    queue = store.queue()
    out.write(f"{len(queue)} trajectories wait for review\n")
    for row in queue:
        render(row, out)
        while True:
            out.write("[a]ccept [r]eject [e]dit [s]kip [q]uit? ")
            out.flush()
            answer = stdin.readline()
            if not answer:  # end of input: stop, decisions so far are stored
                out.write("\n" + summary_line(store) + "\n")
                return 0
            answer = answer.strip().lower()[:1]
            try:
                if answer == "a":
                    store.decide(row["id"], "accept")
                elif answer == "r":
                    store.decide(row["id"], "reject")
                elif answer == "e":
                    out.write("path of the edited conversation (JSON)? ")
                    out.flush()
                    store.decide(row["id"], "edit", load_edit(stdin.readline().strip()))
                elif answer == "q":
                    out.write(summary_line(store) + "\n")
                    return 0
                elif answer != "s":
                    continue
            except ReviewError as exc:
                out.write(f"{exc}\n")
                continue
            break
    out.write(summary_line(store) + "\n")
    return 0
