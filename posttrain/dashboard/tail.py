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
TORN_TRIES = 256  # places a whole row may start in a bad line, tried in order (bounds the work on garbage)


class JsonlTail:
    """Remembers where it stopped in one file; `poll` says whether the file started over and
    yields (byte offset, line number, raw bytes) for every whole line appended since."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.identity: tuple[int, int] | None = None
        self.offset = 0
        self.lineno = 0  # whole lines before `offset` (empty ones too): line numbers as an editor shows them
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

    def poll(self) -> tuple[bool, Iterator[tuple[int, int, bytes]]]:
        """(started over, the whole lines appended since the last poll as (offset, line number,
        raw bytes)). The lines stream from the file a chunk at a time; the offset moves past a
        line only once the caller has taken it, so a caller that stops early (or raises) gets
        the rest at the next poll and never a line twice."""
        reset = self.changed_whole()
        if reset:
            self.identity, self.offset, self.lineno, self.mark = None, 0, 0, b""
        return reset, self._lines()

    def _lines(self) -> Iterator[tuple[int, int, bytes]]:
        try:
            f = self.path.open("rb")
        except OSError:
            return
        with f:
            stat = os.fstat(f.fileno())
            self.identity = (stat.st_dev, stat.st_ino)
            start_offset = self.offset
            try:
                f.seek(self.offset)
                buf = b""
                while data := f.read(CHUNK):
                    buf += data
                    end = buf.rfind(b"\n")
                    if end < 0:  # a line longer than a chunk: read on
                        continue
                    start, base = 0, self.offset
                    while start <= end:
                        stop = buf.index(b"\n", start)
                        if stop > start:
                            yield base + start, self.lineno + 1, buf[start:stop]
                        self.offset, self.lineno = base + stop + 1, self.lineno + 1
                        start = stop + 1
                    buf = buf[end + 1 :]  # a torn last line waits here for its end
            finally:
                if self.offset != start_offset:
                    f.seek(max(0, self.offset - CHECK))
                    self.mark = f.read(self.offset - max(0, self.offset - CHECK))


class BadRows:
    """The rows of one file a reader skipped: how many, and the first EXAMPLES as (line, why),
    for the page's "bad rows" note. Cleared when the file is read again from the start."""

    EXAMPLES = 20

    def __init__(self, name: str):
        self.name = name
        self.clear()

    def clear(self) -> None:
        self.count = 0
        self.examples: list[dict] = []

    def add(self, line: int | str, why: str) -> None:
        """`line`: its line number, or where it is in a JSON file (`rows[3]`)."""
        self.count += 1
        if len(self.examples) < self.EXAMPLES:
            self.examples.append({"line": line, "why": why})

    def report(self) -> dict | None:
        return {"file": self.name, "count": self.count, "examples": self.examples} if self.count else None


class BadRow(ValueError):
    """A row that is whole JSON but not a row of its file; str() says why, in one line."""


def decode(offset: int, line: bytes) -> list[tuple[int, dict | None, str]]:
    """A line as [(offset, row, "")], or [(offset, None, why)] when it is not a JSON object.
    A torn line that a whole row follows on the same line (a writer stopped mid-row, the
    next one appended after it) gives both: the torn part as a bad row, and the row, with the
    offset where it starts."""
    row, why = _object(line)
    if row is not None:
        return [(offset, row, "")]
    at, tries = line.find(b'{"', 1), 0
    while at > 0 and tries < TORN_TRIES:
        found, _ = _object(line[at:])
        if found is not None:
            return [(offset, None, f"torn line ({at} bytes) before a whole row"), (offset + at, found, "")]
        at, tries = line.find(b'{"', at + 1), tries + 1
    return [(offset, None, why)]


def _object(line: bytes) -> tuple[dict | None, str]:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            row = json.loads(line)
        except UnicodeDecodeError:
            return None, "not UTF-8 text"
        except json.JSONDecodeError as exc:
            return None, f"not JSON ({exc.msg} at character {exc.pos})"
        except RecursionError:
            return None, "not JSON (nested too deeply)"
    if not isinstance(row, dict):
        return None, f"a JSON {type(row).__name__}, not an object"
    return row, ""


def parse(line: bytes) -> dict | None:
    """A JSON object, or None for a line that is not one (never a crash on a bad line).
    orjson first (about twice as fast on millions of rows); Python's json for what orjson
    refuses, such as the NaN that json.dumps writes for a non-finite float."""
    return _object(line)[0]


def read_raw(path: Path, offset: int) -> bytes:
    """The raw line that starts at `offset`, without its newline (b"" when unreadable)."""
    try:
        with Path(path).open("rb") as f:
            f.seek(offset)
            return f.readline().rstrip(b"\n")
    except OSError:
        return b""


def read_line(path: Path, offset: int) -> dict | None:
    """The row that starts at `offset` (an index entry): one seek, one line."""
    return parse(read_raw(path, offset))
