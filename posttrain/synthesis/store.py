"""The synthesized set in the run folder, auditable as JSON lines:

  synthesis/NAME/candidates.jsonl  one row per candidate trajectory: the task, the whole
                                   conversation, the teacher's reward with its reason,
                                   every verification verdict, the status (passed,
                                   rejected, review) and the template version
  synthesis/NAME/review.jsonl      one row per review decision (accept, reject, edit with
                                   the edited conversation); the last one per id counts
  synthesis/NAME/sft.jsonl         the SFT set built from both: {"id", "messages"} per line

A chunk of tasks is appended in one write and fsynced, its rows tagged with their task.
A task counts as done only when all its K rows are there: on resume, the rows of a task
cut short by a crash are set aside (candidates.replaced.jsonl) and the task is redone,
so no task is written twice.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from posttrain.config.verifiers import verifier_facts
from posttrain.data.chat import TEMPLATE_VERSION
from posttrain.records.rollouts import read_rows
from posttrain.synthesis.verify import PASSED, REVIEW, check_messages
from posttrain.types import Message

DECISIONS = ("accept", "reject", "edit")


class ReviewError(ValueError):
    """A review decision that cannot be applied (unknown id, bad edit)."""


def to_messages(rows: list[dict]) -> tuple[Message, ...]:
    if not isinstance(rows, list) or not all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in rows):
        raise ReviewError('messages must be a list of {"role", "content"} objects')
    return tuple(Message(m["role"], str(m["content"])) for m in rows)


def from_messages(messages) -> list[dict]:
    return [{"role": m.role, "content": m.content} for m in messages]


class SynthesisStore:
    def __init__(self, run_dir: Path, stage: str):
        self.folder = Path(run_dir) / "synthesis" / stage
        self.candidates = self.folder / "candidates.jsonl"
        self.reviews = self.folder / "review.jsonl"
        self.sft = self.folder / "sft.jsonl"

    # ------------------------------------------------------------ writing and resume

    def prepare(self, k: int) -> set[str]:
        """Task ids already done (all K rows written). Rows of a task cut short are set aside."""
        self.folder.mkdir(parents=True, exist_ok=True)
        rows = self.rows()
        count: dict[str, set[int]] = {}
        for row in rows:
            count.setdefault(row["task_id"], set()).add(row["k"])
        done = {t for t, ks in count.items() if ks == set(range(k))}
        partial = [r for r in rows if r["task_id"] not in done]
        if partial or len(rows) != len(read_rows_raw(self.candidates)):
            with (self.folder / "candidates.replaced.jsonl").open("a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in partial))
            self._rewrite([r for r in rows if r["task_id"] in done])
        return done

    def _rewrite(self, rows: list[dict]) -> None:
        tmp = self.candidates.with_name(".candidates.jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(self.candidates)

    def append(self, rows: list[dict]) -> None:
        """One write for a chunk's rows, flushed to disk before the next chunk starts."""
        if not rows:
            return
        with self.candidates.open("a", encoding="utf-8") as f:
            f.write("".join(json.dumps(r, default=str) + "\n" for r in rows))
            f.flush()
            os.fsync(f.fileno())

    # ------------------------------------------------------------ reading

    def rows(self) -> list[dict]:
        return read_rows(self.candidates)

    def row(self, cid: str) -> dict:
        found = next((r for r in self.rows() if r["id"] == cid), None)
        if found is None:
            raise ReviewError(f"no candidate {cid!r} in {self.candidates}")
        return found

    def decisions(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for d in read_rows(self.reviews):
            out[d["id"]] = d
        return out

    def queue(self) -> list[dict]:
        """Candidates waiting for a person: sent to review and not decided yet."""
        decided = self.decisions()
        return [r for r in self.rows() if r["status"] == REVIEW and r["id"] not in decided]

    def kept_keys(self, across_tasks: bool) -> dict[str, str]:
        from posttrain.synthesis.verify import dedup_key

        return {
            dedup_key(r["task_id"], to_messages(r["messages"]), across_tasks): r["id"]
            for r in self.rows()
            if r["status"] != "rejected" and r["messages"]
        }

    def sft_set(self) -> list[dict]:
        """{"id", "messages"} of what passed every stage (unless a reviewer rejected it),
        plus what a reviewer accepted, or edited (the edited conversation)."""
        decided = self.decisions()
        out = []
        for r in self.rows():
            d = decided.get(r["id"])
            if d is None:
                keep = r["status"] == PASSED
            else:
                keep = d["decision"] in ("accept", "edit")
            if keep:
                messages = d["messages"] if d is not None and d["decision"] == "edit" else r["messages"]
                out.append({"id": r["id"], "messages": messages})
        return out

    def write_sft(self) -> int:
        data = self.sft_set()
        tmp = self.sft.with_name(".sft.jsonl.tmp")
        tmp.write_text("".join(json.dumps(d) + "\n" for d in data))
        tmp.replace(self.sft)
        return len(data)

    def conversations(self) -> list[tuple[Message, ...]]:
        """The SFT set as conversations (what an SFT stage with `data: {type: synthesis}` trains on)."""
        for r in self.rows():
            if r.get("template") != TEMPLATE_VERSION:
                raise ValueError(
                    f"{self.candidates}: candidate {r['id']} was written with template "
                    f"{r.get('template')!r}, this code reads {TEMPLATE_VERSION!r}"
                )
        return [to_messages(d["messages"]) for d in self.sft_set()]

    def summary(self) -> dict:
        rows, decided = self.rows(), self.decisions()
        n = len(rows)
        out = {
            "tasks": len({r["task_id"] for r in rows}),
            "candidates": n,
            "passed": sum(r["status"] == PASSED for r in rows),
            "rejected": sum(r["status"] == "rejected" for r in rows),
            "sent_to_review": sum(r["status"] == REVIEW for r in rows),
            "queue": len(self.queue()),
            "reviewed": {k: sum(d["decision"] == k for d in decided.values()) for k in DECISIONS},
            "sft_set": len(self.sft_set()),
        }
        from posttrain.synthesis.verify import STAGES

        for stage in STAGES:
            reached = [r for r in rows if r["verdicts"].get(stage, {}).get("pass") is not None]
            out[f"pass_rate/{stage}"] = (
                (sum(r["verdicts"][stage]["pass"] for r in reached) / len(reached)) if reached else 0.0
            )
        out["acceptance"] = out["sft_set"] / n if n else 0.0
        return out

    # ------------------------------------------------------------ decisions

    def decide(self, cid: str, decision: str, messages: list[dict] | None = None, reviewer: str = "") -> dict:
        """Store one decision. An edit must still be a well-formed conversation that ends
        with the assistant; it replaces the candidate's conversation in the SFT set."""
        if decision not in DECISIONS:
            raise ReviewError(f"decision must be one of {', '.join(DECISIONS)}, not {decision!r}")
        row = self.row(cid)
        entry = {
            "id": cid,
            "decision": decision,
            "time": round(time.time(), 3),
            "reviewer": reviewer or os.environ.get("USER", ""),
            "status_before": row["status"],
        }
        if decision == "edit":
            if messages is None:
                raise ReviewError("an edit needs the edited conversation")
            parsed = to_messages(messages)
            tools = verifier_facts(row.get("verifier") or "").episode == "agent"
            check = check_messages(parsed, tools)
            if not check["pass"]:
                raise ReviewError(f"edited conversation of {cid}: {check['reason']}")
            entry["messages"] = from_messages(parsed)
        with self.reviews.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.write_sft()
        return entry


def read_rows_raw(path: Path) -> list[str]:
    """Non-empty lines of a file (torn ones included): to know whether a rewrite is needed."""
    if not path.exists():
        return []
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
