"""pytest plugin of the harness: collects *.scenario.yaml files (filled in by the harness issue)."""
