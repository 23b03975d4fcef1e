"""Held-out eval by construction: the eval tasks of each domain, and the check that none of
their prompts occurs in the run's training data.

A prompt is compared by its user text, case-folded and with whitespace collapsed (system
prompts and effort lines differ between stages by design). The training data is every
task source of every stage that trains or makes training data (sft, synthesis, rl,
experts, mopd), whole, not only what a stage happened to draw. Generated sources with a
`part` take their eval part, which is disjoint from their training part by construction;
others have their seeds moved, and the check catches what that does not separate.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from posttrain.config import ChatJsonl, ExpertsStage, SynthesisData
from posttrain.data.registry import source_kind
from posttrain.types import Message, Task


class HeldOutError(ValueError):
    """Eval prompts that also occur in the run's training data."""


def normalize_prompt(messages: Iterable[Message]) -> str:
    text = "\n".join(m.content for m in messages if m.role == "user")
    return re.sub(r"\s+", " ", text).strip().casefold()


def experts_of(stage, config):
    """The experts stage whose cells an eval stage scores."""
    if stage.experts:
        return config.stage(stage.experts)
    return next(s for s in config.stages if isinstance(s, ExpertsStage))


def held_out(source, offset: int):
    """The eval counterpart of a training source: its `eval` part where it has one, and
    every generator seed moved by `offset`."""
    return source_kind(source).held_out(source, offset)


def eval_sources(stage, config) -> dict:
    return stage.domains or {d: held_out(s, stage.seed_offset) for d, s in experts_of(stage, config).domains.items()}


def eval_tasks(stage, config) -> dict[str, list[Task]]:
    """The tasks each domain's cells are scored on: the same ones for every checkpoint and
    effort of the domain (a paired design)."""
    from posttrain.data.tasks import TaskSampler, load_tasks

    out = {}
    for domain, source in eval_sources(stage, config).items():
        tasks = load_tasks(source)
        out[domain] = TaskSampler(tasks, seed=config.seed + 17).draw(min(stage.tasks_per_cell, len(tasks)))
    return out


def prompt_digest(prompt: str) -> bytes:
    """A normalized prompt's fingerprint: what the check compares (16 bytes of BLAKE2b)."""
    return hashlib.blake2b(prompt.encode(), digest_size=16).digest()


def digest_of(messages: Iterable[Message]) -> bytes:
    return prompt_digest(normalize_prompt(messages))


def _generated_only(source) -> bool:
    """Its tasks are a pure function of its config and of installed code (the table's
    `generated`): their prompts' fingerprints are cached on disk, so that a second `validate`
    or dry-run of a large pipeline does not generate its tens of thousands of tasks again."""
    return all(
        source_kind(leaf).generated and getattr(leaf, "path", None) is None  # a user's file may change
        for leaf in source.parts().values()
    )


@functools.cache
def _code_version() -> str:
    """What the generated prompts depend on besides the config: this package's task code and
    the installed generator libraries."""
    from importlib.metadata import PackageNotFoundError, version

    digest = hashlib.blake2b(digest_size=16)
    for path in sorted((Path(__file__).parent).glob("*.py")):
        digest.update(path.read_bytes())
    for package in ("reasoning-gym", "datasets", "sympy"):
        try:
            digest.update(f"{package}={version(package)}".encode())
        except PackageNotFoundError:
            digest.update(f"{package}=none".encode())
    return digest.hexdigest()


def _source_digests(source, generate, cache: Path | None = None) -> list[bytes]:
    """The fingerprints of a source's training prompts, from the disk cache for generated
    sources (written atomically, so concurrent runs never read half a file). `cache` is the
    cache folder, posttrain's own (`POSTTRAIN_CACHE`) unless given."""
    if not _generated_only(source):
        return [digest_of(t.messages) for t in generate(source)]
    from posttrain.config.paths import cache_root

    key = hashlib.blake2b((_code_version() + source.model_dump_json()).encode(), digest_size=16).hexdigest()
    path = (cache_root() if cache is None else cache) / "prompts" / f"{key}.bin"
    if path.is_file():
        data = path.read_bytes()
        if len(data) % 16 == 0:
            return [data[i : i + 16] for i in range(0, len(data), 16)]
    digests = [digest_of(t.messages) for t in generate(source)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(b"".join(digests))
    os.replace(tmp, path)
    return digests


def training_prompts(config) -> dict[bytes, str]:
    """Fingerprint of a normalized prompt -> the stage it trains in, over every training
    stage of the run."""
    from posttrain.data.tasks import generate_tasks, load_chat_jsonl

    seen: dict[bytes, str] = {}
    listed: set[str] = set()  # a source two stages share (the experts' domains, MOPD's) is listed once
    for stage in config.stages:
        for source in stage.training_sources(config):  # eval's: none
            if isinstance(source, SynthesisData):  # the synthesis stage's own tasks are counted there
                continue
            if getattr(source, "streaming", False):
                _streamed_is_split(source, stage)  # too large to list: disjoint by its part instead
                continue
            key = source.model_dump_json()
            if key in listed:
                continue
            listed.add(key)
            if isinstance(source, ChatJsonl):
                digests = [digest_of(c) for c in load_chat_jsonl(source)]
            else:
                digests = _source_digests(source, generate_tasks)
            for digest in digests:
                seen.setdefault(digest, stage.name)
    return seen


def _streamed_is_split(source, stage) -> None:
    """A streamed training source cannot be listed; it is held out only by its part (a split
    of its own, or a hash share), which makes its train and eval parts disjoint."""
    if source.part != "train" or not (source.eval_split or source.eval_share):
        raise HeldOutError(
            f"stage {stage.name}: a streamed source ({source.path}) cannot be compared with the eval prompts; "
            "give it `part: train` with `eval_split` or `eval_share`, so that its eval part is disjoint by construction"
        )


def overlap(tasks: list[Task], trained: dict[bytes, str]) -> list[tuple[Task, str]]:
    """The tasks whose prompt occurs in the training data, with the stage it trains in."""
    return [(t, trained[d]) for t in tasks if (d := digest_of(t.messages)) in trained]


def check_held_out(stage, config, tasks: dict[str, list[Task]] | None = None) -> dict[str, list[Task]]:
    """Eval tasks per domain with none seen in training; with `on_overlap: fail` (the default)
    any overlap is a HeldOutError naming the domains, counts and an example; with `drop`
    the overlapping tasks are left out (and counted by the eval stage)."""
    tasks = tasks if tasks is not None else eval_tasks(stage, config)
    trained = training_prompts(config)
    leaks = {domain: overlap(ts, trained) for domain, ts in tasks.items()}
    leaks = {d: found for d, found in leaks.items() if found}
    if leaks and stage.on_overlap == "fail":
        parts = []
        for domain, found in leaks.items():
            task, where = found[0]
            example = normalize_prompt(task.messages)[:80]
            parts.append(f"{domain}: {len(found)} of {len(tasks[domain])} (e.g. {example!r}, trained in {where})")
        raise HeldOutError(
            f"eval stage {stage.name}: eval prompts occur in the run's training data: " + "; ".join(parts) + ". "
            "Use task sources whose eval part is disjoint (a `part`, other seeds or templates), or set "
            "`on_overlap: drop` to score only the unseen ones"
        )
    leaked = {id(t) for found in leaks.values() for t, _ in found}
    return {d: [t for t in ts if id(t) not in leaked] for d, ts in tasks.items()}
