"""engram-sync-kit canary: a read-only monitor of engram's closed sync target space."""

from engram_sync_kit.engram_contract.version import __version__

__all__ = ["__version__"]
