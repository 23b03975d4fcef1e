"""Task sources and chat rendering: tasks in, token ids out."""
