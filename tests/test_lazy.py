"""Tables name their parts by `module:function` (`config/lazy.py`): every name in the
shipped tables resolves, and one that does not fails naming itself."""

from __future__ import annotations

import dataclasses

import pytest

from posttrain.config.lazy import Lazy
from posttrain.data.registry import SOURCE_KINDS


def _lazies(table: dict) -> list[tuple[str, Lazy]]:
    return [
        (f"{name}.{field.name}", value)
        for name, entry in table.items()
        for field in dataclasses.fields(entry)
        if isinstance(value := getattr(entry, field.name), Lazy)
    ]


def test_every_part_of_the_task_source_table_resolves():
    named = _lazies(SOURCE_KINDS)
    assert len(named) >= 15, named  # the shipped sources' builders and preflights
    for where, lazy in named:
        assert callable(lazy.resolve()), where


def test_a_lazy_function_is_imported_at_its_first_call():
    lazy = Lazy("json:dumps")
    assert lazy([1]) == "[1]"
    assert lazy.resolve() is __import__("json").dumps


@pytest.mark.parametrize("path", ["posttrain.data.no_such_module:f", "posttrain.data.tasks:no_such_function"])
def test_a_name_that_does_not_resolve_fails_naming_itself(path):
    lazy = Lazy(path)  # the table still loads: the name is checked when the part is first used
    with pytest.raises(ImportError, match=path.replace(".", r"\.")):
        lazy()


@pytest.mark.parametrize("path", ["posttrain.data.tasks", ":load_tasks", "posttrain.data.tasks:"])
def test_a_name_without_module_and_function_is_refused(path):
    with pytest.raises(ValueError, match="module:name"):
        Lazy(path)
