"""Hugging Face datasets as task sources (`type: hf`): a hub id, a `save_to_disk` folder or
data files, read through `datasets` and mapped to `Task`s by column names.

Hub ids resolve through the local HF cache (`HF_HOME`, `HF_HUB_OFFLINE`): a dataset that
`datasets` or `huggingface_hub` has cached is read from there, anything else is downloaded
when the network allows. A missing column is an error naming it and the columns there are;
a bad row is reported by its index and skipped, or stops the load (`on_bad_row`).
`StreamSampler` draws from a streamed dataset without reading it whole, and resumes at the
same row from the `position` a checkpoint keeps.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import re
from pathlib import Path
from typing import Any

from posttrain.config import HFTasks
from posttrain.config.tasks import template_columns
from posttrain.config.verifiers import verifier_facts
from posttrain.data.answers import read_answer
from posttrain.data.choices import CHOICE, choice_entry, render
from posttrain.data.rows import rows_to_tasks
from posttrain.types import Message, Task, infer_answer_form

ROLES = ("system", "user", "assistant", "tool")
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}


class DatasetError(ValueError):
    """A dataset that cannot be read or mapped: one line naming the dataset and the problem."""


# ---------------------------------------------------------------- opening a dataset


def is_saved_dataset(folder: Path) -> bool:
    """A folder written by `Dataset.save_to_disk` (or `DatasetDict.save_to_disk`)."""
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def open_split(source: HFTasks, split: str):
    """The `split` of the source as a `datasets.Dataset`, or an `IterableDataset` when streaming."""
    import datasets

    datasets.disable_progress_bars()
    local = Path(source.path).expanduser()
    try:
        if local.is_dir() and is_saved_dataset(local):
            return _from_disk(local, split, source.streaming)
        if local.exists() or glob.glob(str(local)):
            return _from_files(source, local, split)
        return _from_hub(source, split)
    except DatasetError:
        raise
    except (FileNotFoundError, ValueError, KeyError, ConnectionError) as exc:
        raise DatasetError(f"dataset {source.path}: {_first_line(exc)}") from None


def _from_disk(folder: Path, split: str, streaming: bool):
    import datasets

    data = datasets.load_from_disk(str(folder))
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise DatasetError(f"dataset {folder}: no split {split!r} (splits: {', '.join(data)})")
        data = data[split]
    return data.to_iterable_dataset() if streaming else data


def _from_files(source: HFTasks, local: Path, split: str):
    import datasets

    if local.is_dir():  # a folder of data files, laid out as on the hub
        return datasets.load_dataset(str(local), source.name, split=split, streaming=source.streaming)
    files = sorted(glob.glob(str(local))) or [str(local)]
    kinds = {_FILE_BUILDERS.get(Path(f).suffix) for f in files}
    if None in kinds or len(kinds) != 1:
        raise DatasetError(f"dataset {source.path}: data files must all be one of .jsonl/.json, .parquet, .csv")
    for file in files:
        why = empty_file(Path(file))
        if why:
            raise DatasetError(f"dataset {source.path}: {file} is empty ({why}): give a file with rows")
    try:
        return datasets.load_dataset(kinds.pop(), data_files={split: files}, split=split, streaming=source.streaming)
    except datasets.exceptions.DatasetGenerationError as exc:  # the reader's own error is the cause
        raise DatasetError(f"dataset {source.path}: cannot read it: {_first_line(exc.__cause__ or exc)}") from None


def empty_file(path: Path) -> str | None:
    """Why a data file holds no rows (`0 bytes`, `only whitespace`, `a Parquet file of 0
    rows`), or None: `datasets` meets these with a traceback, not a line."""
    size = path.stat().st_size
    if size == 0:
        return "0 bytes"
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except Exception as exc:  # pyarrow's errors have no common base: any means unreadable
            raise DatasetError(f"{path}: not a readable Parquet file ({_first_line(exc)})") from None
        return "a Parquet file of 0 rows" if rows == 0 else None
    if path.suffix in (".json", ".jsonl") and size <= 1 << 20 and not path.read_bytes().strip():
        return "only whitespace"
    return None


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _from_hub(source: HFTasks, split: str):
    """Through the caches first when offline; online, `datasets` reads the hub (and caches it)."""
    import datasets

    attempts = [_from_snapshot, _from_datasets] if offline() else [_from_datasets, _from_snapshot]
    errors = []
    for attempt in attempts:
        try:
            return attempt(source, split)
        except (FileNotFoundError, ConnectionError, OSError, datasets.exceptions.DatasetNotFoundError) as exc:
            errors.append(_first_line(exc))
    home = os.environ.get("HF_HOME", "~/.cache/huggingface")
    raise DatasetError(
        f"dataset {source.path}: not in the local Hugging Face cache (HF_HOME={home}) and not reachable"
        f"{' (HF_HUB_OFFLINE is set)' if offline() else ''}: {errors[0]}"
    )


def _from_snapshot(source: HFTasks, split: str):
    import datasets
    from huggingface_hub import snapshot_download

    folder = snapshot_download(source.path, repo_type="dataset", revision=source.revision, local_files_only=True)
    return datasets.load_dataset(folder, source.name, split=split, streaming=source.streaming)


def _from_datasets(source: HFTasks, split: str):
    import datasets

    return datasets.load_dataset(
        source.path, source.name, split=split, revision=source.revision, streaming=source.streaming
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# ---------------------------------------------------------------- rows -> tasks


def mapped_columns(source: HFTasks) -> list[str]:
    prompt = template_columns(source.prompt_template) if source.prompt_template else [source.prompt_key]
    keys = [*([source.messages_key] if source.messages_key else prompt), source.answer_key, source.id_key]
    keys += [source.family_key]
    keys += [source.metadata_key, source.entry_point_key, source.tests_key, source.check_key]
    keys += [source.context_key, source.io_key, *(source.filter or {})]
    return [k for k in keys if k]


def check_columns(source: HFTasks, columns: list[str] | None, where: str) -> None:
    """Every mapped column exists: else an error naming it and the columns there are."""
    if columns is None:
        return
    missing = [k for k in dict.fromkeys(mapped_columns(source)) if k not in columns]
    if missing:
        raise DatasetError(
            f"{where}: no column {', '.join(map(repr, missing))} (columns: {', '.join(columns) or 'none'})"
        )


def eval_part(key: str, share: int) -> bool:
    """Whether a row (by its normalized prompt) is in the eval part of a hash split."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % share == 0


