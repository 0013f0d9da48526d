"""`engram-harness explore`: seeded, generated histories against the real engram and the fake cloud.

Each generated operation is a scenario step (harness.schema), played by the harness's own StepRunner, so a
violation found here is written as a scenario that `engram-harness run` replays unchanged. Invariants are
checked after every step against ground truth: the fake cloud's records and engram's database, read-only.
"""
