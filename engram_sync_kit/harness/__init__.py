"""engram-sync-kit harness: replays YAML scenarios against the real engram binary."""

from engram_sync_kit.engram_contract.version import __version__

__all__ = ["__version__"]
