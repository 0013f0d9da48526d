"""Benchmarks: `python -m bench.<name>` writes bench/results/<name>.json and prints a short table."""
