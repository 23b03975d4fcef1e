"""Checkpoint writing for the trainer ranks: a folder of Hugging Face safetensors weights
(what transformers and vLLM load), DeepSpeed's training state in `deepspeed/` (optimizer
and schedule, every rank's partition), the model's tokenizer files and the driver's
`extra` files. Written into a temp folder and renamed into place, with every rank
agreeing after each phase, so a crash or a full disk mid-write leaves the previous
checkpoint intact and never leaves a rank waiting."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from posttrain.errors import CheckpointWriteError

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
    "vocab.json",
    "merges.txt",
)


@contextmanager
def writes_recorded(engine, failures: list):
    """DeepSpeed's save_checkpoint holds barriers between its file writes: a rank that raised
    out of it (a full disk) would leave the others waiting forever. Inside this, a failed
    write is recorded and every later one skipped, so each rank reaches every barrier."""

    def guarded(write):
        def call(*args, **kwargs):
            if failures:
                return None
            try:
                return write(*args, **kwargs)
            except Exception as exc:  # torch.save reports a full disk as RuntimeError
                failures.append(exc)
                return None

        return call

    writers = [
        (engine.checkpoint_engine, "save"),
        (engine.checkpoint_engine, "makedirs"),
        (engine, "_copy_recovery_script"),
    ]  # every file DeepSpeed writes goes through one of these
    for owner, name in writers:
        setattr(owner, name, guarded(getattr(owner, name)))
    try:
        yield
    finally:
        for owner, name in writers:
            vars(owner).pop(name, None)


def write_checkpoint(
    folder: str,
    engine,
    rank: int,
    model_dir: str,
    extra: dict[str, str] | None,
    write_weights: Callable[[Path], None],
    all_ok: Callable[[Exception | None], bool],
) -> str | None:
    """Every rank calls this. `write_weights(folder)` writes the Hugging Face weights there,
    bucket by bucket (a collective: all ranks gather, rank 0 writes); `all_ok` tells whether
    no rank has failed so far (a collective too). A failed write removes its partial files
    and raises on every rank. Rank 0 returns the folder."""
    target = Path(folder)
    tmp = target.with_name(f".{target.name}.tmp")
    error = None
    try:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
    except OSError as exc:
        error = exc
    if all_ok(error):  # ranks agree after every phase: one failing rank must not hang the others
        failures: list[Exception] = []
        with writes_recorded(engine, failures):
            engine.save_checkpoint(str(tmp / "deepspeed"), tag="state", save_latest=False)
        error = failures[0] if failures else None
    if all_ok(error):
        try:
            write_weights(tmp)
            if rank == 0:
                _write_rank0(engine, tmp, model_dir, extra)
        except Exception as exc:
            error = exc
    if not all_ok(error):
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(target, error)
    if rank != 0:
        return None
    old = target.with_name(f".{target.name}.old")
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return str(target)


def _write_rank0(engine, tmp: Path, model_dir: str, extra: dict[str, str] | None) -> None:
    """The model's config (its dtype: the weights' as written) and generation config, the
    tokenizer files and the driver's extra files, beside the weights."""
    module = engine.module
    config = module.config
    config.dtype = str(next(module.parameters()).dtype).removeprefix("torch.")
    config.save_pretrained(tmp)
    if getattr(module, "generation_config", None) is not None:
        module.generation_config.save_pretrained(tmp)
    for name in TOKENIZER_FILES:
        if (Path(model_dir) / name).is_file():
            shutil.copy2(Path(model_dir) / name, tmp / name)
    for name, text in (extra or {}).items():
        (tmp / name).write_text(text)


def write_error(target: Path, error: Exception | None) -> CheckpointWriteError:
    where = target.parent if target.parent.exists() else Path(".")
    free = shutil.disk_usage(where).free
    cause = (
        f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        if error
        else "another trainer rank failed to write its part"
    )
    full = "the disk is full: " if free < 64 * 2**20 or "No space left" in str(error) else ""
    return CheckpointWriteError(
        f"checkpoint {target} not written: {full}{cause} ({free / 2**20:.1f} MiB free on {where}); "
        "its partial files were removed and the previous checkpoint is intact"
    )
