"""The one exception root of the harness package."""


class HarnessError(Exception):
    """Anything the harness reports to a user as a one-line error."""


class EngramInstallError(HarnessError):
    """The real engram binary could not be obtained."""


class ScenarioError(HarnessError):
    """A scenario file is not valid: every line says file:line, what is wrong and what is allowed."""


class StepFailed(HarnessError):
    """A step of a running scenario did not do what it must."""


class StepUnsupported(StepFailed):
    """This engram version has no interface for the step (e.g. unenroll before it existed)."""
