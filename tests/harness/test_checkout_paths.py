"""The places that find the checkout from the package's own files: a move into a deeper room must not send
them elsewhere (after the rooms move, the engram cache looked beside engram_sync_kit/ and fell back to
~/.cache; the image build looked for the Dockerfile there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_sync_kit.fake_cloud.real_server import REPO as REAL_SERVER_REPO
from engram_sync_kit.harness.cloud.image import REPO as IMAGE_REPO
from engram_sync_kit.harness.engram.install import cache_root
from engram_sync_kit.harness.library import scenario_library

CHECKOUT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit


def test_every_checkout_lookup_finds_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENGRAM_KIT_CACHE", raising=False)
    assert cache_root() == CHECKOUT / ".engram"
    assert IMAGE_REPO == REAL_SERVER_REPO == CHECKOUT
    assert (IMAGE_REPO / "Dockerfile").is_file()
    assert scenario_library() == CHECKOUT / "scenarios"
