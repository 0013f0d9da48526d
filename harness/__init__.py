"""engram-sync-kit harness: replays YAML scenarios against the real engram binary."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("engram-sync-kit")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0"
