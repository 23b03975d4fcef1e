"""Advantages and losses: pure torch, no distributed state, testable on CPU."""
