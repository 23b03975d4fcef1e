"""One module per stage type: sft, rl (the one driver loop), experts, mopd, synthesis, evaluate.

Each takes its stage's config, the checkpoint it starts from and the pipeline's runtime
(engines, trainer ranks, judge, run folder) and returns the checkpoint it made."""
