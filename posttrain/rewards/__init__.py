"""Rewards: verifiers and (later) model judges, all behind one async interface."""
