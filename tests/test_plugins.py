"""`plugins:` in a pipeline file: the user's modules imported before the stages are read, so
a stage type they register is known to `validate` (docs/add-a-stage-type.md runs a whole
pipeline with one); a plugin that cannot be imported is one line naming it."""

import sys

import pytest

import posttrain.stages.registry as registry
from posttrain.config.files import ConfigError, validate_pipeline

PLUGIN = """
from typing import Literal
from pydantic import Field
from posttrain.config.stages import StageSchema
from posttrain.stages.registry import StageType, register, restore_nothing


class NoteStage(StageSchema):
    type: Literal["note_for_test"]
    name: str = Field(description="Stage name.")
    trains = "nothing"


register(StageType(NoteStage, lambda run: None, restore_nothing, records_init=False))
"""


def raw(*plugins, stage_type="note_for_test") -> dict:
    return {"model": {"name": "tiny"}, "plugins": list(plugins), "stages": [{"name": "n", "type": stage_type}]}


@pytest.fixture
def plugin_file(tmp_path, monkeypatch):
    path = tmp_path / "note_stage.py"
    path.write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)
    yield path
    if "note_for_test" in registry.STAGE_TYPES:
        registry.unregister("note_for_test")
    for name in ("note_stage", "_plugin_note_stage"):
        sys.modules.pop(name, None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def test_a_stage_type_is_unknown_without_its_plugin(plugin_file):
    with pytest.raises(ConfigError, match=r"stages\[0\]: unknown type 'note_for_test'"):
        validate_pipeline(raw(), "p.yaml")


@pytest.mark.parametrize("spec", ["note_stage", "note_stage.py"])
def test_a_plugin_by_module_name_or_file_registers_its_stage_type(plugin_file, spec):
    config = validate_pipeline(raw(spec), "p.yaml")
    assert config.plugins == [spec] and config.stages[0].type == "note_for_test"
    assert validate_pipeline(raw(spec), "p.yaml").stages[0].name == "n"  # a second read imports nothing again


def test_a_plugin_that_cannot_be_imported_is_one_line(plugin_file):
    with pytest.raises(ConfigError) as missing:
        validate_pipeline(raw("no_such_plugin_module"), "p.yaml")
    assert str(missing.value) == (
        "p.yaml: plugins[0]: cannot import 'no_such_plugin_module': ModuleNotFoundError: "
        "No module named 'no_such_plugin_module'"
    )
    (plugin_file.parent / "raises.py").write_text("raise RuntimeError('needs a GPU')\n")
    with pytest.raises(ConfigError, match=r"plugins\[1\]: cannot import 'raises.py': RuntimeError: needs a GPU"):
        validate_pipeline(raw("note_stage", "raises.py"), "p.yaml")
    with pytest.raises(ConfigError, match=r"plugins\[0\]: cannot import 'gone.py': FileNotFoundError: no file gone.py"):
        validate_pipeline(raw("gone.py"), "p.yaml")
    with pytest.raises(ConfigError, match="plugins: a list of module names"):
        validate_pipeline({**raw(), "plugins": "note_stage"}, "p.yaml")