def _normalized(messages: tuple[Message, ...]) -> str:
    text = "\n".join(m.content for m in messages if m.role == "user")
    return re.sub(r"\s+", " ", text).strip().casefold()


def kept(source: HFTasks, row: dict) -> bool:
    """The row passes `filter` (equal to the value, or one of a list of values)."""
    for column, wanted in (source.filter or {}).items():
        values = wanted if isinstance(wanted, list) else [wanted]
        if row.get(column) not in values:
            return False
    return True


class RowMapper:
    """Turns one row into a Task (ValueError naming the problem for a bad row)."""

    def __init__(self, source: HFTasks, split: str):
        self.source, self.split = source, split
        self.tag = f"{source.path}:{split}"

    def __call__(self, row: dict, index: int) -> Task | None:
        """The row's Task; None when the row belongs to the other part of a hash split."""
        s = self.source
        messages, answer = self._messages(row)
        if s.part != "all" and s.eval_share and eval_part(_normalized(messages), s.eval_share) != (s.part == "eval"):
            return None
        if s.answer_key:
            answer = _text(row[s.answer_key], s.answer_key)
        if verifier_facts(s.verifier).needs_answer and not (answer or "").strip():
            raise ValueError(f"{s.answer_key} is empty")
        reference = answer
        if answer is not None and s.answer_format:
            answer = read_answer(answer, s.answer_format, row)
        family = s.family or (str(row[s.family_key]) if s.family_key else "hf")
        task_id = str(row[s.id_key]) if s.id_key else f"{self.tag}:{index}"
        entry = self._entry(row, index, messages, answer)
        if reference != answer:
            entry["reference"] = reference  # the reference as written (the gold check reads it)
        form = s.answer_form
        if form == "infer":
            form = infer_answer_form("\n".join(m.content for m in messages if m.role == "user"))
        if form == CHOICE:
            entry.update(choice_entry(messages[-1].content, answer))
            answer = entry["answer"]
        if form:
            entry["answer_form"] = form
        return Task(
            task_id=task_id,
            family=family,
            messages=messages,
            answer=answer,
            entry=entry,
            verifier=s.verifier,
            answer_form=form,
        )

    def _messages(self, row: dict) -> tuple[tuple[Message, ...], str | None]:
        """The prompt messages, and the answer when a chat row ends with the assistant's turn."""
        s = self.source
        if not s.messages_key:
            prompt = render(s.prompt_template, row) if s.prompt_template else row[s.prompt_key]
            if not isinstance(prompt, str) or not prompt.strip():
                raise ValueError(f"{s.prompt_key} must be a non-empty string")
            system = (Message("system", s.system_prompt),) if s.system_prompt else ()
            return system + (Message("user", prompt),), None
        raw = row[s.messages_key]
        if isinstance(raw, str):
            raw = _json(raw, s.messages_key)
        if (
            not isinstance(raw, list)
            or not raw
            or not all(
                isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in raw
            )
        ):
            raise ValueError(f"{s.messages_key} must be a non-empty list of {{role, content}} with a known role")
        messages = tuple(Message(m["role"], m["content"]) for m in raw)
        if messages[-1].role == "assistant":  # a chat row: its last turn is the reference
            messages, answer = messages[:-1], messages[-1].content
            if not messages:
                raise ValueError(f"{s.messages_key} holds only an assistant message")
            return messages, answer
        return messages, None

    def _entry(self, row: dict, index: int, messages, answer) -> dict:
        s = self.source
        mapped = set(mapped_columns(s))
        metadata = {k: _jsonable(v) for k, v in row.items() if k not in mapped}
        shape = verifier_facts(s.verifier).entry
        if shape == "code":
            return _code_entry(s, row)
        if shape == "reasoning_gym":
            meta = row[s.metadata_key] if s.metadata_key else {}
            meta = _json(meta, s.metadata_key) if isinstance(meta, str) else meta
            question = next((m.content for m in reversed(messages) if m.role == "user"), "")
            return {"question": question, "answer": answer, "metadata": _jsonable(meta or {})}
        entry: dict[str, Any] = {"answer": answer, "metadata": metadata, "row": index}
        return entry


