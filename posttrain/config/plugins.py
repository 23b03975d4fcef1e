"""The user's own modules a pipeline file names under `plugins:`, imported before the rest of
the file is read, so that what they register (a stage type, a verifier, a task source) is
known when the stages are validated: `posttrain validate`, `run`, `--resume` and the dry run
all read the file through `files.validate_pipeline`.

A plugin is a module name, found on the path or in the folder the command runs from (as
`python -m` finds it), or a `path/to/file.py`. Importing the same plugin twice is a no-op.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType


class PluginError(Exception):
    """A plugin that cannot be imported, with the reason in one line."""


def import_from_here(name: str) -> ModuleType:
    """The module `name`, looked up on the path and then in the current folder: the installed
    `posttrain` script (unlike `python -m`) does not put that folder on the path."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)
    return importlib.import_module(name)


def import_file(path: Path, module_name: str) -> ModuleType:
    """A Python file loaded as the module `module_name` (registered in sys.modules, so a
    second import of the same name reuses it and pickles of its classes resolve)."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def import_plugins(plugins: object) -> None:
    """Import each plugin; PluginError names the one that failed (`plugins[i]`) and why."""
    if plugins is None:
        return
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise PluginError("plugins: a list of module names or .py files")
    for index, plugin in enumerate(plugins):
        try:
            if plugin.endswith(".py"):
                path = Path(plugin).expanduser()
                if not path.is_file():
                    raise FileNotFoundError(f"no file {path} (from {os.getcwd()})")
                import_file(path, f"_plugin_{path.stem}")
            else:
                import_from_here(plugin)
        except Exception as exc:  # the user's module: any error it raises is the answer
            raise PluginError(f"plugins[{index}]: cannot import {plugin!r}: {type(exc).__name__}: {exc}") from None
