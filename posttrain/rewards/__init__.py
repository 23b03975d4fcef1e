"""Rewards: verifiers and model judges, all behind one async interface.

Keep this file free of imports: the sandbox launcher imports `posttrain.rewards.sandbox_harness`
with the standard library alone, in a fresh process for every code check.
"""
