"""The one exception root of the canary package, and the refusal of a triage request (raised by triage and
the backups and bookkeeping it writes through)."""


class CanaryError(Exception):
    """Anything the canary reports to a user as a one-line error."""


class TriageError(CanaryError):
    """A triage request that is refused (nothing was written)."""
