"""Reward debugging (`posttrain rewards`) and the web dashboard (`posttrain dashboard`)."""
