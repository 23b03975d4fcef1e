"""Training: DeepSpeed ranks as Ray actors, and the group that drives them."""
