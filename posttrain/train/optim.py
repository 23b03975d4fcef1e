"""The trainer's optimizer: AdamW, Muon, or per-head Muon (Kimi K3), built before DeepSpeed.

Muon takes the 2-D hidden matrices; embeddings, the output head, norms and biases take
AdamW. The optimizer is DeepSpeed's `MuonWithAuxAdam` (torch's AdamW for the AdamW half):
under ZeRO-1/2/3 DeepSpeed gathers each Muon matrix's full gradient, runs `muon_update` on
it before partitioning, and splits the Newton-Schulz batch by head wherever a parameter
carries `muon_num_heads`. Here we choose the parameters, tag the heads from the model
config (Q: attention heads; K, V: key/value heads) and scale each matrix's learning rate.
"""

from __future__ import annotations

import math

from posttrain.config import AdamWOptimizer, MuonOptimizer, TrainerConfig

HEAD_SPLIT_PROJECTIONS = ("q_proj", "k_proj", "v_proj")
SPLIT_BY_HEAD = {"muon": False, "muon_per_head": True}  # Muon's kinds: orthogonalized per head?
ADAMW_EPS = 1e-8  # torch's AdamW default, so the AdamW half matches `type: adamw`


def split_parameters(model) -> tuple[list[tuple[str, object]], list[tuple[str, object]]]:
    """(muon, adamw) as (name, parameter) lists. Embeddings and the output head are found by
    identity, so a tied embedding (one tensor under two names) is AdamW once."""
    io_ids = {id(m.weight) for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None}
    muon, adamw = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (muon if param.ndim == 2 and id(param) not in io_ids else adamw).append((name, param))
    return muon, adamw


def head_counts(model) -> dict[str, int]:
    """Heads along dim 0 of every Q, K and V projection weight, from the model config.
    Under grouped-query attention K and V have fewer heads than Q, of the same width."""
    config = getattr(model.config, "text_config", model.config)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    counts = {}
    for name, param in model.named_parameters():
        module, _, kind = name.rpartition(".")
        projection = module.rpartition(".")[2]
        if kind != "weight" or projection not in HEAD_SPLIT_PROJECTIONS:
            continue
        count = heads if projection == "q_proj" else kv_heads
        if param.ndim != 2 or param.shape[0] != count * head_dim:
            raise ValueError(
                f"muon_per_head: {name} has shape {tuple(param.shape)}, expected {count} heads x "
                f"{head_dim} rows from the model config"
            )
        counts[name] = count
    if not counts:
        raise ValueError(
            f"muon_per_head: {type(model).__name__} has no separate q_proj/k_proj/v_proj to split "
            "by head (a fused QKV matrix is not supported); use optimizer type muon"
        )
    return counts


def lr_scale(shape, heads: int | None, adjust_lr: str) -> float:
    """Factor on the lr of one Muon matrix. DeepSpeed's `muon_update` already multiplies each
    orthogonalized block (a head, or the whole matrix) of rows x cols by sqrt(max(1, rows/cols)),
    torch's "original"; "match_rms_adamw" wants 0.2 * sqrt(max(rows, cols)) instead, which
    gives the block an RMS of 0.2, about AdamW's, so AdamW's lr carries over."""
    if adjust_lr == "original":
        return 1.0
    rows, cols = shape[0] // (heads or 1), shape[1]
    return 0.2 * math.sqrt(max(rows, cols)) / math.sqrt(max(1.0, rows / cols))


def build_optimizer(model, config: TrainerConfig, lr: float):
    """The client optimizer for `deepspeed.initialize`; tags Muon's parameters for ZeRO."""
    return OPTIMIZERS[type(config.optimizer)](model, config, lr)


def _adamw(model, config: TrainerConfig, lr: float):
    import torch

    # fused: one pass over each (flat, under ZeRO) tensor instead of one per operation; on one CPU
    # core the 135M-parameter step takes 0.17 s against 0.82 s
    return torch.optim.AdamW(
        model.parameters(), lr=lr, betas=tuple(config.betas), weight_decay=config.weight_decay, fused=True
    )


def _muon(model, config: TrainerConfig, lr: float):
    import torch
    from deepspeed.runtime.zero.muon.muon_optimizer import MuonWithAuxAdam

    return MuonWithAuxAdam(
        muon_param_groups(model, config, lr),
        adam_optimizer=torch.optim.AdamW,
        adam_optimizer_kwargs={
            "lr": lr,
            "betas": tuple(config.betas),
            "eps": ADAMW_EPS,
            "weight_decay": config.weight_decay,
        },
    )


