"""Synthesized SFT data: a teacher writes trajectories; verification stages and a human
review queue keep the good ones."""
