"""engram-sync-kit fake cloud: a recording, fault-injecting stand-in for engram's self-hosted cloud."""

from typing import Any


def __getattr__(name: str) -> Any:
    # Resolved lazily: reading package metadata costs start-up time the server does not need.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("engram-sync-kit")
        except PackageNotFoundError:  # a checkout that was never installed
            return "0.0.0"
    raise AttributeError(name)
