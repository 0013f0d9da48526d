"""The textfile the fleet view reads (issue 29): one info series per unacknowledged finding with the
severity the status counts, the canary's one-line reason and the command that clears it; a bounded
series count per machine; and every metric it emits used by a rule or a dashboard panel, or listed here
as deliberately unused."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from engram_sync_kit.canary.checks import CheckResult
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.findings import Acknowledgement, Finding
from engram_sync_kit.canary.reconcile_result import LaneReport, PullSide, ReconcileResult
from engram_sync_kit.canary.report import (
    RECONCILE_TEXTFILE_PREFIX,
    TEXTFILE_MAX_ITEMIZED,
    TEXTFILE_MAX_LABEL_CHARS,
    TEXTFILE_PREFIX,
    finding_id,
    textfile_name,
    write_reconcile_textfile,
    write_textfile,
)

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
DB = "/home/ana/.engram/engram.db"
TEXTFILE = textfile_name(TEXTFILE_PREFIX, DB)
# Emitted on purpose although no rule or panel reads them (each with why); empty today.
DELIBERATELY_UNUSED: dict[str, str] = {}

LANE = Finding(
    check="legacy_lane_blocked",
    severity="critical",
    message="lane 'cloud' is blocked: the cloud refuses seq 1 (session, project '': 400 ...); clear it with: X",
    target_key="cloud",
    size=8,
    evidence={
        "blocking_rows": 2,
        "held_back_rows": 6,
        "clear_command": f"engram-canary inbox drop --unattributed --db {DB} --apply",
    },
)
UNATTRIBUTED = Finding(
    check="unattributed_mutations",
    severity="warning",
    message="4 unacked rows in the legacy lane have no project",
    target_key="cloud",
    size=2,
    evidence={"count": 2},
)


def foreign(project: str, rows: int = 1, severity: str = "warning") -> Finding:
    return Finding(
        check="foreign_sync_target",
        severity=severity,
        message=f"sync target cloud:{project} is outside the closed target space ({rows} unacked rows)",
        target_key=f"cloud:{project}",
        size=rows,
        evidence={"unacked_rows": 0, "projects": [project], "project_unacked_rows": rows},
    )


def result_of(findings: list[Finding], status: str = "warning", **summary: object) -> CheckResult:
    return CheckResult(
        status=status, db=DB, checked_at="2026-12-01T10:00:00Z", findings=findings, summary=dict(summary)
    )


def samples(path: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(path.read_text(encoding="utf-8")):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def info(path: Path) -> list[dict[str, str]]:
    return [labels for labels, value in samples(path).get("engram_canary_finding_info", []) if value == 1]


def test_a_blocked_lane_is_itemized_first_with_its_reason_and_command(tmp_path: Path) -> None:
    write_textfile(result_of([UNATTRIBUTED, foreign("side"), LANE], status="critical"), tmp_path)
    rows = info(tmp_path / TEXTFILE)
    assert rows[0]["check"] == "legacy_lane_blocked"
    lane = rows[0]
    assert lane == {
        "db": DB,
        "finding": finding_id(DB, LANE),
        "check": "legacy_lane_blocked",
        "severity": "critical",
        "lane": "cloud",
        "target_key": "",
        "key": "",
        "reason": LANE.message,
        "clear_command": f"engram-canary inbox drop --unattributed --db {DB} --apply",
    }
    by_check = {row["check"]: row for row in rows}
    assert by_check["foreign_sync_target"]["clear_command"] == "engram cloud enroll side"
    assert by_check["foreign_sync_target"]["target_key"] == "cloud:side"
    assert by_check["foreign_sync_target"]["lane"] == ""
    assert by_check["unattributed_mutations"]["clear_command"] == (
        f"engram-canary inbox drop --unattributed --db {DB} --apply"
    )
    assert re.fullmatch(r"[0-9a-f]{16}", lane["finding"])


def test_severity_follows_the_status_twelve_foreign_targets_are_all_critical(tmp_path: Path) -> None:
    """The count rule makes the status CRITICAL: each target's alert says critical, not warning."""
    twelve = [foreign(f"p{index:02}") for index in range(12)]
    write_textfile(result_of(twelve, status="critical"), tmp_path, CanaryConfig())
    assert {row["severity"] for row in info(tmp_path / TEXTFILE)} == {"critical"}
    write_textfile(result_of(twelve[:9], status="warning"), tmp_path, CanaryConfig())
    assert {row["severity"] for row in info(tmp_path / TEXTFILE)} == {"warning"}


