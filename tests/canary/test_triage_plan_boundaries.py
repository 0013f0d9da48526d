"""Boundaries of canary.triage.plan's rules that `make mutation` found unpinned."""
