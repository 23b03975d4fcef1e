"""Reward debugging (and, to come, the web dashboard)."""
