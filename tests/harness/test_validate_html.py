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

from engram_sync_kit.harness.validate.model import as_report
from engram_sync_kit.harness.validate.report import render_html

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


FIRST_SCREEN = (1280, 800)
HELD_BACK_REASON = (
    "behind seq 3 (500 session payload directory is required for upsert): engram's worker stops its cycle at "
    "the first row the cloud refuses, so every row queued after it in the cloud lane waits, whatever its "
    "project, until that row is repaired or dropped (engram-canary repair, or inbox drop --seq 3)"
)


def real_home_shape(report: dict[str, Any], projects: int = 36) -> dict[str, Any]:
    """A real home's shape (issue 35 item 21): 36 projects held back behind one refused row, each with
    the same 300-character reason, and a 23-command plan."""
    shaped = copy.deepcopy(report)
    stuck = shaped["current"]["stuck"]
    kept = [entry for entry in stuck if entry["kind"] != "held back"]
    held = [
        {
            "lane": "cloud",
            "project": f"project-{number:02d}",
            "rows": 3 + number,
            "kind": "held back",
            "reason": HELD_BACK_REASON,
            "seqs": [],
        }
        for number in range(projects)
    ]
    shaped["current"]["stuck"] = [*kept, *held]
    db = shaped["what_to_run"][0].split("--db ", 1)[1].split()[0]
    shaped["what_to_run"] = [  # the 23 commands the tester's plan had
        f"engram-canary inbox drop --project project-{number:02d} --noise --db {db} --apply"
        for number in range(23)
    ]
    return shaped


def _first_screen_probe(page: Path) -> None:
    """The page's bottom edge (CSS px from the top of the page) of the verdict, the commands and the
    first reason, as Chromium laid them out at 1280 wide."""
    probe = (
        "<script>const at = id => { const e = document.getElementById(id); "
        "return e ? e.getBoundingClientRect().bottom + scrollY : -1; };"
        "document.body.setAttribute('data-probe', JSON.stringify({lost: at('answer-lost'), "
        "verdict: at('plan-verdict'), commands: at('what-to-run'), stuck: at('stuck')}));</script>"
    )
    page.write_text(page.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")


def test_the_verdict_and_the_commands_are_on_the_first_screen_of_a_real_home(
    chromium: str, report: dict[str, Any], tmp_path: Path
) -> None:
    shaped = real_home_shape(report)
    page = tmp_path / "report.html"
    page.write_text(render_html(as_report(shaped)), encoding="utf-8")
    _first_screen_probe(page)
    result = _run(chromium, page, f"--window-size={FIRST_SCREEN[0]},{FIRST_SCREEN[1]}", "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'data-probe="([^"]*)"', result.stdout)
    assert found, result.stdout[-2000:]
    at = json.loads(found.group(1).replace("&quot;", '"'))
    assert 0 < at["lost"] <= FIRST_SCREEN[1], at
    assert 0 < at["verdict"] <= FIRST_SCREEN[1], at
    assert 0 < at["commands"] <= FIRST_SCREEN[1], at
    assert at["stuck"] > at["commands"], at  # the reasons come after what to run
    # the reason is said once for the 36 projects it holds back, and each project is still named
    dom = result.stdout
    assert dom.count("engram's worker stops its cycle at the first row the cloud refuses, so every") == 1
    assert all(f"project-{number:02d}" in dom for number in range(36))
