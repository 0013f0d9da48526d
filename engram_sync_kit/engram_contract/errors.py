"""The one exception root of engram_contract."""


class ContractError(ValueError):
    """A value engram's contract refuses, worded as engram words it; ``field`` names the culprit."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
