"""The validate HTML report in a real headless Chromium (Debian's package; scripts/chromium.sh installs it).

The report is rendered from tests/harness/data/validate-report.json, an anonymized report of a real
run: `validate --ticks 2 --anonymize` on a small home made with engram v1.20.0 by
test_validate_blocked_lane.make_blocked_home (two enrolled projects, a save without a project the cloud
refuses with 400, a session without a directory it refuses with 500, an unenrolled project). Checks: a screenshot at a normal window size, no console message of level error, and the key
figures in the DOM Chromium built.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from real_parts import missing

from engram_sync_kit.harness.validate_model import as_report
from engram_sync_kit.harness.validate_report import render_html

DATA = Path(__file__).parent / "data" / "validate-report.json"
WINDOW = (1280, 900)


@pytest.fixture(scope="module")
def chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        reason = "Debian's chromium is not installed (run: scripts/chromium.sh)"
        missing(reason)
    assert browser is not None
    return browser


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return loaded


def spread_foreign_targets(report: dict[str, Any]) -> dict[str, Any]:
    """The sample (one small home) has one foreign target: add one touched three months earlier."""
    shaped = copy.deepcopy(report)
    targets = shaped["current"]["foreign_targets_before"]
    targets.append({**targets[0], "target_key": "cloud:older-target", "updated_at": "2026-09-01 08:00:00"})
    return shaped


def _run(browser: str, page: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={page.parent / 'profile'}",
        *flags,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)


def console_errors(stderr: str) -> list[str]:
    """Chromium's log lines for page console messages of level error, and uncaught exceptions."""
    return [
        line
        for line in stderr.splitlines()
        if "CONSOLE" in line and (":ERROR:" in line or "Uncaught" in line or "console.error" in line)
    ]


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_the_console_check_can_fail(chromium: str, tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><body><script>console.error('boom'); undefinedCall();</script></body></html>"
    )
    result = _run(chromium, page, "--dump-dom")
    assert console_errors(result.stderr), result.stderr[-2000:]


def test_report_renders_without_console_errors_and_shows_the_key_figures(
    chromium: str, report: dict[str, Any], tmp_path: Path
) -> None:
    report = spread_foreign_targets(report)
    page = tmp_path / "report.html"
    page.write_text(render_html(as_report(report)), encoding="utf-8")
    result = _run(chromium, page, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_errors(result.stderr) == []
    dom = result.stdout
    totals = report["current"]["totals"]
    for name in ("delivered", "stranded", "refused", "lost", "duplicated"):
        assert re.search(rf"id=\"fig-{name}\"><b>{totals[name]}</b>", dom), name
    assert 'id="fig-untouched"><b>yes</b>' in dom
    proof = "yes" if report["what_if"]["proof"]["ok"] else "NO"
    assert f'id="fig-proof"><b>{proof}</b>' in dom
    for plot in ("plot-inbox", "plot-lanes", "plot-foreign", "plot-what-if"):
        assert f'<svg id="{plot}"' in dom, plot
    # One bar per inbox key (top 25) and series; one point per foreign target.
    keys = min(25, len(report["current"]["inbox_before"]))
    assert dom.count('data-series="memories"') == keys
    assert dom.count('class="point"') == len(report["current"]["foreign_targets_before"])
    refused = report["current"]["refused"]
    assert refused and all(item["project"] in dom for item in refused)


def test_screenshot_at_a_normal_window_size(chromium: str, report: dict[str, Any], tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(as_report(report)), encoding="utf-8")
    shot = tmp_path / "report.png"
    result = _run(chromium, page, f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={shot}")
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    assert _png_size(shot) == WINDOW
    assert shot.stat().st_size > 20_000  # text and plots, not a blank page