def test_acknowledged_findings_have_no_info_series(tmp_path: Path) -> None:
    acknowledged = foreign("known").model_copy(
        update={
            "new": False,
            "acknowledgement": Acknowledgement(
                check="foreign_sync_target", target_key="cloud:known", acknowledged_at="2026-11-01T00:00:00Z"
            ),
        }
    )
    write_textfile(result_of([acknowledged], status="ok"), tmp_path)
    assert info(tmp_path / TEXTFILE) == []
    rows = samples(tmp_path / TEXTFILE)["engram_canary_finding_rows"]
    assert [labels["acknowledged"] for labels, _ in rows] == ["true"]


def test_the_series_per_machine_are_capped_worst_first_and_the_rest_counted(tmp_path: Path) -> None:
    many = [foreign(f"p{index:03}", rows=index) for index in range(300)]
    inbox_keys = {f"k{index:03}": {"memories": index, "telemetry": 0} for index in range(300)}
    write_textfile(result_of([*many, LANE], status="critical", inbox_keys=inbox_keys), tmp_path)
    found = samples(tmp_path / TEXTFILE)
    rows = info(tmp_path / TEXTFILE)
    assert len(rows) == TEXTFILE_MAX_ITEMIZED == 20
    assert rows[0]["check"] == "legacy_lane_blocked"
    assert [row["target_key"] for row in rows[1:4]] == ["cloud:p299", "cloud:p298", "cloud:p297"]
    assert len(found["engram_canary_finding_rows"]) == 20
    assert len(found["engram_canary_foreign_target_unacked_rows"]) == 19
    assert len(found["engram_canary_inbox_rows"]) == 40  # memories and telemetry of 20 keys
    assert {labels["key"] for labels, _ in found["engram_canary_inbox_rows"]} >= {"k299", "k280"}
    not_itemized = {labels["what"]: value for labels, value in found["engram_canary_not_itemized"]}
    assert not_itemized == {"findings": 281, "inbox_keys": 280}
    assert (tmp_path / TEXTFILE).stat().st_size < 40_000


def test_reason_and_command_labels_are_one_bounded_line_whatever_the_message_holds(tmp_path: Path) -> None:
    hostile = foreign('x"y\\z\nFORGED 1\u202e' + "é" * 3000)
    write_textfile(result_of([hostile]), tmp_path)
    text = (tmp_path / TEXTFILE).read_text(encoding="utf-8")
    assert not any(line.startswith("FORGED") for line in text.splitlines())
    [row] = info(tmp_path / TEXTFILE)
    assert len(row["reason"]) == TEXTFILE_MAX_LABEL_CHARS
    assert row["reason"].endswith("\u2026") and "\n" not in row["reason"] and "\u202e" not in row["reason"]
    assert row["clear_command"].startswith("engram cloud enroll 'x\"y")
    assert len(row["clear_command"]) <= TEXTFILE_MAX_LABEL_CHARS


def test_an_unknown_check_says_why_in_the_textfile(tmp_path: Path) -> None:
    unknown = CheckResult(
        status="unknown", db=DB, checked_at="2026-12-01T10:00:00Z", error="database is locked"
    )
    write_textfile(unknown, tmp_path)
    found = samples(tmp_path / TEXTFILE)
    assert found["engram_canary_unknown_info"] == [({"db": DB, "reason": "database is locked"}, 1.0)]
    assert found["engram_canary_status"] == [({"db": DB}, 3.0)]
    assert "engram_canary_finding_info" not in found


