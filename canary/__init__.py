"""engram-sync-kit canary: a read-only monitor of engram's closed sync target space."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("engram-sync-kit")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0"
