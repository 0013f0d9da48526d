"""engram-sync-kit: the canary, the fake cloud, the scenario harness and engram's sync contract."""