def emitted_metrics(tmp_path: Path) -> set[str]:
    """Every metric family the canary's textfiles can carry: check's with each kind of finding and an
    UNKNOWN one, and reconcile's."""
    names: set[str] = set()
    full = result_of(
        [LANE, UNATTRIBUTED, foreign("side")],
        status="critical",
        inbox_keys={"side": {"memories": 1, "telemetry": 1, "oldest_memory_age_days": 2.0}},
    )
    unknown = CheckResult(status="unknown", db=DB, checked_at="2026-12-01T10:00:00Z", error="locked")
    reconciled = ReconcileResult(
        status="critical",
        db=DB,
        checked_at="2026-12-01T10:00:00Z",
        lanes=[LaneReport(lane="cloud", project="alpha", enrolled=True, acked=6, lost=6)],
        cloud_only={"beta": 1},
        pull=PullSide(
            lane="cloud",
            last_pulled_seq=3,
            cloud_newest_seq=9,
            not_pulled=4,
            own_not_pulled=2,
            oldest_not_pulled_seconds=7200,
            behind_after_seconds=3600,
            behind=True,
        ),
    )
    for name in ("check", "unknown", "reconcile"):
        (tmp_path / name).mkdir()
    written = [
        write_textfile(full, tmp_path / "check"),
        write_textfile(unknown, tmp_path / "unknown"),
        write_reconcile_textfile(reconciled, tmp_path / "reconcile"),
    ]
    for path in written:
        names |= set(re.findall(r"^# TYPE (\w+) ", path.read_text(), re.MULTILINE))
    return names


