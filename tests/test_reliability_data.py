"""Reliability battery, data and reward side: generated broken task rows and files are
reported by row and skipped, or reject the file with the row and reason (`on_bad_row`);
a user reward function that raises, returns NaN/inf/None, kills its worker or hangs
flags only its own sample, and the rest of the batch is scored."""

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

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))

GOOD = {"id": "ok", "prompt": "2 + 2?", "answer": "4"}
BAD_ROWS = {  # JSONL line -> words of the reason
    '{"answer": "4"}': "needs a non-empty string `prompt`",
    '{"prompt": 42}': "needs a non-empty string `prompt`",
    '{"prompt": "   "}': "needs a non-empty string `prompt`",
    '{"prompt": null}': "needs a non-empty string `prompt`",
    '{"messages": []}': "messages must be a non-empty list",
    '{"messages": "hi"}': "messages must be a non-empty list",
    '{"messages": [{"role": "user"}]}': "messages must be a non-empty list",
    '{"messages": [{"role": "user", "content": 5}]}': "messages must be a non-empty list",
    '{"messages": [["user", "hi"]]}': "messages must be a non-empty list",
    '{"prompt": "x", "answer": {"a": 1}}': "answer must be a string or a number",
    '{"prompt": "x", "answer": [4]}': "answer must be a string or a number",
    '{"prompt": "x", "metadata": "m"}': "metadata must be an object",
    '{"prompt": "x", "extra": 1}': "unknown field(s) ['extra']",
    "[1, 2]": "a row must be an object, got list",
    '"just a string"': "a row must be an object, got str",
    "17": "a row must be an object, got int",
    '{"prompt": "x"': "invalid JSON",
    "{'prompt': 'x'}": "invalid JSON",
    "NaN garbage \x07": "invalid JSON",
}


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("line", list(BAD_ROWS), ids=range(len(BAD_ROWS)))
def test_bad_row_is_skipped_with_its_number_or_rejects_the_file(tmp_path, capsys, line):
    path = write(tmp_path, [json.dumps(GOOD), line, json.dumps({**GOOD, "id": "ok2"})])
    tasks = user_tasks(UserTasks(type="user", path=str(path)))
    assert [t.task_id for t in tasks] == ["ok", "ok2"]
    assert f"skipped 1 bad row(s); first: row 2: {BAD_ROWS[line]}" in capsys.readouterr().out
    with pytest.raises(BadTaskFile) as caught:
        user_tasks(UserTasks(type="user", path=str(path), on_bad_row="fail"))
    assert str(caught.value).startswith(f"{path}:2: ") and BAD_ROWS[line] in str(caught.value)


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", "no usable task (empty file)"),
        (b"\n\n  \n", "no usable task (empty file)"),
        (b'{"prompt": ""}\n{"x": 1}\n', "no usable task (row 1: needs a non-empty string"),
        (b'{"prompt": "a"}\n\xff\xfe\n', "not UTF-8 text (byte 16)"),
        (bytes(range(256)) * 4, "not UTF-8 text"),
    ],
)
def test_unusable_files_are_rejected_whole_with_a_reason(tmp_path, content, words):
    path = tmp_path / "t.jsonl"
    path.write_bytes(content)
    with pytest.raises(BadTaskFile) as caught:
        user_tasks(UserTasks(type="user", path=str(path)))
    assert str(caught.value).startswith(f"{path}: ") and words in str(caught.value)
    with pytest.raises(BadTaskFile, match=f"^{path}"):  # with on_bad_row: fail too, by its first bad row
        user_tasks(UserTasks(type="user", path=str(path), on_bad_row="fail"))


def test_broken_parquet_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    truncated = tmp_path / "cut.parquet"
    pq.write_table(pa.Table.from_pylist([GOOD] * 50), truncated)
    truncated.write_bytes(truncated.read_bytes()[:200])
    with pytest.raises(BadTaskFile, match="not a readable Parquet file"):
        user_tasks(UserTasks(type="user", path=str(truncated)))
    wrong = tmp_path / "wrong.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "2 + 2?"}, {"prompt": "3 + 3?", "question": None}]), wrong)
    with pytest.raises(BadTaskFile, match=r"wrong.parquet:1: unknown field\(s\) \['question'\]"):
        user_tasks(UserTasks(type="user", path=str(wrong), on_bad_row="fail"))


def test_mixed_batch_of_hostile_rewards_scores_the_bad_samples_zero(tmp_path):
    (task,) = user_tasks(UserTasks(type="user", path=str(write(tmp_path, [json.dumps(GOOD)]))))
    texts = ["4", "raise", "nan", "inf", "none", "hang", "4", "exit", "5", "4"]
    samples = [Sample(task, 0, (1,), Completion((1,), (0.0,), text, "stop")) for text in texts]
    reward = UserReward("user_rewards:chaos", timeout_s=2.0)
    try:
        started = time.perf_counter()
        results = score_sync(reward, samples)
        seconds = time.perf_counter() - started
    finally:
        reward.close()
    by_text = dict(zip(texts, results))
    # what a response makes of its reward call scores 0 with the reason: never a void
    assert all(r.ok for r in results)
    assert [r.score for r in results] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert "raised ValueError: bad input" in by_text["raise"].reason
    assert "returned nan" in by_text["nan"].reason and "returned inf" in by_text["inf"].reason
    assert "returned NoneType" in by_text["none"].reason
    assert "timed out after 2.0s" in by_text["hang"].reason and "crashed" in by_text["exit"].reason
    assert seconds < 120  # a timeout and a crash, each worker replaced, not a hang (the hang: an hour)
