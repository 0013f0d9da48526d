"""engram-sync-kit fake cloud: a recording, fault-injecting stand-in for engram's self-hosted cloud."""

from engram_sync_kit.engram_contract.version import __version__

__all__ = ["__version__"]
