"""MOPD: multi-teacher on-policy distillation of the domain x effort experts into one student."""
