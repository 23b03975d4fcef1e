"""The judge calls both GRM methods make (`grm.py`: rubric, `grm_pairwise.py`: pairwise):
what the judge is told the task was, the keys its calls are cached by, the bounded cache,
and asking a batch of calls until each reply parses. Calls in, one `Asked` per call out
(its parsed value or its last error, with every raw reply).
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from posttrain.rewards.grm_judge import JudgeCall, JudgeReply
from posttrain.rewards.grm_parse import ParseError
from posttrain.types import Task

log = logging.getLogger(__name__)

RETRY_TEMPERATURE = 0.7  # a retry at temperature 0 would repeat the same malformed reply
TOP_LOGPROBS = 10


def task_text(task: Task) -> str:
    """What the judge is told the task was: the user turn, with any system turn before it."""
    turns = [m for m in task.messages if m.role in ("system", "user")]
    if len(turns) == 1:
        return turns[0].content
    return "\n".join(f"{m.role}: {m.content}" for m in turns)


def digest(*parts: str) -> str:
    """A cache key: 24 hex digits of the SHA-256 of the parts, kept apart by a separator."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


class LRU(OrderedDict):
    """A dict of at most `size` items: reading one makes it the newest, the oldest go first."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


@dataclass
class Asked:
    """The outcome of one judge call and its retries."""

    value: object | None
    raw: list[str]
    error: str | None = None
    resent: int = 0  # requests the backend sent again after a transport failure, over all tries

    @property
    def tries(self) -> int:
        return len(self.raw)


async def ask(
    backend, calls: list[JudgeCall], parse: Callable[[JudgeReply], object], temperature: float, retries: int
) -> list[Asked]:
    """Each call until its reply parses, at most 1 + retries times; all pending calls of
    a round go to the judge (`backend`) together."""
    out = [Asked(None, []) for _ in calls]
    pending, unreadable = list(range(len(calls))), set()
    hot = max(temperature, RETRY_TEMPERATURE)
    for attempt in range(1 + retries):
        if not pending:
            break
        # only a reply that came back and could not be read is asked again hotter: a failed
        # request (network, status, timeout) is sent again as it was
        asked = [replace(calls[i], temperature=hot if i in unreadable else temperature) for i in pending]
        replies = await backend.complete(asked)
        still = []
        for i, reply in zip(pending, replies):
            out[i].raw.append(reply.text if reply.text is not None else f"<error: {reply.error}>")
            out[i].resent += reply.resent
            try:
                if reply.text is None:
                    raise ParseError(reply.error or "no reply")
                out[i].value, out[i].error = parse(reply), None
            except ParseError as exc:
                out[i].error = str(exc)
                still.append(i)
                if not reply.transport:
                    unreadable.add(i)
        if still:
            log.warning(
                "grm: %d of %d judge replies unusable (try %d): %s",
                len(still),
                len(pending),
                attempt + 1,
                out[still[0]].error,
            )
        pending = still
    return out
