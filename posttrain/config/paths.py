"""Where posttrain keeps what it builds once and reuses: converted and generated models,
and the held-out check's prompt fingerprints. `POSTTRAIN_CACHE` moves it (a shared file
system on a cluster)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("POSTTRAIN_CACHE", Path.home() / ".cache" / "posttrain"))
