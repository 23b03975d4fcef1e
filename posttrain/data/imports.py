"""Loading the user's own code that a pipeline file names: `module:name`, the module found
on the path or in the folder the command runs from (as `python -m` finds it), or
`path/to/file.py:name`. Reward functions, environments and answer formats all resolve
the same way, in the driver and in worker processes alike.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from posttrain.config.plugins import import_from_here


def import_user_module(name: str):
    """The module `name`, looked up on the path and then in the current folder (as a
    pipeline's `plugins` are)."""
    return import_from_here(name)


def load_object(spec: str, prefix: str = "_user"):
    """What `module:name` or `path/to/file.py:name` names (ImportError, AttributeError when
    it cannot be loaded); a file is loaded as the module `{prefix}_{stem}`."""
    target, _, name = spec.rpartition(":")
    if not target.endswith(".py"):
        return getattr(import_user_module(target), name)
    path = Path(target).expanduser()
    module_spec = importlib.util.spec_from_file_location(f"{prefix}_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)
