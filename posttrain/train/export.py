"""Weights out of the trainer ranks: the full (unpartitioned) state dict, gathered from
every rank under ZeRO-3, and what is made of it on rank 0 (the weight packet the engines
load, a checksum). The collective path (train/sync.py) and checkpoints use the same state."""

from __future__ import annotations


def full_state_dict(engine, rank: int, zero_stage: int) -> dict:
    """The full state dict on rank 0 ({} on the others); every rank must call it under ZeRO-3."""
    import deepspeed

    module = engine.module
    if zero_stage == 3:
        with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
            return {k: v.detach().clone() for k, v in module.state_dict().items()} if rank == 0 else {}
    return module.state_dict() if rank == 0 else {}


def weight_packet(state: dict, version: int, tied_embeddings: bool):
    """A WeightPacket of the full weights (in the engine dtype), for the object-store sync."""
    from posttrain.rollout.weights import pack_state_dict

    return pack_state_dict(state, version=version, tied_embeddings=tied_embeddings)


def parameter_checksum(state: dict) -> float:
    """The sum of every weight, in float64: a step's effect (or its absence) in one number."""
    return float(sum(v.double().sum() for v in state.values()))
