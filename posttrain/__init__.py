"""posttrain: RL post-training of language models on Ray + vLLM + DeepSpeed.

SFT, then RL of domain x effort experts, then multi-teacher on-policy distillation.
"""

__version__ = "0.1.0"
