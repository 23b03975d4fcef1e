"""Freeing a trainer rank's DeepSpeed engines before a reload builds new ones: destroyed,
taken off DeepSpeed's module stack, and the storage of every tensor they own freed in place."""

from __future__ import annotations


def release_engines(owner, *names: str) -> None:
    """Free the DeepSpeed engines held in `owner`'s attributes `names` (set to None), before a
    reload builds new ones. Dropping the reference is not enough: DeepSpeed keeps each ZeRO-3
    engine's module on a module-level stack (`parameter_offload.FWD_MODULE_STACK`) that
    `destroy()` does not clear (and, after a backward with gradient checkpointing, one of its
    blocks, whose recompute pushes it again), and the module's hooks hold the engine and its
    optimizer; on a GPU something further holds a ZeRO-3 engine (an H200 kept both earlier
    engines of a 3B model and ran out of memory at the third load). So the engine is
    destroyed, taken off that stack, and the storage of every tensor it owns (weights and
    their partitions, master weights, optimizer state, gradient and bucket buffers) is freed
    in place: a reference left anywhere then holds an empty tensor, not gigabytes."""
    import gc

    import torch

    try:
        from deepspeed.runtime.zero.parameter_offload import FWD_MODULE_STACK
    except ImportError:  # another DeepSpeed layout: destroy() and the freeing below still run
        FWD_MODULE_STACK = []
    for name in names:
        engine = getattr(owner, name, None)
        setattr(owner, name, None)
        if engine is None or not hasattr(engine, "destroy"):  # None, or a plain module (no hooks)
            continue
        engine.destroy()  # the ZeRO optimizer's and the offload's hooks
        module = getattr(engine, "module", None)
        owned = {id(m) for m in module.modules()} if module is not None else set()
        FWD_MODULE_STACK[:] = [m for m in FWD_MODULE_STACK if id(m) not in owned]
        for tensor in owned_tensors(engine):
            free_storage(tensor)
        del engine, module
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the freed blocks back to the device for the next engine


# What an engine's tensors are reached through: the objects of these libraries (engine,
# module, ZeRO optimizer, torch optimizer, their parameter groups and buffers), and the
# containers in them. Other objects (loggers, the accelerator) are not entered, nor the
# communication layers, whose buffers the next engine uses.
OWNING_LIBRARIES = ("deepspeed", "torch", "transformers", "posttrain")
SHARED_LAYERS = ("torch.distributed", "torch._C", "deepspeed.comm", "deepspeed.accelerator")


def owned_tensors(root, max_depth: int = 8) -> list:
    """Every distinct tensor reachable from `root` through the attributes of objects of
    OWNING_LIBRARIES and through lists, tuples, sets and dicts (keys and values), and the
    parameters' ZeRO partitions (`ds_tensor`) and gradients."""
    import torch

    found: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    stack = [(root, 0)]
    while stack:
        obj, depth = stack.pop()
        if id(obj) in seen or depth > max_depth:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found[id(obj)] = obj
            for extra in (getattr(obj, "ds_tensor", None), obj.grad if obj.is_leaf else None):
                if isinstance(extra, torch.Tensor):
                    found[id(extra)] = extra
            continue
        if isinstance(obj, torch.nn.Module):  # however deep the tree, its tensors at once
            items = [*obj.parameters(), *obj.buffers(), *vars(obj).values()]
        elif isinstance(obj, dict):
            items = [*obj.keys(), *obj.values()]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            items = list(obj)
        elif (
            type(obj).__module__.split(".")[0] in OWNING_LIBRARIES
            and not type(obj).__module__.startswith(SHARED_LAYERS)
            and hasattr(obj, "__dict__")
        ):
            items = list(vars(obj).values())
        else:
            continue
        stack.extend((item, depth + 1) for item in items)
    return list(found.values())


def free_storage(tensor) -> None:
    """Give back `tensor`'s memory in place (its storage shrunk to nothing; its views share
    it). Storages that cannot shrink (memory-mapped, borrowed from numpy) are left alone."""
    try:
        tensor.untyped_storage().resize_(0)
    except (RuntimeError, NotImplementedError):
        pass
