"""What a run writes: metrics, saved rollouts and the GRM scoreboard, run state across
stops, wandb, and the end-of-run summary."""
