"""scenario: the YAML scenario language: schema and its rules, loader (file:line errors), steps and checks
(one registry each: `HANDLERS` in steps, `EVALUATORS` in checks), step results, local reads, the runner
and the report. It composes the engram, cloud and design rooms with world; it may import the canary and
engram_contract."""