def _code_entry(s: HFTasks, row: dict) -> dict:
    entry: dict[str, Any] = {"reward": s.code_reward, "timeout_s": s.timeout_s}
    if s.entry_point_key:
        entry["entry_point"] = _text(row[s.entry_point_key], s.entry_point_key)
    if s.tests_key:
        tests = row[s.tests_key]
        tests = _json(tests, s.tests_key) if isinstance(tests, str) and tests.lstrip().startswith("[") else tests
        tests = [tests] if isinstance(tests, str) else tests
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise ValueError(f"{s.tests_key} must be a non-empty list of assert statements")
        entry["tests"] = tests
    if s.check_key:
        entry["check"] = _text(row[s.check_key], s.check_key)
    if s.context_key and row.get(s.context_key):
        entry["context"] = _text(row[s.context_key], s.context_key)
    if s.io_key:
        cases = row[s.io_key]
        cases = _json(cases, s.io_key) if isinstance(cases, str) else cases
        if not isinstance(cases, list) or not cases or not all(isinstance(c, dict) for c in cases):
            raise ValueError(f"{s.io_key} must be a non-empty list of {{input, output}}")
        entry["io"] = [{"input": str(c.get("input", "")), "output": str(c.get("output", ""))} for c in cases]
    from posttrain.data.coding import validate_entry

    return validate_entry(entry)  # the code verifier's own schema check: a bad row names its problem


def _is_message(m) -> bool:
    return isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)


