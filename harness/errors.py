"""The one exception root of the harness package."""


class HarnessError(Exception):
    """Anything the harness reports to a user as a one-line error."""


class EngramInstallError(HarnessError):
    """The real engram binary could not be obtained."""