def muon_param_groups(model, config: TrainerConfig, lr: float) -> list[dict]:
    """One AdamW group, and one Muon group per lr scale. ZeRO reads `use_muon` and
    `muon_num_heads` from the parameters themselves, so they are set here too."""
    opt = config.optimizer
    muon, adamw = split_parameters(model)
    heads = head_counts(model) if SPLIT_BY_HEAD[opt.type] else {}
    by_scale: dict[float, list] = {}
    for name, param in muon:
        param.use_muon, param.muon_num_heads = True, heads.get(name)
        by_scale.setdefault(lr_scale(param.shape, heads.get(name), opt.adjust_lr), []).append(param)
    for _, param in adamw:
        param.use_muon, param.muon_num_heads = False, None
    groups = (
        [
            {
                "params": [p for _, p in adamw],
                "use_muon": False,
                "lr": lr,
                "betas": tuple(config.betas),
                "eps": ADAMW_EPS,
                "weight_decay": config.weight_decay,
            }
        ]
        if adamw
        else []
    )
    # DeepSpeed decays by lr x weight_decay with the group's (scaled) lr: divide the scale out,
    # so a matrix decays by lr x weight_decay as under AdamW and torch's Muon.
    groups += [
        {
            "params": params,
            "use_muon": True,
            "lr": lr * scale,
            "momentum": opt.momentum,
            "weight_decay": config.weight_decay / scale,
            "ns_method": opt.ns_method,
        }
        for scale, params in sorted(by_scale.items())
    ]
    return groups


def zero_settings(config: TrainerConfig) -> dict:
    """Extra `zero_optimization` keys: DeepSpeed's ZeRO-3 refuses Muon with reduce-scatter."""
    if isinstance(config.optimizer, MuonOptimizer) and config.zero_stage == 3:
        return {"reduce_scatter": False}
    return {}


# The builder of each optimizer config class.
OPTIMIZERS = {AdamWOptimizer: _adamw, MuonOptimizer: _muon}


def dither_master_weights(engine, seed: int) -> int:
    """Place every fp32 master weight that sits exactly on its low-precision (bf16) value at
    a uniformly random point of that value's rounding interval; returns how many moved.

    DeepSpeed builds its fp32 master weights from the bf16 module, so all of them start on
    the bf16 grid, half a grid step from the nearest rounding boundary. An update then shows
    in the bf16 weights (the ones the forward pass and the rollout engines use) only once it
    has summed to half a grid step: with Adam at lr 2e-5 on SmolLM2-135M, about a weight of
    0.05 needs 6 same-signed steps, and the policy barely moves in its first steps
    (docs/pipeline.md, bf16). Dithered, the bf16 weights are exactly what they were (each
    value stays inside its interval), and rounding them is unbiased from the first step:
    they move by the master's update in expectation. The dither is drawn per parameter from
    `seed`, so every rank draws the same full tensor and keeps its own fragment."""
    import torch
    from deepspeed.utils import safe_get_full_fp32_param, safe_set_full_fp32_param

    moved = 0
    for index, param in enumerate(engine.module.parameters()):
        full = safe_get_full_fp32_param(param)
        if full is None or param.dtype == torch.float32:
            continue
        dithered = rounding_interval_point(full, param.dtype, torch.Generator(full.device).manual_seed(seed + index))
        moved += int((dithered != full).sum())
        safe_set_full_fp32_param(param, dithered)
    return moved


def rounding_interval_point(values, low_dtype, generator):
    """`values` (fp32) with each one that is exactly representable in `low_dtype` moved to a
    uniformly random point strictly inside the interval of numbers that round to it (round
    to nearest, ties to even: the ends are left out); the others are left as they are."""
    import torch

    low = values.to(low_dtype)
    grid = low.float()
    up = torch.nextafter(low, torch.full_like(low, float("inf"))).float() - grid
    down = grid - torch.nextafter(low, torch.full_like(low, float("-inf"))).float()
    u = torch.rand(values.shape, generator=generator, device=values.device) - 0.5  # [-0.5, 0.5)
    step = torch.where(u > 0, up, down).nan_to_num(0.0, posinf=0.0, neginf=0.0)  # no interval past the largest
    return torch.where(values == grid, grid + step * u * 0.999, values)