def _text(value, column: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{column} must be a string or a number, got {type(value).__name__}")
    return str(value)


def _json(text: str, column: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{column} is not valid JSON ({exc.msg})") from None


def _jsonable(value):
    """Row values go into task entries, which travel through Ray and into saved rollouts."""
    return json.loads(json.dumps(value, default=str))


# ---------------------------------------------------------------- a whole source


def _split_of(source: HFTasks) -> str:
    """The split of the source's part (`eval_split` for the eval part when it has one)."""
    if source.part != "all" and not (source.eval_split or source.eval_share):
        # an eval stage asks every held-out source for its eval part (data/heldout.py)
        raise DatasetError(
            f"dataset {source.path}: part {source.part} needs eval_split (a split of its own) or eval_share "
            "(1 row in N by a hash of the prompt), so that train and eval never overlap"
        )
    return source.eval_split if source.part == "eval" and source.eval_split else source.split


def hf_tasks(source: HFTasks) -> list[Task]:
    """Every task of the source (a streamed one is read through once, up to `limit`)."""
    split = _split_of(source)
    data = open_split(source, split)
    where = f"dataset {source.path}[{split}]"
    columns = data.column_names
    check_columns(source, columns, where)
    rows = ((i, row) for i, row in enumerate(data) if kept(source, row))
    if columns is None:  # a stream of unknown features: check them on the first row
        rows = _checked_first(rows, source, where)
    return rows_to_tasks(
        rows, RowMapper(source, split), source.on_bad_row, where, error=DatasetError, limit=source.limit
    )


def _checked_first(rows, source: HFTasks, where: str):
    for n, (index, row) in enumerate(rows):
        if n == 0:
            check_columns(source, list(row), where)
        yield index, row


# ---------------------------------------------------------------- streaming


class StreamSampler:
    """Draws tasks from a streamed dataset, epoch after epoch, never holding it whole.

    Rows are read in windows of `shuffle_buffer` rows, each window shuffled with a seed of
    (seed, epoch, window); `position` is plain JSON: the rows drawn, the epoch, the window's
    start as `datasets`' own iterator state, and the offset in the window. A sampler given
    a saved position reopens the stream at that window and continues at the same row.
    """

    def __init__(self, source: HFTasks, seed: int, position: dict | int | None = None):
        self.source, self.seed = source, seed
        self.split = _split_of(source)
        self.where = f"dataset {source.path}[{self.split}] (streaming)"
        self.mapper = RowMapper(source, self.split)
        self.drawn = 0
        self.epoch = 0
        self.window: list[Task] = []
        self.window_index = 0  # windows started in this epoch
        self.window_state: dict | None = None  # the stream's state where the current window starts
        self.offset = 0
        self.used_in_epoch = 0  # rows kept this epoch, for `limit`
        self.used_at_window = 0
        self.bad = 0
        self._stream = None
        self._iter = None
        self._open_epoch(None)
        self._next_window()
        if position:
            self.position = position

    # ------------------------------------------------------------ the stream

    def _open_epoch(self, state: dict | None) -> None:
        self._stream = open_split(self.source, self.split)
        if state is not None:
            self._stream.load_state_dict(state["stream"])
        self._iter = iter(self._stream)
        self._index = state["index"] if state else 0
        if self.epoch == 0 and state is None and self._stream.column_names is not None:
            check_columns(self.source, self._stream.column_names, self.where)

    def _read_row(self) -> dict | None:
        try:
            row = next(self._iter)
        except StopIteration:
            return None
        self._index += 1
        return row

    def _next_window(self) -> None:
        """Read the next window of usable tasks (a new epoch when the stream ends)."""
        for _ in range(2):
            self.window_state = {"stream": self._stream.state_dict(), "index": self._index}
            self.used_at_window = self.used_in_epoch
            self.window = self._read_window()
            if self.window:
                random.Random(f"{self.seed}/{self.epoch}/{self.window_index}").shuffle(self.window)
                self.window_index += 1
                self.offset = 0
                return
            if self.epoch == 0 and self.used_in_epoch == 0:
                break
            self.epoch, self.window_index, self.used_in_epoch = self.epoch + 1, 0, 0
            self._open_epoch(None)
        raise DatasetError(f"{self.where}: no usable task" + (f" ({self.bad} bad rows)" if self.bad else ""))

    def _read_window(self) -> list[Task]:
        out: list[Task] = []
        limit = self.source.limit
        while len(out) < self.source.shuffle_buffer and (limit is None or self.used_in_epoch < limit):
            index = self._index
            row = self._read_row()
            if row is None:
                break
            if self.epoch == 0 and index == 0 and self._stream.column_names is None:
                check_columns(self.source, list(row), self.where)
            if not kept(self.source, row):
                continue
            try:
                task = self.mapper(row, index)
            except ValueError as exc:
                if self.source.on_bad_row == "fail":
                    raise DatasetError(f"{self.where}: row {index}: {exc}") from None
                self.bad += 1
                if self.bad == 1:
                    print(f"{self.where}: skipping bad rows; first: row {index}: {exc}", flush=True)
                continue
            if task is not None:
                out.append(task)
                self.used_in_epoch += 1
        return out

    # ------------------------------------------------------------ the sampler's interface

    @property
    def tasks(self) -> list[Task]:
        """The current window (the RL driver counts prompts that never fit against it)."""
        return self.window

    def draw(self, count: int) -> list[Task]:
        out = []
        for _ in range(count):
            if self.offset >= len(self.window):
                self._next_window()
            out.append(self.window[self.offset])
            self.offset += 1
            self.drawn += 1
        return out

    @property
    def position(self) -> dict:
        return {
            "drawn": self.drawn,
            "epoch": self.epoch,
            "window": self.window_index - 1,
            "window_state": self.window_state,
            "used": self.used_at_window,
            "offset": self.offset,
        }

    @position.setter
    def position(self, value: dict) -> None:
        if not isinstance(value, dict):
            raise ValueError("a streamed source resumes from a position saved by a streamed source")
        self.drawn, self.epoch = value["drawn"], value["epoch"]
        self.window_index, self.used_in_epoch = value["window"], value["used"]
        self._open_epoch(value["window_state"])
        self._next_window()
        self.offset = value["offset"]


def task_sampler(source, seed: int, position=None):
    """The sampler of a stage's task source: a `StreamSampler` for a streamed `hf` source,
    else a `TaskSampler` over every task."""
    from posttrain.data.tasks import TaskSampler, load_tasks

    if getattr(source, "streaming", False):  # only an `hf` source streams
        return StreamSampler(source, seed, position)
    return TaskSampler(load_tasks(source), seed=seed, position=position or 0)
