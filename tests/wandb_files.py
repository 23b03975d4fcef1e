"""Read wandb's offline run files (`run-ID.wandb`) back: wandb 0.31 ships no reader, and
the format is a LevelDB-style log (a 7-byte header `:W&B` + version, then 32 KiB blocks of
records, each `crc32 | length u16 | type u8 | payload`) of protobuf `Record`s."""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path):
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a wandb run file"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # block trailer: padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def history(path: Path) -> list[dict]:
    """Every logged row of one offline run file."""
    rows = []
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def run_config(path: Path) -> dict:
    for record in records(path):
        if record.WhichOneof("record_type") == "run":
            return {item.key: json.loads(item.value_json) for item in record.run.config.update}
    return {}


def run_meta(path: Path) -> dict:
    for record in records(path):
        if record.WhichOneof("record_type") == "run":
            return {
                "group": record.run.run_group,
                "name": record.run.display_name,
                "job_type": record.run.job_type,
                "project": record.run.project,
            }
    return {}
