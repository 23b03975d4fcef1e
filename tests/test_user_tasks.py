"""User task files and user reward functions: bad rows are reported by row, and a user
function that raises, returns garbage or hangs flags its sample; the batch goes on."""

import json
import sys
import time
from pathlib import Path

import pytest

from posttrain.config import UserTasks
from posttrain.data.user import BadTaskFile, user_tasks
from posttrain.rewards.base import score_sync
from posttrain.rewards.user import UserReward
from posttrain.types import Completion, Sample

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))

ROWS = [
    {"id": "a", "prompt": "2 + 2?", "answer": "4"},
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "3 + 3?"}], "answer": 6},
    {"prompt": ""},  # bad: empty prompt
    {"prompt": "x", "colour": "red"},  # bad: unknown field
    {"messages": [{"role": "wizard", "content": "hi"}]},  # bad: unknown role
    {"prompt": "free text", "metadata": {"k": 1}},
]


def write_jsonl(tmp_path, rows, extra_lines=()):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join([json.dumps(r) for r in rows] + list(extra_lines)) + "\n")
    return path


def test_bad_rows_are_skipped_and_reported(tmp_path, capsys):
    path = write_jsonl(tmp_path, ROWS, ["{not json"])
    tasks = user_tasks(UserTasks(type="user", path=str(path)))
    assert [t.task_id for t in tasks] == ["a", "tasks.jsonl:2", "tasks.jsonl:6"]
    assert tasks[1].messages[0].content == "be brief" and tasks[1].answer == "6"
    assert tasks[2].entry["metadata"] == {"k": 1} and all(t.verifier == "user" for t in tasks)
    assert "skipped 4 bad row(s); first: row 3" in capsys.readouterr().out


def test_on_bad_row_fail_rejects_the_file_naming_the_row(tmp_path):
    path = write_jsonl(tmp_path, ROWS)
    with pytest.raises(BadTaskFile, match="tasks.jsonl:3: needs a non-empty string `prompt`"):
        user_tasks(UserTasks(type="user", path=str(path), on_bad_row="fail"))


def test_empty_and_undecodable_files(tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    with pytest.raises(BadTaskFile, match="no usable task"):
        user_tasks(UserTasks(type="user", path=str(empty)))
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(BadTaskFile, match="not UTF-8"):
        user_tasks(UserTasks(type="user", path=str(binary)))


def test_parquet_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": "p1", "prompt": "1 + 1?", "answer": "2"}]), path)
    (task,) = user_tasks(UserTasks(type="user", path=str(path)))
    assert task.task_id == "p1" and task.answer == "2"


def samples_for(tmp_path, texts):
    tasks = user_tasks(UserTasks(type="user", path=str(write_jsonl(tmp_path, ROWS[:2]))))
    return [Sample(tasks[i % 2], 0, (1,), Completion((1,), (0.0,), text, "stop")) for i, text in enumerate(texts)]


def test_answer_matching_without_a_function(tmp_path):
    results = score_sync(UserReward(None), samples_for(tmp_path, ["<answer>4</answer>", "6.0", "5"]))
    assert [r.score for r in results] == [1.0, 1.0, 0.0]


@pytest.mark.parametrize(
    "function, ok, words",
    [
        ("user_rewards:length_penalty", True, "shorter is better"),
        ("user_rewards:exact", True, "exact match"),
        ("user_rewards:raises", True, "scored 0: user reward raised RuntimeError: user bug"),
        ("user_rewards:nan", True, "scored 0: user reward returned nan"),
        ("user_rewards:not_a_number", True, "scored 0: user reward returned str, not a number"),
    ],
)
def test_user_function_results_and_failures(tmp_path, function, ok, words):
    reward = UserReward(function, timeout_s=20)
    try:
        (result,) = score_sync(reward, samples_for(tmp_path, ["4"]))
    finally:
        reward.close()
    assert result.ok is ok and words in result.reason
    assert result.score == 0.0 or "scored 0" not in words  # what a response makes of its call is a 0, never a void


def test_hanging_user_function_is_stopped_and_the_next_sample_scored(tmp_path):
    reward = UserReward("user_rewards:hangs", timeout_s=1.0)
    try:
        started = time.perf_counter()
        results = score_sync(reward, samples_for(tmp_path, ["4", "6"]))
        assert time.perf_counter() - started < 120  # against a hang: the 1 s limit, not the hang
    finally:
        reward.close()
    assert all(r.ok and r.score == 0.0 and "timed out after 1.0s" in r.reason for r in results)


def test_unknown_function_fails_at_start():
    with pytest.raises((ImportError, AttributeError)):
        UserReward("user_rewards:no_such_function")


def test_cli_reports_a_bad_user_file_and_reward_in_one_line(tmp_path):
    import subprocess

    import yaml

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": ""}\n')
    good = write_jsonl(tmp_path, ROWS[:1])
    for source, words in ((str(bad), "stages[0].tasks: "), (str(good), "stages[0].tasks.reward: cannot load")):
        pipeline = {
            "model": {"name": "tiny"},
            "stages": [
                {
                    "name": "rl",
                    "type": "rl",
                    "steps": 1,
                    "lr": 1e-4,
                    "tasks": {"type": "user", "path": source, "reward": "user_rewards:missing"},
                }
            ],
        }
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(pipeline))
        proc = subprocess.run(
            [sys.executable, "-m", "posttrain.cli", "validate", str(tmp_path / "p.yaml")],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONPATH": str(FIXTURES), "PATH": "/usr/bin:/bin"},
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr
