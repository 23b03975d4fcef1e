"""Hugging Face datasets as task sources (`type: hf`): a `save_to_disk` folder, data files
and a dataset in a local HF cache under a hub id (offline), mapped by column names; a
missing column's error; bad rows; hash-split parts; a streamed source that resumes at the
same row; a model named by a hub id resolved from the cache."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posttrain.config import HFTasks
from posttrain.data.hf import DatasetError, StreamSampler, hf_tasks

ROWS = [{"question": f"What is {i} + {i}?", "solution": str(2 * i), "uid": f"q{i}", "level": i % 3} for i in range(40)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    import datasets

    folder = tmp_path_factory.mktemp("saved") / "arith"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS), "test": datasets.Dataset.from_list(ROWS[:5])}
    ).save_to_disk(str(folder))
    return folder


def hub_cache(home: Path, repo_id: str, kind: str = "datasets") -> Path:
    """The folder of a repo's snapshot in a Hugging Face hub cache under `home` (the layout
    huggingface_hub reads offline: refs/main names the snapshot)."""
    commit = "0" * 39 + str(len(repo_id) % 10)
    repo = home / "hub" / f"{kind}--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


def cached_dataset(home: Path, repo_id: str, rows: list[dict]) -> None:
    import datasets

    data = hub_cache(home, repo_id) / "data"
    data.mkdir(exist_ok=True)
    datasets.Dataset.from_list(rows).to_parquet(str(data / "train-00000-of-00001.parquet"))


def cli(*args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "posttrain.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=600,
    )


def test_save_to_disk_folder_with_a_column_mapping(saved):
    source = HFTasks(type="hf", path=str(saved), prompt_key="question", answer_key="solution", id_key="uid")
    tasks = hf_tasks(source)
    assert len(tasks) == 40 and tasks[3].task_id == "q3"
    assert tasks[3].messages[-1].content == "What is 3 + 3?" and tasks[3].answer == "6"
    assert tasks[3].verifier == "math" and tasks[3].entry["metadata"] == {"level": 0}
    test = hf_tasks(source.model_copy(update={"split": "test"}))
    assert [t.task_id for t in test] == ["q0", "q1", "q2", "q3", "q4"]
    with pytest.raises(DatasetError, match=r"no split 'dev' \(splits: train, test\)"):
        hf_tasks(source.model_copy(update={"split": "dev"}))


def test_a_missing_column_names_it_and_the_columns_there_are(saved):
    source = HFTasks(type="hf", path=str(saved), prompt_key="prompt", answer_key="solution")
    with pytest.raises(DatasetError) as err:
        hf_tasks(source)
    assert str(err.value) == (f"dataset {saved}[train]: no column 'prompt' (columns: question, solution, uid, level)")


def test_filter_limit_system_prompt_and_data_files(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    source = HFTasks(
        type="hf",
        path=str(tmp_path / "*.jsonl"),
        prompt_key="question",
        answer_key="solution",
        filter={"level": [1, 2]},
        limit=5,
        system_prompt="Answer with a number.",
    )
    tasks = hf_tasks(source)
    assert [t.answer for t in tasks] == ["2", "4", "8", "10", "14"]  # levels 1 and 2 only, first 5
    assert tasks[0].messages[0].role == "system" and tasks[0].task_id.endswith(":train:1")


def test_bad_rows_are_reported_by_index_and_skipped_or_fatal(tmp_path, capsys):
    import datasets

    rows = [{"q": "fine?", "a": "1"}, {"q": "", "a": "2"}, {"q": "empty answer", "a": ""}, {"q": "ok", "a": "3"}]
    folder = tmp_path / "bad"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    source = HFTasks(type="hf", path=str(folder), prompt_key="q", answer_key="a")
    assert [t.answer for t in hf_tasks(source)] == ["1", "3"]
    assert "skipped 2 bad row(s); first: row 1: q must be a non-empty string" in capsys.readouterr().out
    with pytest.raises(DatasetError, match=r"\[train\]: row 1: q must be a non-empty string"):
        hf_tasks(source.model_copy(update={"on_bad_row": "fail"}))


def test_code_and_chat_columns(tmp_path):
    import datasets

    lists = [{"p": "Write add(a, b).", "fn": "add", "tests": ["assert add(1, 2) == 3"]}]
    texts = [{"p": "Write add(a, b).", "fn": "add", "tests": '["assert add(2, 2) == 4"]'}]  # JSON text works too
    datasets.Dataset.from_list(lists).save_to_disk(str(tmp_path / "code"))
    datasets.Dataset.from_list(texts).save_to_disk(str(tmp_path / "code_text"))
    code = HFTasks(
        type="hf", path=str(tmp_path / "code"), prompt_key="p", verifier="code", entry_point_key="fn", tests_key="tests"
    )
    task = hf_tasks(code)[0]
    assert task.verifier == "code" and task.entry == {
        "reward": "all_pass",
        "timeout_s": 5.0,
        "entry_point": "add",
        "tests": ["assert add(1, 2) == 3"],
    }
    as_text = hf_tasks(code.model_copy(update={"path": str(tmp_path / "code_text")}))[0]
    assert as_text.entry["tests"] == ["assert add(2, 2) == 4"]
    chat = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}]
    datasets.Dataset.from_list(chat).save_to_disk(str(tmp_path / "chat"))
    task = hf_tasks(HFTasks(type="hf", path=str(tmp_path / "chat"), messages_key="messages", verifier="grm"))[0]
    assert [m.role for m in task.messages] == ["user"] and task.answer == "hello"


def test_config_checks_name_the_key():
    from pydantic import ValidationError

    cases = [
        ({"verifier": "math"}, "answer_key: verifier math compares with an answer"),
        ({"verifier": "code", "answer_key": "a"}, "exactly one of tests_key, check_key, io_key"),
        ({"answer_key": "a", "tests_key": "t"}, "need `verifier: code`"),
        ({"answer_key": "a", "part": "eval"}, "part: eval needs eval_split"),
        ({"answer_key": "a", "reward": "m:f"}, "needs `verifier: user`"),
        ({"path": "not a hub id!", "answer_key": "a"}, "neither a local path nor a hub id"),
        ({"path": "./nowhere/*.parquet", "answer_key": "a"}, "no file or folder matches"),
    ]
    for extra, message in cases:
        with pytest.raises(ValidationError, match=message.replace("(", r"\(")):
            HFTasks.model_validate({"type": "hf", "path": "acme/data", **extra})


def test_hash_split_parts_are_disjoint_and_whole(saved):
    base = {"type": "hf", "path": str(saved), "prompt_key": "question", "answer_key": "solution", "eval_share": 4}
    train = {t.task_id for t in hf_tasks(HFTasks(**base, part="train"))}
    held = {t.task_id for t in hf_tasks(HFTasks(**base, part="eval"))}
    assert train and held and not train & held and len(train | held) == 40
    by_split = hf_tasks(HFTasks(**{**base, "eval_share": None}, eval_split="test", part="eval"))
    assert [t.task_id for t in by_split] == [f"{saved}:test:{i}" for i in range(5)]


def test_streaming_resumes_at_the_same_row_across_windows_shards_and_epochs(tmp_path):
    import datasets

    for k in range(3):  # three Parquet shards of 17 rows, windows of 7: cuts fall everywhere
        datasets.Dataset.from_list(ROWS[k * 14 : (k + 1) * 14]).to_parquet(str(tmp_path / f"part-{k}.parquet"))
    source = HFTasks(
        type="hf",
        path=str(tmp_path / "*.parquet"),
        prompt_key="question",
        answer_key="solution",
        streaming=True,
        shuffle_buffer=7,
    )
    whole = [t.task_id for t in StreamSampler(source, seed=3).draw(100)]
    assert sorted(whole[:40]) == sorted(whole[40:80]) and len(set(whole[:40])) == 40  # epochs: each row once
    assert whole[:40] != whole[40:80]  # each epoch in its own order
    for cut in (1, 6, 7, 15, 39, 40, 41, 63):
        first = StreamSampler(source, seed=3)
        first.draw(cut)
        saved = json.loads(json.dumps(first.position))  # what a checkpoint keeps
        again = StreamSampler(source, seed=3, position=saved)
        assert [t.task_id for t in again.draw(100 - cut)] == whole[cut:], cut


def test_a_dataset_in_the_hf_cache_under_a_hub_id_offline(tmp_path):
    home = tmp_path / "hf"
    cached_dataset(home, "acme/tiny-sums", ROWS)
    source = {"type": "hf", "path": "acme/tiny-sums", "prompt_key": "question", "answer_key": "solution"}
    pipeline = {
        "name": "hub",
        "model": {"name": "tiny"},
        "stages": [{"name": "rl", "type": "rl", "lr": 1e-4, "steps": 1, "tasks": source}],
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(pipeline))
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    assert cli("validate", str(tmp_path / "p.yaml"), env=env).returncode == 0
    missing = {**pipeline, "stages": [{**pipeline["stages"][0], "tasks": {**source, "path": "acme/absent"}}]}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(missing))
    proc = cli("validate", str(tmp_path / "m.yaml"), env=env)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"{tmp_path / 'm.yaml'}: stages[0].tasks: dataset acme/absent: not in the local ")
    assert "HF_HUB_OFFLINE is set" in proc.stderr


def test_a_model_by_hub_id_resolves_from_the_cache_and_validate_reports_it(tmp_path, tiny_dir):
    home = tmp_path / "hf"
    snapshot = hub_cache(home, "acme/tiny-chat", "models")
    shutil.copytree(tiny_dir, snapshot, dirs_exist_ok=True)
    stage = {"name": "s", "type": "sft", "lr": 1e-3, "steps": 1}
    stage["data"] = {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 4}
    for name in ("acme/tiny-chat", "acme/absent"):
        (tmp_path / "p.yaml").write_text(yaml.safe_dump({"name": "m", "model": {"name": name}, "stages": [stage]}))
        proc = cli("validate", str(tmp_path / "p.yaml"), env={"HF_HOME": str(home), "HF_HUB_OFFLINE": "1"})
        if name == "acme/tiny-chat":
            assert proc.returncode == 0, proc.stderr
            first = proc.stdout.splitlines()[0]
            assert first == f"# model: acme/tiny-chat -> {snapshot} (0.4M parameters, float32)"
            assert yaml.safe_load(proc.stdout)["model"]["name"] == "acme/tiny-chat"
        else:
            assert proc.returncode == 2
            assert proc.stderr.strip() == (
                f"{tmp_path / 'p.yaml'}: model.name: model acme/absent: not in the local Hugging Face cache "
                f"({home / 'hub'}), and HF_HUB_OFFLINE is set"
            )


def test_an_eval_part_without_a_way_to_hold_out_is_an_error(saved):
    source = HFTasks(type="hf", path=str(saved), prompt_key="question", answer_key="solution")
    held_out = source.model_copy(update={"part": "eval"})  # what an eval stage asks of a training source
    with pytest.raises(DatasetError, match="part eval needs eval_split .* or eval_share"):
        hf_tasks(held_out)
