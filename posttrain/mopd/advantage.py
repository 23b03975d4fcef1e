"""The MOPD advantage (docs/recipe.md): per token of the student's own sample,

    A_t = sg[log pi_T(y_t | x, y_<t) - log pi_student(y_t | x, y_<t)] + alpha * A_outcome

The first term is the negative per-token reverse KL estimate: positive where the teacher
likes the student's token more than the student does. `logp_student` are the sampling
engine's logprobs of the tokens (the behaviour policy; on-policy they equal the trainer's
to ~1e-7, and stale tokens are corrected by the loss's off-policy weights). Tokens out of
the loss (tool messages) get 0.
"""

from __future__ import annotations


def mopd_advantages(
    logp_teacher: list[float],
    logp_student: list[float],
    action_mask: list[int],
    outcome_advantage: float = 0.0,
    alpha: float = 0.0,
) -> list[float]:
    if not len(logp_teacher) == len(logp_student) == len(action_mask):
        raise ValueError(
            f"lengths differ: teacher {len(logp_teacher)}, student {len(logp_student)}, mask {len(action_mask)}"
        )
    return [
        (t - s + alpha * outcome_advantage) if m else 0.0 for t, s, m in zip(logp_teacher, logp_student, action_mask)
    ]


def reverse_kl(logp_teacher: list[float], logp_student: list[float], action_mask: list[int]) -> tuple[float, int]:
    """(sum over the model's tokens of log pi_student - log pi_T, token count): summed over
    samples and divided, an unbiased estimate of KL(student || teacher) per token."""
    pairs = [(s - t) for t, s, m in zip(logp_teacher, logp_student, action_mask) if m]
    return float(sum(pairs)), len(pairs)
