"""engram: the real engram binary as the harness runs it: install (the cache), an isolated environment,
`engram serve`, the `engram mcp` client and the one read-only reader of its database. It may import
engram_contract, the canary's EngramDb and the harness's shared helpers (errors, evidence, polling,
process_env), never the scenario, validate, explore, design or deployment rooms
(tests/contract/test_layering.py)."""
