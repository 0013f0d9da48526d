"""triage: everything that writes engram's database: the plan (claim, drop, cleanup-phantoms: pre-flight,
one transaction, append-only), its private backups, repair and engram's sync_state bookkeeping. No read
path imports this room (tests/contract/test_layering.py); the triage log's read side is canary.triage_log."""
