"""The markdown, JSON and HTML of the committed sample report, byte for byte: a change to how the
renderers read the model must not change what a tester sees. After an intended change of output,
rewrite the golden files (the JSON's is its sha256) with `ENGRAM_KIT_WRITE_GOLDEN=1 pytest tests/harness/test_validate_golden.py`
and review their diff."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from engram_sync_kit.harness.validate.anonymize import anonymized
from engram_sync_kit.harness.validate.model import ValidateReport, as_report
from engram_sync_kit.harness.validate.report import render_html, render_markdown

DATA = Path(__file__).parent / "data"
KEY = b"\x01" * 32


def _sample(anonymize: bool) -> ValidateReport:
    report = as_report(json.loads((DATA / "validate-report.json").read_text(encoding="utf-8")))
    return anonymized(report, KEY, ["/home/tester"]) if anonymize else report


def _json(report: ValidateReport) -> str:
    """The JSON (200 kB) as its digest: it is the model's dump, and the sample itself is in the repo."""
    text = json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
    return hashlib.sha256(text.encode()).hexdigest() + "\n"


RENDERERS: dict[str, Callable[[ValidateReport], str]] = {
    "md": render_markdown,
    "json": _json,
    "html": render_html,
}


@pytest.mark.parametrize("anonymize", [False, True], ids=["plain", "anonymized"])
@pytest.mark.parametrize("kind", sorted(RENDERERS))
def test_the_sample_report_renders_byte_for_byte_as_before(kind: str, anonymize: bool) -> None:
    golden = DATA / "validate-golden" / f"{'anonymized' if anonymize else 'plain'}.{kind}"
    rendered = RENDERERS[kind](_sample(anonymize))
    if os.environ.get("ENGRAM_KIT_WRITE_GOLDEN") == "1":
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(rendered, encoding="utf-8")
    assert rendered == golden.read_text(encoding="utf-8")
