"""Pinning a process to CPU cores, so that engines and trainer ranks sharing one machine
run side by side on cores of their own (`rollout.cores`, `trainer.cores`) instead of
taking turns on every core."""

from __future__ import annotations

import os


def pin_to_cores(cores: list[int] | None) -> list[int]:
    """Pin every thread of this process (and the threads it starts later) to `cores`;
    returns the cores it may now run on. A core this machine does not have is an error."""
    if cores:
        allowed = set(cores)
        missing = allowed - set(range(os.cpu_count() or 1))
        if missing:
            raise ValueError(f"cores {sorted(missing)} do not exist on this machine ({os.cpu_count()} cores)")
        for task in os.listdir("/proc/self/task"):  # sched_setaffinity pins one thread at a time
            try:
                os.sched_setaffinity(int(task), allowed)
            except ProcessLookupError:  # a thread that ended meanwhile
                pass
    return sorted(os.sched_getaffinity(0))
