"""Rollout: vLLM engines as Ray actors, and the weights they receive."""
