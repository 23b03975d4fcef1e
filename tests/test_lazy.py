"""Tables name their parts by path, `package.module:function` (`config/lazy.py`): every
path in the shipped task-source table resolves, and one that does not fails naming itself.
(The verifier table's paths: tests/test_verifier_table.py.)"""

from __future__ import annotations

import pytest

from posttrain.config.lazy import Lazy, LazyError, lazy_fields
from posttrain.data import registry as sources
from posttrain.data.registry import SOURCE_KINDS, SourceKind


def test_every_path_in_the_task_source_table_resolves():
    named = [(f"{name}.{part}", lazy) for name, kind in SOURCE_KINDS.items() for part, lazy in lazy_fields(kind)]
    assert len(named) >= 15, named  # the shipped sources' builders and preflights
    for where, lazy in named:
        assert callable(lazy.resolve()), where


def test_a_lazy_function_is_imported_at_its_first_call():
    lazy = Lazy("json:dumps")
    assert lazy([1]) == "[1]"
    assert lazy.resolve() is __import__("json").dumps


@pytest.mark.parametrize(
    "path, problem",
    [
        ("posttrain.data.no_such_module:f", "there is no module posttrain.data.no_such_module"),
        ("posttrain.data.tasks:no_such_function", "module posttrain.data.tasks has no function no_such_function"),
    ],
)
def test_a_source_part_at_a_wrong_path_fails_at_first_use_naming_the_entry(path, problem):
    from posttrain.config import ArithmeticTasks

    kind = SourceKind(ArithmeticTasks, path, lambda source: ("math",))  # made: the path is read when used
    with pytest.raises(LazyError) as caught:
        kind.build(None)
    assert str(caught.value) == f"task source 'arithmetic': build: {path!r}: {problem}"
    assert "arithmetic" in sources.SOURCE_KINDS  # the shipped entry is untouched


@pytest.mark.parametrize("path", ["posttrain.data.tasks", ":load_tasks", "posttrain.data.tasks:", "a b:c"])
def test_a_malformed_path_is_refused_when_the_entry_is_made(path):
    from posttrain.config import ArithmeticTasks

    with pytest.raises(
        ValueError, match=r"task source 'arithmetic': build: .* is not a path `package\.module:function`"
    ):
        SourceKind(ArithmeticTasks, path, lambda source: ("math",))
