"""The one exception root of the fake cloud package."""


class FakeCloudError(Exception):
    """Anything the fake cloud reports to a user as a one-line error."""
