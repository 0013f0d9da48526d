"""The environment snapshot that scenario threads take while pytest's main thread changes os.environ."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engram_sync_kit.harness.process_env import environment_snapshot


class VanishingKey(dict[str, str]):
    """An environment whose key PYTEST_CURRENT_TEST goes away after it was listed, as when the main
    thread pops it between dict()'s listing of the keys and its read of that one."""

    def __init__(self, vanish_times: int) -> None:
        super().__init__({"HOME": "/home/me", "PYTEST_CURRENT_TEST": "x (call)"})
        self.vanish_times = vanish_times

    def keys(self) -> Iterator[str]:  # type: ignore[override]
        return iter(list(super().keys()))

    def __getitem__(self, key: str) -> str:
        if key == "PYTEST_CURRENT_TEST" and self.vanish_times > 0:
            self.vanish_times -= 1
            raise KeyError(key)
        return super().__getitem__(key)


class Plain:
    """A Mapping-like object that dict() reads through keys() and __getitem__, as it reads os.environ."""

    def __init__(self, data: VanishingKey) -> None:
        self.data = data

    def keys(self) -> Iterator[str]:
        return self.data.keys()

    def __getitem__(self, key: str) -> str:
        return self.data[key]


def test_a_key_that_vanishes_while_listed_breaks_a_plain_dict_copy() -> None:
    with pytest.raises(KeyError):
        dict(Plain(VanishingKey(vanish_times=1)))


def test_the_snapshot_reads_again_and_returns_a_consistent_environment() -> None:
    snapshot = environment_snapshot(Plain(VanishingKey(vanish_times=3)))  # type: ignore[arg-type]
    assert snapshot == {"HOME": "/home/me", "PYTEST_CURRENT_TEST": "x (call)"}


def test_the_real_environment_is_copied_whole() -> None:
    import os

    assert environment_snapshot() == dict(os.environ)
