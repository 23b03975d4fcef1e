"""The trainer's loss settings (`LossSpec`) from the config. config/algo.py is the one
place their defaults are written: a setting not given here is the config's default."""

from __future__ import annotations

from typing import Literal

from posttrain.algo.entropy import EntropyControl
from posttrain.config.algo import Correction, ExcludeCorrection, GRPOConfig, MaskCorrection, TISCorrection
from posttrain.types import LossSpec

# A correction's own settings, by its config class (the LossSpec fields it fills).
CORRECTION_SETTINGS = {
    TISCorrection: lambda c: {"tis_cap": c.cap, "correct_fresh": c.fresh},
    MaskCorrection: lambda c: {"mask_lo": c.lo, "mask_hi": c.hi, "correct_fresh": c.fresh},
    ExcludeCorrection: lambda c: {},
}


def loss_spec(
    kind: Literal["pg", "nll"] = "pg",
    algo: GRPOConfig | None = None,
    correction: Correction | None = None,
    temperature: float = 1.0,
    distill_coef: float = 0.0,
) -> LossSpec:
    """`kind`'s loss with `algo`'s clip range, KL weight, minibatches and epochs (GRPOConfig's
    defaults when None), the off-policy `correction` of stale tokens (none when None: every
    token weighs 1) and the sampling temperature the logprobs are taken at (1: the logits
    as they are). `distill_coef`: weight of the KL to a teacher's top-k next tokens, on
    the sequences that carry them (MOPD's distill_topk)."""
    algo = algo if algo is not None else GRPOConfig()
    settings = {"tis_cap": None, "mask_lo": None, "mask_hi": None, "correct_fresh": False}
    if correction is not None:
        settings.update(CORRECTION_SETTINGS[type(correction)](correction))
    return LossSpec(
        kind=kind,
        clip_eps_lo=algo.clip_eps_lo,
        clip_eps_hi=algo.clip_eps_hi,
        kl_beta=algo.kl_beta,
        temperature=temperature,
        correction=correction.type if correction is not None else "none",
        minibatches=algo.minibatches,
        epochs=algo.epochs,
        distill_coef=distill_coef,
        entropy_coef=EntropyControl.of(algo).weight(),  # the first step's; RL stages set it step by step
        entropy_target=algo.entropy_target,
        **settings,
    )
