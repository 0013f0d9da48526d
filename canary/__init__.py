"""engram-sync-kit canary: a read-only monitor of engram's closed sync target space."""


def __getattr__(name: str) -> str:
    # The version is looked up on first use: importlib.metadata costs a one-shot `check` ~40 ms of start-up.
    if name != "__version__":
        raise AttributeError(f"module 'canary' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("engram-sync-kit")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0.0.0"
