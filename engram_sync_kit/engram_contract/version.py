"""The kit's version, in one place: the build reads it (pyproject's tool.hatch.version) and all three
tools print it with --version, installed or run from a checkout."""

__version__ = "0.1.0"
