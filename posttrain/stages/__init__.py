"""One module per stage type: sft, rl (the one driver loop), experts, mopd, synthesis, evaluate,
and `registry.py`, which maps each type to how it runs, how a finished one is restored on
resume, its state file and its dry-run lines (the pipeline asks it, never the type's name).

Each takes its stage's config, the checkpoint it starts from and the pipeline's runtime
(engines, trainer ranks, judge, run folder) and returns the checkpoint it made."""
