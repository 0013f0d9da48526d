"""Boundaries of canary.checks' rules that `make mutation` found unpinned."""
