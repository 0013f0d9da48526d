"""The one exception root of the canary package."""


class CanaryError(Exception):
    """Anything the canary reports to a user as a one-line error."""
