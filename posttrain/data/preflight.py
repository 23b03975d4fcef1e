"""What a task source is checked for before a run starts (`posttrain validate` and the
run's preflight): each source's own reads, found as config errors naming the key.

The task-source table (`data/registry.py`) names one of these per source type; the
pipeline's preflight calls it with the stage, the leaf source and its key path, and scores
the tasks it returns against their gold (`rewards/gold.py`) where the stage scores tasks.
"""

from __future__ import annotations

from posttrain.config.files import ConfigError
from posttrain.data.imports import load_object
from posttrain.types import Task


def load_reward_function(spec: str):
    """The function a `module:function` reward spec names, its module found on the path or
    in the current folder as environments are (ImportError or AttributeError if it cannot
    be loaded)."""
    return load_object(spec)


def preflight_reward(leaf, where: str) -> None:
    """A `reward: module:function` that cannot be loaded (from the path or the current
    folder, as environments are) is an error at its own key."""
    try:
        load_reward_function(leaf.reward)
    except Exception as exc:  # the user's module: whatever its import raises
        raise ConfigError(f"{where}.reward: cannot load {leaf.reward}: {type(exc).__name__}: {exc}") from None


def preflight_families(stage, leaf, where: str) -> None:
    """Each reasoning-gym family generated once: a bad family or parameter names its key."""
    from posttrain.data.tasks import load_tasks

    for j, family in enumerate(leaf.families):
        try:
            load_tasks(leaf.model_copy(update={"families": [family], "size": 1}))
        except ValueError as exc:
            raise ConfigError(f"{where}.families[{j}]: {exc}") from None


def preflight_coding(stage, leaf, where: str) -> None:
    """A coding source's file, read whole; its tests are not gold-checked."""
    if leaf.path is not None:
        preflight_file(leaf, where)
    return None


def preflight_file(leaf, where: str) -> list[Task]:
    """A task file (user or coding) read whole: a broken file is a config error."""
    from posttrain.data.tasks import load_tasks

    try:
        return load_tasks(leaf)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}{format_hint(leaf, exc)}") from None


def preflight_user(stage, leaf, where: str) -> list[Task]:
    tasks = preflight_file(leaf, where)  # the file first, then the reward function
    if leaf.reward:
        preflight_reward(leaf, where)
    return tasks


def preflight_own(stage, leaf, where: str) -> list[Task]:
    """Your own data and environments, read once: a missing column, a bad file, an
    environment that cannot be built or gives no tasks is a config error naming the key
    (the key at fault where there is one: `env` for a class that cannot be loaded). Returns
    the tasks (of a streamed source, its first window)."""
    from posttrain.data.env import EnvError
    from posttrain.data.hf import StreamSampler
    from posttrain.data.tasks import load_tasks

    if getattr(leaf, "streaming", False) and not stage.streams_tasks:
        raise ConfigError(f"{where}.streaming: a {stage.type} stage reads its tasks whole; streaming is for RL stages")
    if getattr(leaf, "streaming", False) and ".sources[" in where:
        raise ConfigError(f"{where}.streaming: a streamed source cannot be mixed; give it as the stage's `tasks`")
    try:
        tasks = StreamSampler(leaf, seed=0).tasks if getattr(leaf, "streaming", False) else load_tasks(leaf)
    except EnvError as exc:
        raise ConfigError(f"{where}{'.' + exc.key if exc.key else ''}: {exc}") from None
    except (ValueError, ImportError, AttributeError, TypeError, NotImplementedError) as exc:
        raise ConfigError(f"{where}: {exc}{format_hint(leaf, exc)}") from None
    if getattr(leaf, "reward", None):  # the file first, then the reward function
        preflight_reward(leaf, where)
    return tasks


def format_hint(leaf, exc: Exception) -> str:
    """Where an `answer_format` read no row: the format the references are written in, if
    one reads them all."""
    spec = getattr(leaf, "answer_format", None)
    if not spec or "answer_format" not in str(exc) or getattr(leaf, "streaming", False):
        return ""
    from posttrain.data.answers import guesses
    from posttrain.data.tasks import load_tasks, sampled

    try:
        tasks = load_tasks(leaf.model_copy(update={"answer_format": None}))
    except (ValueError, ImportError, AttributeError, TypeError):
        return ""
    found = [g for g in guesses([t.answer for t in sampled(tasks) if t.answer is not None]) if g != spec]
    return f"; the references read as `answer_format: {found[0]}`" if found else ""
