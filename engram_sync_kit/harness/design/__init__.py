"""design: the design card's sections (engram issue #1013), the steps and checks of its user-visible
surfaces, and the conformance verdict per section. It judges scenario results, so it imports the scenario
room's results and schema rules; the scenario schema composes its models."""
