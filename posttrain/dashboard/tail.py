"""Incremental reading of a JSON-lines file that a run appends to: each poll reads only the
bytes appended since the last one, up to the last whole line (a torn last line waits for
its end). A file replaced or rewritten (a resume's set-aside renames a new one into place)
is noticed by its inode, its size, or the bytes before the remembered offset, and read again
from the start."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import orjson

CHUNK = 8 << 20  # bytes read at a time: memory stays bounded however large the file
CHECK = 64  # bytes before the offset compared at each poll to notice a rewrite in place


class JsonlTail:
    """Remembers where it stopped in one file; `poll` says whether the file started over and
    yields (byte offset, row) for every whole line appended since."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.identity: tuple[int, int] | None = None
        self.offset = 0
        self.mark = b""  # the CHECK bytes that end at `offset`

    def changed_whole(self) -> bool:
        """True when the file is not the one read so far (replaced, shortened or rewritten);
        the reader then starts over from byte 0."""
        try:
            stat = self.path.stat()
        except OSError:
            return self.identity is not None
        identity = (stat.st_dev, stat.st_ino)
        if self.identity is None:
            return False
        if identity != self.identity or stat.st_size < self.offset:
            return True
        if self.mark:
            with self.path.open("rb") as f:
                f.seek(self.offset - len(self.mark))
                return f.read(len(self.mark)) != self.mark
        return False

    def poll(self) -> tuple[bool, Iterator[tuple[int, bytes]]]:
        """(started over, the whole lines appended since the last poll as (offset, raw bytes)).
        The lines stream from the file a chunk at a time; the caller consumes them all and
        parses what it keeps."""
        reset = self.changed_whole()
        if reset:
            self.identity, self.offset, self.mark = None, 0, b""
        return reset, self._lines()

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        try:
            f = self.path.open("rb")
        except OSError:
            return
        with f:
            stat = os.fstat(f.fileno())
            self.identity = (stat.st_dev, stat.st_ino)
            start_offset = self.offset
            f.seek(self.offset)
            buf = b""
            while data := f.read(CHUNK):
                buf += data
                end = buf.rfind(b"\n")
                if end < 0:  # a line longer than a chunk: read on
                    continue
                start = 0
                while start <= end:
                    stop = buf.index(b"\n", start)
                    if stop > start:
                        yield self.offset + start, buf[start:stop]
                    start = stop + 1
                self.offset += end + 1
                buf = buf[end + 1 :]  # a torn last line waits here for its end
            if self.offset != start_offset:
                f.seek(max(0, self.offset - CHECK))
                self.mark = f.read(self.offset - max(0, self.offset - CHECK))


def parse(line: bytes) -> dict | None:
    """A JSON object, or None for a line that is not one (never a crash on a bad line).
    orjson first (about twice as fast on millions of rows); Python's json for what orjson
    refuses, such as the NaN that json.dumps writes for a non-finite float."""
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
    return row if isinstance(row, dict) else None


def read_line(path: Path, offset: int) -> dict | None:
    """The row that starts at `offset` (an index entry): one seek, one line."""
    try:
        with Path(path).open("rb") as f:
            f.seek(offset)
            return parse(f.readline())
    except OSError:
        return None