def used_metrics() -> tuple[set[str], set[str]]:
    rules = yaml.safe_load((MONITORING / "engram-canary.rules.yml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    templates = [
        str(value)
        for group in rules["groups"]
        for rule in group["rules"]
        for value in rule.get("annotations", {}).values()
    ]
    dashboard = json.loads((MONITORING / "grafana" / "engram-canary.json").read_text())
    panels = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    pattern = re.compile(r"\b(engram_canary_\w+)")
    by_rules = {name for text in exprs + templates for name in pattern.findall(text)}
    by_panels = {name for text in panels for name in pattern.findall(text)}
    return by_rules, by_panels


def test_every_emitted_metric_is_used_by_a_rule_or_a_panel_or_listed_unused(tmp_path: Path) -> None:
    emitted = emitted_metrics(tmp_path)
    by_rules, by_panels = used_metrics()
    assert len(emitted) >= 22
    assert emitted - by_rules - by_panels - set(DELIBERATELY_UNUSED) == set()
    # and nothing queries a metric the textfile does not have
    assert (by_rules | by_panels) - emitted == set()
    assert set(DELIBERATELY_UNUSED) <= emitted


@pytest.mark.parametrize(
    "metric", ["engram_canary_lane_blocked_rows", "engram_canary_finding_info", "engram_canary_status"]
)
def test_the_usage_check_can_fail(metric: str, tmp_path: Path) -> None:
    """A metric that loses its last rule and panel is reported (the check is not vacuous)."""
    emitted = emitted_metrics(tmp_path)
    by_rules, by_panels = used_metrics()
    unused = emitted - (by_rules - {metric}) - (by_panels - {metric}) - set(DELIBERATELY_UNUSED)
    assert unused == {metric}


def test_the_dashboard_leads_with_the_worst_machines_and_says_what_it_plots() -> None:
    dashboard = json.loads((MONITORING / "grafana" / "engram-canary.json").read_text())
    panels = sorted(dashboard["panels"], key=lambda panel: (panel["gridPos"]["y"], panel["gridPos"]["x"]))
    first, second = panels[0], panels[1]
    assert first["title"].startswith("Worst machines first")
    assert first["targets"][0]["expr"].startswith("sort_desc(max by (instance, db) (engram_canary_status")
    mappings = first["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert {value: mapping["text"] for value, mapping in mappings.items()} == {
        "0": "OK",
        "1": "WARNING",
        "2": "CRITICAL",
        "3": "UNKNOWN",
    }
    assert "engram_canary_lane_blocked_rows" in second["targets"][0]["expr"]
    assert "by (instance, db, lane, kind)" in second["targets"][0]["expr"]
    by_title = {panel["title"]: panel for panel in panels}
    per_check = next(
        panel for title, panel in by_title.items() if title.startswith("Unacknowledged findings per")
    )
    assert "by (instance, check)" in per_check["targets"][0]["expr"]
    stale = next(
        panel for title, panel in by_title.items() if title.startswith("Seconds since the last check")
    )
    rules = (MONITORING / "engram-canary.rules.yml").read_text()
    threshold = re.search(r"engram_canary_last_check_timestamp_seconds > (\d+)", rules)
    assert threshold is not None
    steps = stale["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1] == {"color": "red", "value": int(threshold.group(1))}
    assert threshold.group(1) in stale["title"]
    # titles say what they plot: a panel about unacknowledged foreign targets plots exactly those
    for panel in panels:
        for target in panel["targets"]:
            if "engram_canary_new_foreign_targets" in target["expr"]:
                assert "unacknowledged" in target["legendFormat"]


def test_two_databases_on_one_machine_write_two_files_and_never_overwrite_each_other(tmp_path: Path) -> None:
    """Issue 36: the fixed name engram_canary.prom made the second database's check replace the first's."""
    other = "/home/ana/work/.engram/engram.db"
    first = write_textfile(result_of([foreign("side")]), tmp_path)
    second = write_textfile(
        CheckResult(status="ok", db=other, checked_at="2026-12-01T10:00:00Z", summary={}), tmp_path
    )
    assert first != second
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [textfile_name(TEXTFILE_PREFIX, DB), textfile_name(TEXTFILE_PREFIX, other)]
    )
    assert re.fullmatch(r"engram_canary_[0-9a-f]{12}\.prom", first.name)
    assert [row["target_key"] for row in info(first)] == ["cloud:side"]
    assert {labels["db"] for labels, _ in samples(second)["engram_canary_status"]} == {other}
    # the same database writes the same file again
    assert write_textfile(result_of([]), tmp_path) == first


def test_reconcile_writes_one_file_per_database_too(tmp_path: Path) -> None:
    written = {
        db: write_reconcile_textfile(
            ReconcileResult(status="ok", db=db, checked_at="2026-12-01T10:00:00Z"), tmp_path
        )
        for db in (DB, "/srv/other/engram.db")
    }
    assert [path.name for path in written.values()] == [
        textfile_name(RECONCILE_TEXTFILE_PREFIX, db) for db in written
    ]
    assert len(set(written.values())) == 2


def test_the_fixed_name_file_of_earlier_versions_goes_once_it_holds_this_database(tmp_path: Path) -> None:
    """node_exporter would serve the old file beside the new one: the same series twice. Only the
    database whose series it holds removes it; an unreadable or foreign one stays."""
    legacy = tmp_path / "engram_canary.prom"
    legacy.write_text('engram_canary_status{db="/srv/else/engram.db"} 0.0\n')
    write_textfile(result_of([]), tmp_path)
    assert legacy.exists()
    legacy.write_text(f'# TYPE engram_canary_status gauge\nengram_canary_status{{db="{DB}"}} 1.0\n')
    write_textfile(result_of([]), tmp_path)
    assert not legacy.exists()
    legacy.write_bytes(b"\xff\xfe not a textfile {{{")
    write_textfile(result_of([]), tmp_path)
    assert legacy.exists()
    legacy.unlink()
    os.mkfifo(legacy)  # a read would hang: left alone, the check goes on
    write_textfile(result_of([]), tmp_path)
    assert legacy.exists()
    reconcile_legacy = tmp_path / "engram_canary_reconcile.prom"
    reconcile_legacy.write_text(f'engram_canary_reconcile_status{{db="{DB}"}} 0.0\n')
    write_reconcile_textfile(ReconcileResult(status="ok", db=DB, checked_at="2026-12-01T10:00:00Z"), tmp_path)
    assert not reconcile_legacy.exists()


def test_check_info_names_the_file_and_the_check_that_writes_it_again(tmp_path: Path) -> None:
    """What the Stale, Unknown and Silent alerts give as clear_command: the check the cron line runs."""
    written = write_textfile(result_of([]), tmp_path)
    [(labels, value)] = samples(written)["engram_canary_check_info"]
    assert (labels, value) == (
        {
            "db": DB,
            "textfile": str(written),
            "rerun_command": f"engram-canary check --db {DB} --textfile-dir {tmp_path}",
        },
        1.0,
    )
    unknown = CheckResult(status="unknown", db=DB, checked_at="2026-12-01T10:00:00Z", error="locked")
    config = tmp_path / "canary config.yaml"
    [(labels, _)] = samples(write_textfile(unknown, tmp_path, None, config))["engram_canary_check_info"]
    assert labels["rerun_command"] == (
        f"engram-canary --config '{config}' check --db {DB} --textfile-dir {tmp_path}"
    )


def dashboard_panel(title_start: str) -> Any:
    dashboard = json.loads((MONITORING / "grafana" / "engram-canary.json").read_text())
    [panel] = [panel for panel in dashboard["panels"] if panel["title"].startswith(title_start)]
    return panel


def test_what_to_run_ranks_blocked_lanes_first_then_critical_then_warning() -> None:
    """Issue 36: at 20 machines the 4 blocked-lane rows sat among 180 critical ones."""
    panel = dashboard_panel("What to run")
    [target] = panel["targets"]
    assert target["instant"] is True
    assert target["expr"].startswith("sort_desc(engram_canary_finding_info{")
    assert 'check=~"legacy_lane_blocked|project_lane_blocked"} * 3' in target["expr"]
    assert 'severity="critical"} * 2' in target["expr"]
    assert panel["options"]["sortBy"] == [{"displayName": "urgency", "desc": True}]
    [organize] = panel["transformations"]
    assert organize["options"]["renameByName"] == {"Value": "urgency"}
    assert "Value" not in organize["options"]["excludeByName"]


def test_the_inbox_panels_draw_one_series_per_machine() -> None:
    for title in ("Inbox memories waiting", "Oldest waiting memory"):
        [target] = dashboard_panel(title)["targets"]
        assert re.match(r"(sum|max) by \(instance\) \(engram_canary_inbox_", target["expr"]), target["expr"]


def test_seconds_since_the_last_check_is_an_instant_query_that_keeps_a_silent_machine() -> None:
    """A range query's last value showed a dead machine's last fresh age (8 s, green)."""
    [target] = dashboard_panel("Seconds since the last check")["targets"]
    assert (target["instant"], target["range"]) == (True, False)
    assert "last_over_time(engram_canary_last_check_timestamp_seconds" in target["expr"]


def test_the_pages_cap_sentence_names_the_textfiles_cap() -> None:
    rules = (MONITORING / "engram-canary.rules.yml").read_text()
    assert f"beyond the textfile's cap of {TEXTFILE_MAX_ITEMIZED}:" in rules


def test_a_phantoms_own_rows_of_its_project_count_once_in_its_gauge(tmp_path: Path) -> None:
    """Legacy rows on `cloud:notes` that carry project notes are on the target and of its project: 3 on the
    target, 5 of the project (3 of them those), so 5 wait, not 8."""
    finding = Finding(
        check="foreign_sync_target",
        severity="warning",
        message="sync target cloud:notes is outside the closed target space (5 unacked rows)",
        target_key="cloud:notes",
        size=5,
        evidence={
            "target_key": "cloud:notes",
            "unacked_rows": 3,
            "projects": ["notes"],
            "project_unacked_rows": 5,
            "project_unacked_by_lane": {"cloud": 2, "cloud:notes": 3},
        },
    )
    write_textfile(result_of([finding]), tmp_path)
    ((labels, value),) = samples(tmp_path / TEXTFILE)["engram_canary_foreign_target_unacked_rows"]
    assert (labels["target_key"], value) == ("cloud:notes", 5.0)
