"""A function named by `module:name` and imported when first called. The tables of verifiers,
task sources and stage types name their parts so: a table imports none of the modules it
names, and those modules may look things up in the table without an import circle (the
entry-point pattern). A name that does not resolve fails at its first call, naming itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Lazy:
    """`Lazy("posttrain.data.hf:hf_tasks")(source)` imports `posttrain.data.hf` on the first
    call and calls its `hf_tasks(source)`."""

    path: str
    _target: list = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        module, sep, name = self.path.partition(":")
        if not (module and sep and name):
            raise ValueError(f"{self.path!r}: a lazy function is named `module:name`")

    def resolve(self) -> Callable[..., Any]:
        if not self._target:
            module, _, name = self.path.partition(":")
            try:
                self._target.append(getattr(importlib.import_module(module), name))
            except (ImportError, AttributeError) as exc:
                raise ImportError(f"{self.path} cannot be loaded: {type(exc).__name__}: {exc}") from exc
        return self._target[0]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)
