"""engram-sync-kit fake cloud: a recording, fault-injecting stand-in for engram's self-hosted cloud."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("engram-sync-kit")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0"
