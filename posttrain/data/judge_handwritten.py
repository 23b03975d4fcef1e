"""Judge pairs written by hand (`judge_handwritten.jsonl`): a task, a better and a worse
response, whose better side a person decided. Held out by construction: no task source reads
this file (`type: judgements` generates its cases from code and has no path), and
tests/test_judge_quality.py checks that none of its tasks is a prompt of any training source.
`bench/grm_agreement.py --source handwritten` measures a judge on them, in both orders."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

HANDWRITTEN = Path(__file__).with_name("judge_handwritten.jsonl")


@dataclass(frozen=True)
class JudgePair:
    """One task's two responses with the better one known; `source` names who wrote it."""

    id: str
    kind: str
    task: str
    better: str
    worse: str
    source: str

    @property
    def longer_is_worse(self) -> bool:
        return len(self.worse) > len(self.better)


def read_pairs(path: Path, source: str) -> list[JudgePair]:
    """Pairs of a JSONL file (`id`, `kind`, `task`, `better`, `worse` per line); a line that
    lacks a field or repeats its two responses is an error naming the line."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = [k for k in ("id", "kind", "task", "better", "worse") if not isinstance(row.get(k), str)]
        if missing:
            raise ValueError(f"{path}:{n}: a judge pair needs the text fields {', '.join(missing)}")
        if row["better"] == row["worse"]:
            raise ValueError(f"{path}:{n}: pair {row['id']} has the same response on both sides")
        out.append(JudgePair(row["id"], row["kind"], row["task"], row["better"], row["worse"], source))
    return out


def handwritten_pairs() -> list[JudgePair]:
    return read_pairs(HANDWRITTEN, "handwritten")
