"""Coding tasks from your own JSONL or Parquet file: rows of the three test formats, bad
rows reported by number (skipped or fatal), per-row reward and timeout, scored through
the real sandbox, and a broken file rejected by `posttrain validate` in one line."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from posttrain.config import CodingTasks
from posttrain.data.tasks import load_tasks
from posttrain.data.user import BadTaskFile
from posttrain.rewards.base import score_sync
from posttrain.rewards.code import CodeVerifier
from posttrain.types import Completion, Sample

ADD = "def add(a, b):\n    return a + b\n"
ROWS = [
    {"id": "tests", "prompt": "Write add(a, b).", "entry_point": "add", "tests": ["assert add(1, 2) == 3"]},
    {
        "id": "check",
        "messages": [{"role": "user", "content": "Write add(a, b)."}],
        "entry_point": "add",
        "check": "def check(candidate):\n    assert candidate(2, 2) == double(2)\n",
        "context": "def double(x):\n    return 2 * x\n",
        "reward": "fraction",
        "timeout_s": 2.5,
    },
    {"prompt": "Read a and b, print a + b.", "io": [{"input": "4 5\n", "output": "9\n"}]},
    {"prompt": "no tests"},  # bad: no format
    {"prompt": "x", "entry_point": "f", "tests": ["assert f( =="]},  # bad: a test that does not compile
    {"prompt": "x", "entry_point": "f", "tests": ["assert f()"], "colour": "red"},  # bad: unknown field
    {"prompt": "x", "io": [{"input": "1"}]},  # bad: io case without output
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_rows_of_every_format_load_and_bad_ones_are_reported(tmp_path, capsys):
    path = write_jsonl(tmp_path / "code.jsonl", ROWS)
    tasks = load_tasks(CodingTasks(type="coding", path=path, reward="all_pass", timeout_s=4))
    assert [t.task_id for t in tasks] == ["tests", "check", "code.jsonl:3"]
    assert all(t.verifier == "code" for t in tasks)
    assert tasks[0].entry == {
        "entry_point": "add",
        "tests": ["assert add(1, 2) == 3"],
        "reward": "all_pass",
        "timeout_s": 4,
    }
    assert tasks[1].entry["reward"] == "fraction" and tasks[1].entry["timeout_s"] == 2.5  # the row's own
    out = capsys.readouterr().out
    assert "skipped 4 bad row(s); first: row 4: needs exactly one of `tests`, `check`, `io`" in out
    with pytest.raises(BadTaskFile, match=r"code.jsonl:4: tests\[0\] is not valid Python"):
        load_tasks(
            CodingTasks(
                type="coding", path=write_jsonl(tmp_path / "code.jsonl", ROWS[:3] + ROWS[4:]), on_bad_row="fail"
            )
        )


def test_file_tasks_are_scored_in_the_sandbox(tmp_path):
    tasks = load_tasks(CodingTasks(type="coding", path=write_jsonl(tmp_path / "code.jsonl", ROWS[:3])))
    programs = [ADD, ADD, "a, b = map(int, input().split())\nprint(a + b)\n"]
    wrong = [ADD.replace("+", "-"), ADD.replace("+", "*") + "\n", "print(0)\n"]
    verifier = CodeVerifier(workers=2)
    try:
        right = score_sync(
            verifier, [Sample(t, 0, (1,), Completion((1,), (0.0,), p, "stop")) for t, p in zip(tasks, programs)]
        )
        bad = score_sync(
            verifier, [Sample(t, 0, (1,), Completion((1,), (0.0,), p, "stop")) for t, p in zip(tasks, wrong)]
        )
    finally:
        verifier.close()
    assert [r.score for r in right] == [1.0, 1.0, 1.0], [r.reason for r in right]
    # add * add is right on (2, 2): the check's one assert passes, so the task's own `fraction` gives 1
    assert [r.score for r in bad] == [0.0, 1.0, 0.0], [r.reason for r in bad]


def test_parquet_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "code.parquet"
    rows = [ROWS[0], {"id": "io", "prompt": "sum", "io": [{"input": "1 1", "output": "2"}]}]
    columns = sorted({k for r in rows for k in r})  # absent fields are nulls
    pq.write_table(pa.Table.from_pydict({c: [r.get(c) for r in rows] for c in columns}), path)
    tasks = load_tasks(CodingTasks(type="coding", path=str(path), size=5))
    assert [t.task_id for t in tasks] == ["tests", "io"] and tasks[1].entry["io"] == [{"input": "1 1", "output": "2"}]


def test_config_errors_name_the_key(tmp_path):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="file does not exist"):
        CodingTasks(type="coding", path=str(tmp_path / "none.jsonl"))
    path = write_jsonl(tmp_path / "code.jsonl", ROWS[:1])
    with pytest.raises(ValidationError, match="path: a file source takes no split"):
        CodingTasks(type="coding", path=path, split="humaneval")


def test_validate_rejects_a_broken_coding_file_in_one_line(tmp_path):
    path = write_jsonl(tmp_path / "code.jsonl", [ROWS[3]])
    pipeline = {
        "model": {"name": "tiny"},
        "stages": [{"name": "rl", "type": "rl", "steps": 1, "lr": 1e-4, "tasks": {"type": "coding", "path": path}}],
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(pipeline))
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "validate", str(tmp_path / "p.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks: ") and "no usable task" in lines[0]
