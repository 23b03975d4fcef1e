"""A function named by its path, `package.module:function`, and imported when first used.
The tables of verifiers and task sources take a part either as a function or as its path:
a table then imports none of the modules it names, and those modules may look things up in
the table without an import circle (the entry-point pattern). A malformed path is refused
when the entry is made; a path that leads nowhere fails at first use, naming the entry.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FUNCTION_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


class LazyError(ImportError):
    """A path that does not lead to a function; str() names the entry's part and the path."""


def load_function(path: str, what: str) -> Callable[..., Any]:
    """The function at `path`; `what` names whose part it is, in the error."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise  # the module exists, and one of its own imports is missing
        raise LazyError(f"{what}: {path!r}: there is no module {exc.name}") from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise LazyError(f"{what}: {path!r}: module {module_name} has no function {attr}")
    return function


@dataclass(frozen=True)
class Lazy:
    """`Lazy("posttrain.data.hf:hf_tasks", what)(source)` imports `posttrain.data.hf` at the
    first call and calls its `hf_tasks(source)`."""

    path: str
    what: str = "a lazy function"
    _target: list = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not FUNCTION_PATH.fullmatch(self.path):
            raise ValueError(f"{self.what}: {self.path!r} is not a path `package.module:function`")

    def resolve(self) -> Callable[..., Any]:
        if not self._target:
            self._target.append(load_function(self.path, self.what))
        return self._target[0]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


def lazy_parts(entry: Any, parts: tuple[str, ...], what: str) -> None:
    """In a frozen dataclass `entry`, each of `parts` given as a path becomes its `Lazy`."""
    for name in parts:
        value = getattr(entry, name)
        if isinstance(value, str):
            object.__setattr__(entry, name, Lazy(value, f"{what}: {name}"))


def lazy_fields(entry: Any) -> list[tuple[str, Lazy]]:
    """The parts of a dataclass entry that are named by path: (field, its Lazy)."""
    return [(f.name, v) for f in dataclasses.fields(entry) if isinstance(v := getattr(entry, f.name), Lazy)]
