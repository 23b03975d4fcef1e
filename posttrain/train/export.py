"""Weights out of the trainer ranks, one bucket at a time: never the whole model gathered
at once. Under ZeRO-3 every rank takes part in each bucket's gather (a collective), and the
gathered tensors live only while their bucket is used; rank 0 copies them out (into a
broadcast buffer, host memory, a checkpoint shard). So a weight push or a save costs one
bucket on the device above the weights, at any model size. The collective path
(`GatheredSource`, read by vLLM's weight-transfer engine), the object-store packet and
checkpoints all read the weights so.

The layout is the module's state dict: each parameter once (a tied lm_head is the
embedding under a second name, an alias) and the persistent buffers, in order.
"""

from __future__ import annotations

from collections.abc import Iterator

SHARD_BYTES = 2 * 2**30  # most bytes of one checkpoint safetensors file (host memory while it is written)


def full_shape(tensor) -> tuple[tuple[int, ...], int]:
    """(shape, bytes) of a tensor as a whole (ZeRO-3 keeps only a partition in `.shape`)."""
    shape = tuple(getattr(tensor, "ds_shape", None) or tensor.shape)
    numel = 1
    for dim in shape:
        numel *= dim
    return shape, numel * tensor.element_size()


def weight_entries(module) -> tuple[list[tuple[str, object]], list[tuple[str, str]]]:
    """([(name, tensor)] of each parameter once and each persistent buffer, in state-dict
    order; [(alias, name)] of the names a tied parameter also goes by)."""
    keys = list(module.state_dict(keep_vars=True).keys())  # under ZeRO-3, no gather: just names
    found: dict[str, object] = dict(module.named_parameters(remove_duplicate=False))
    found.update(dict(module.named_buffers()))
    entries, aliases, first = [], [], {}
    for name in keys:
        tensor = found.get(name)
        if tensor is None:
            continue
        if id(tensor) in first:
            aliases.append((name, first[id(tensor)]))
            continue
        first[id(tensor)] = name
        entries.append((name, tensor))
    return entries, aliases


def buckets_of(entries: list, bucket_bytes: int) -> list[list[tuple[str, object]]]:
    """Entries in order, in groups of at most `bucket_bytes` (a larger tensor alone)."""
    out, used = [], 0
    for name, tensor in entries:
        nbytes = full_shape(tensor)[1]
        if not out or (used and used + nbytes > bucket_bytes):
            out.append([])
            used = 0
        out[-1].append((name, tensor))
        used += nbytes
    return out


def gathered(groups: list[list[tuple[str, object]]], zero_stage: int) -> Iterator[dict]:
    """Every rank iterates this together: each group's tensors, whole ({name: tensor}),
    valid until the next item; under ZeRO-3 each item is a gather on every rank."""
    import deepspeed

    for group in groups:
        params = [t for _, t in group if hasattr(t, "ds_id")]
        if zero_stage == 3 and params:
            with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                yield {name: t.detach() for name, t in group}
        else:
            yield {name: t.detach() for name, t in group}


def host_state_dict(engine, rank: int, zero_stage: int, bucket_bytes: int) -> dict:
    """The full weights in host memory on rank 0 ({} on the others), gathered bucket by
    bucket; every rank must call it under ZeRO-3. Tied names point at one tensor."""
    entries, aliases = weight_entries(engine.module)
    state: dict = {}
    for part in gathered(buckets_of(entries, bucket_bytes), zero_stage):
        if rank == 0:
            # a gathered tensor is freed after its bucket: copied; one a CPU rank holds whole is used as it is
            keep = zero_stage < 3
            state.update({n: t if keep and t.device.type == "cpu" else t.to("cpu", copy=True) for n, t in part.items()})
    for alias, name in aliases:
        if rank == 0:
            state[alias] = state[name]
    return state


def weight_packet(state: dict, version: int, tied_embeddings: bool):
    """A WeightPacket of the full weights (in the engine dtype), for the object-store sync."""
    from posttrain.rollout.weights import pack_state_dict

    return pack_state_dict(state, version=version, tied_embeddings=tied_embeddings)


def parameter_checksum(engine, rank: int, zero_stage: int, bucket_bytes: int) -> float:
    """The sum of every weight, in float64, on rank 0 (0.0 elsewhere): a step's effect (or
    its absence) in one number. Every rank must call it under ZeRO-3."""
    total = 0.0
    entries, _ = weight_entries(engine.module)
    for part in gathered(buckets_of(entries, bucket_bytes), zero_stage):
        if rank == 0:
            total += float(sum(t.double().sum() for t in part.values()))
    return total


def write_shards(engine, rank: int, zero_stage: int, bucket_bytes: int, folder) -> None:
    """Rank 0 writes the weights as Hugging Face safetensors (sharded above SHARD_BYTES,
    with an index) into `folder`, gathered bucket by bucket; every rank must call it under
    ZeRO-3. A write that fails on rank 0 is raised only after every bucket was gathered,
    so the other ranks never wait for a gather rank 0 left."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    entries, _ = weight_entries(engine.module)  # a tied head is the embedding: saved once, as transformers does
    total = sum(full_shape(t)[1] for _, t in entries)
    shards, current, size, error = [], {}, 0, None
    for part in gathered(buckets_of(entries, bucket_bytes), zero_stage):
        if rank != 0 or error is not None:
            continue
        try:
            for name, tensor in part.items():
                nbytes = tensor.numel() * tensor.element_size()
                if current and size + nbytes > SHARD_BYTES:
                    shards.append(_write_shard(Path(folder), len(shards), current, save_file))
                    current, size = {}, 0
                current[name] = tensor.to("cpu", copy=True).contiguous()
                size += nbytes
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the last gather
            error = exc
    if rank != 0:
        return
    if error is not None:
        raise error
    if current or not shards:
        shards.append(_write_shard(Path(folder), len(shards), current, save_file))
    if len(shards) == 1:
        Path(folder, shards[0][0]).rename(Path(folder) / "model.safetensors")
        return
    count = len(shards)
    weight_map = {}
    for k, (file, names) in enumerate(shards):
        final = f"model-{k + 1:05d}-of-{count:05d}.safetensors"
        Path(folder, file).rename(Path(folder) / final)
        weight_map.update(dict.fromkeys(names, final))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (Path(folder) / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _write_shard(folder, k: int, tensors: dict, save_file) -> tuple[str, list[str]]:
    name = f"shard-{k}.safetensors.part"
    save_file(tensors, str(folder / name), metadata={"format": "pt"})
    return name, list(tensors)
