"""cloud: the fake cloud as the harness starts it (a process, a docker image, in this process) or attaches
to it. It may import fake_cloud, engram_contract and the harness's shared helpers, never the scenario,
validate, explore, design or deployment rooms (tests/contract/test_layering.py)."""
