"""`python -m bench`: run every benchmark in turn; each writes bench/results/<name>.json."""

from __future__ import annotations

import runpy
import sys

BENCHMARKS = (
    "fake_cloud",
    "fake_cloud_vs_real",
    "canary",
    "canary_scale",
    "inbox",
    "deployment",
    "harness",
    "validate",
    "reconcile",
    "ledger",
    "explore",
)

if __name__ == "__main__":
    selected = sys.argv[1:] or list(BENCHMARKS)
    unknown = sorted(set(selected) - set(BENCHMARKS))
    if unknown:
        sys.exit(f"bench: unknown benchmark {', '.join(unknown)}; allowed: {', '.join(BENCHMARKS)}")
    for name in selected:
        print(f"== bench.{name}", flush=True)
        sys.argv = [f"bench.{name}"]
        runpy.run_module(f"bench.{name}", run_name="__main__")
