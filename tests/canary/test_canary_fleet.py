"""The fleet view end to end (issue 29): three machines made with the real engram v1.20.0 (one healthy,
one with twelve never-enrolled projects, one whose legacy lane a save without a project blocks), the
canary's textfile per machine, textfile-only node_exporters, a real Prometheus with monitoring/'s rules and
a real Alertmanager with monitoring/alertmanager.yml feeding a webhook. Which alert fires for which machine,
with which labels, reason and clearing command; one problem is one notification; the command on the page
clears it. And (issue 36) a machine that goes quiet, its node_exporter killed or its check UNKNOWN, pages
why and resolves nothing that was firing."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet_support import MONITORING, Fleet, Notification, Webhook
from inbox_support import canary, engram_ok, save

from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.polling import eventually

pytestmark = pytest.mark.engram

HEALTHY, PROJECTS, BLOCKED = "healthy", "twelve-projects", "blocked-lane"
TWELVE = [f"p{index:02}" for index in range(1, 13)]


def machines(engram_bin: Path, tmp_path: Path) -> dict[str, EngramEnvironment]:
    made = {
        name: EngramEnvironment(binary=engram_bin, root=tmp_path / name).prepare()
        for name in (HEALTHY, PROJECTS, BLOCKED)
    }
    healthy = made[HEALTHY]
    engram_ok(healthy, "cloud", "enroll", "main-proj")
    save(healthy, "main-proj", "a delivered note", cwd=healthy.home)
    for project in TWELVE:
        save(made[PROJECTS], project, f"a note of {project}", cwd=made[PROJECTS].home)
    blocked = made[BLOCKED]
    engram_ok(blocked, "cloud", "enroll", "main-proj")
    engram_ok(blocked, "save", "loose", "no --project", cwd=blocked.home)
    save(blocked, "main-proj", "held one", cwd=blocked.home)
    save(blocked, "main-proj", "held two", cwd=blocked.home)
    return made


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    started = Webhook()
    try:
        yield started
    finally:
        started.close()


def firing(notifications: list[Notification], instance: str) -> list[Notification]:
    return [n for n in notifications if n.status == "firing" and n.group.get("instance") == instance]


def check(world: EngramEnvironment, fleet: Fleet, machine: str) -> tuple[int, float]:
    """One canary run writing the machine's textfile; its exit status and the textfile's write time."""
    result = canary(world, "check", "--textfile-dir", str(fleet.textfiles[machine]))
    assert result.returncode in (0, 1, 2, 3), result.stdout + result.stderr
    return result.returncode, fleet.textfile(machine).stat().st_mtime


def test_three_machines_page_once_per_problem_naming_the_machine_the_finding_and_the_fix(
    engram_bin: Path, tmp_path: Path, webhook: Webhook
) -> None:
    made = machines(engram_bin, tmp_path)
    blocked_report = json.loads(canary(made[BLOCKED], "check", "--format", "json").stdout)
    [lane_finding] = [f for f in blocked_report["findings"] if f["check"] == "legacy_lane_blocked"]
    fleet = Fleet(tmp_path, [HEALTHY, PROJECTS, BLOCKED], webhook)
    try:
        eventually(
            lambda: len((fleet.api("/api/v1/query", query="up == 1") or {"result": []})["result"]) == 3
            or None,
            timeout=60,
            what="Prometheus scraping three node_exporters",
            interval=0.2,
        )
        eventually(
            lambda: fleet.alertmanager_alerts() == [] or None, timeout=60, what="Alertmanager", interval=0.2
        )
        written: dict[str, float] = {}
        statuses: dict[str, int] = {}
        for machine in (HEALTHY, PROJECTS, BLOCKED):
            statuses[machine], written[machine] = check(made[machine], fleet, machine)
        assert statuses == {HEALTHY: 0, PROJECTS: 2, BLOCKED: 2}

        [projects_page] = eventually(
            lambda: firing(webhook.received(), PROJECTS) or None,
            timeout=60,
            what="the page for twelve targets",
        )
        [blocked_page] = eventually(
            lambda: firing(webhook.received(), BLOCKED) or None, timeout=60, what="the page for the lane"
        )
        delays = {
            "twelve never-enrolled projects (EngramCanaryNewForeignTarget)": projects_page.received
            - written[PROJECTS],
            "blocked legacy lane (EngramCanaryLaneBlocked)": blocked_page.received - written[BLOCKED],
        }
        print("seconds from textfile write to webhook:", json.dumps(delays))

        # The blocked lane: one alert naming the lane, the canary's own reason and the command.
        assert blocked_page.group == {
            "alertname": "EngramCanaryLaneBlocked",
            "instance": BLOCKED,
            "db": str(made[BLOCKED].db_path),
        }
        [lane] = blocked_page.alerts
        assert {key: lane["labels"][key] for key in ("check", "lane", "severity", "instance", "db")} == {
            "check": "legacy_lane_blocked",
            "lane": "cloud",
            "severity": "critical",
            "instance": BLOCKED,
            "db": str(made[BLOCKED].db_path),
        }
        assert "target_key" not in lane["labels"]
        assert lane["annotations"]["reason"] == lane_finding["message"]
        clear = lane["annotations"]["clear_command"]
        assert clear == f"engram-canary inbox drop --unattributed --db {made[BLOCKED].db_path} --apply"

        # Twelve never-enrolled projects: one notification, twelve alerts, each critical (the status
        # counts them so), each with its target and the command that enrolls it.
        assert projects_page.group["alertname"] == "EngramCanaryNewForeignTarget"
        assert sorted(a["labels"]["target_key"] for a in projects_page.alerts) == [
            f"cloud:{p}" for p in TWELVE
        ]
        for alert in projects_page.alerts:
            project = alert["labels"]["target_key"].removeprefix("cloud:")
            assert alert["labels"]["severity"] == "critical"
            assert alert["annotations"]["finding_severity"] == "critical"  # as the status counts it
            assert alert["labels"]["check"] == "foreign_sync_target"
            assert alert["annotations"]["clear_command"] == f"engram cloud enroll {project}"
            assert alert["annotations"]["reason"].startswith(f"sync target cloud:{project} is outside")

        # The rows without a project are a warning of their own (for: shortened here); Alertmanager
        # inhibits it under the lane's page, so the machine still pages once.
        eventually(
            lambda: inhibited(fleet, BLOCKED, "unattributed_mutations") or None,
            timeout=30,
            what="the unattributed-rows warning, inhibited by the blocked lane",
            interval=0.2,
        )
        time.sleep(3 * 2)  # three group intervals: any second notification would have come by now
        notifications = webhook.received()
        assert len(firing(notifications, PROJECTS)) == 1
        assert len(firing(notifications, BLOCKED)) == 1
        assert firing(notifications, HEALTHY) == []
        assert [a for a in fleet.alerts() if a["labels"]["instance"] == HEALTHY] == []

        # The dashboard's queries all answer, the worst machines first and the healthy one last.
        dashboard = json.loads((MONITORING / "grafana" / "engram-canary.json").read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$instance", ".*")
                assert fleet.api("/api/v1/query", query=expr) is not None, (panel["title"], expr)
        worst = fleet.api(
            "/api/v1/query", query=dashboard["panels"][0]["targets"][0]["expr"].replace("$instance", ".*")
        )
        assert [row["metric"]["instance"] for row in worst["result"]][-1] == HEALTHY
        [lanes_row, *_] = fleet.api(
            "/api/v1/query", query=dashboard["panels"][1]["targets"][0]["expr"].replace("$instance", ".*")
        )["result"]
        assert lanes_row["metric"]["instance"] == BLOCKED
        # What to run: the blocked lane first, then the twelve critical targets, then the warning.
        [what] = [panel for panel in dashboard["panels"] if panel["title"].startswith("What to run")]
        rows = fleet.query(what["targets"][0]["expr"].replace("$instance", ".*"))
        assert (rows[0]["metric"]["instance"], rows[0]["metric"]["check"]) == (BLOCKED, "legacy_lane_blocked")
        assert [float(row["value"][1]) for row in rows] == [3.0] + [2.0] * 12 + [1.0]

        # The operator runs the command the page gave, the next check clears the alert.
        program, *arguments = shlex.split(clear)
        assert program == "engram-canary"
        assert canary(made[BLOCKED], *arguments).returncode == 0
        assert check(made[BLOCKED], fleet, BLOCKED)[0] == 0
        eventually(
            lambda: [
                n for n in webhook.received() if n.status == "resolved" and n.group.get("instance") == BLOCKED
            ]
            or None,
            timeout=60,
            what="the lane's page to resolve",
        )
    finally:
        fleet.close()


def inhibited(fleet: Fleet, instance: str, check: str) -> list[dict[str, Any]]:
    return [
        alert
        for alert in fleet.alertmanager_alerts() or []
        if alert["labels"].get("instance") == instance
        and alert["labels"].get("check") == check
        and alert["status"]["inhibitedBy"]
    ]


LANE, FOREIGN = "lane-machine", "foreign-machine"


def quiet_machines(engram_bin: Path, tmp_path: Path) -> dict[str, EngramEnvironment]:
    """A machine whose legacy lane a save without a project blocks, and one with two never-enrolled
    projects, both made by the real engram."""
    made = {
        name: EngramEnvironment(binary=engram_bin, root=tmp_path / name).prepare() for name in (LANE, FOREIGN)
    }
    lane = made[LANE]
    engram_ok(lane, "cloud", "enroll", "main-proj")
    engram_ok(lane, "save", "loose", "no --project", cwd=lane.home)
    save(lane, "main-proj", "held one", cwd=lane.home)
    for project in ("q1", "q2"):
        save(made[FOREIGN], project, f"a note of {project}", cwd=made[FOREIGN].home)
    return made


def sent(notifications: list[Notification], since: float = 0.0) -> list[tuple[str, str, str]]:
    """(status, alertname, instance) of each notification, in the order the webhook got them."""
    return [
        (n.status, n.group["alertname"], n.group["instance"]) for n in notifications if n.received >= since
    ]


def page(webhook: Webhook, status: str, alertname: str, instance: str, what: str) -> Notification:
    def arrived() -> Notification | None:
        for notification in webhook.received():
            if sent([notification]) == [(status, alertname, instance)]:
                return notification
        return None

    found: Notification = eventually(arrived, timeout=90, what=what, interval=0.2)
    return found


def test_a_dead_exporter_and_an_unknown_check_hold_the_page_open_and_page_why(
    engram_bin: Path, tmp_path: Path, webhook: Webhook
) -> None:
    """Issue 36, end to end: node_exporter killed (up 0, its series stale) and a check turned UNKNOWN.
    Neither resolves what was firing; each pages once with its reason and the command that clears it,
    and resolves once the machine answers or the check reads the database again. No other notification."""
    made = quiet_machines(engram_bin, tmp_path)
    fleet = Fleet(tmp_path, [LANE, FOREIGN], webhook)
    seconds: dict[str, float] = {}
    try:
        eventually(
            lambda: len(fleet.query("up == 1")) == 2 or None,
            timeout=60,
            what="two node_exporters",
            interval=0.2,
        )
        eventually(
            lambda: fleet.alertmanager_alerts() == [] or None, timeout=60, what="Alertmanager", interval=0.2
        )
        assert check(made[LANE], fleet, LANE)[0] == 2
        assert check(made[FOREIGN], fleet, FOREIGN)[0] == 1
        page(webhook, "firing", "EngramCanaryLaneBlocked", LANE, "the lane's page")
        page(webhook, "firing", "EngramCanaryNewForeignTarget", FOREIGN, "the foreign targets' page")
        time.sleep(3 * 2)  # three group intervals: the pages' groups settle

        # The lane machine's node_exporter dies.
        killed = time.time()
        fleet.kill_exporter(LANE)
        silent = page(webhook, "firing", "EngramCanarySilent", LANE, "the Silent page")
        seconds["node_exporter killed -> EngramCanarySilent firing"] = silent.received - killed
        [alert] = silent.alerts
        db = str(made[LANE].db_path)
        assert alert["labels"]["db"] == db and alert["labels"]["severity"] == "warning"
        assert alert["annotations"]["reason"].startswith(f"node_exporter on {LANE} does not answer; the last")
        assert alert["annotations"]["clear_command"] == "systemctl restart prometheus-node-exporter"
        [held] = fleet.alerts("EngramCanaryLaneBlocked")
        assert held["state"] == "firing"
        assert held["annotations"]["description"].startswith(f"Held open: no check that could read {db}")
        assert held["annotations"]["clear_command"].startswith("engram-canary inbox drop --unattributed")
        # The dashboard's age of the last check keeps the silent machine, its age growing.
        dashboard = json.loads((MONITORING / "grafana" / "engram-canary.json").read_text())
        [age_panel] = [
            p for p in dashboard["panels"] if p["title"].startswith("Seconds since the last check")
        ]
        ages = {
            row["metric"]["instance"]: float(row["value"][1])
            for row in fleet.query(age_panel["targets"][0]["expr"].replace("$instance", ".*"))
        }
        assert ages[LANE] >= time.time() - killed - 1, ages

        restarted = time.time()
        fleet.start_exporter(LANE)
        back = page(webhook, "resolved", "EngramCanarySilent", LANE, "the Silent page to resolve")
        seconds["node_exporter restarted -> EngramCanarySilent resolved"] = back.received - restarted

        # The foreign machine's check turns UNKNOWN: its database is moved away (a restore in progress).
        database = made[FOREIGN].db_path
        aside = {
            path: path.with_name(path.name + ".aside") for path in database.parent.glob(database.name + "*")
        }
        for path, moved in aside.items():
            path.rename(moved)
        status, written = check(made[FOREIGN], fleet, FOREIGN)
        assert status == 3
        unknown = page(webhook, "firing", "EngramCanaryUnknown", FOREIGN, "the Unknown page")
        seconds["check UNKNOWN written -> EngramCanaryUnknown firing (for: shortened)"] = (
            unknown.received - written
        )
        [alert] = unknown.alerts
        assert f"{database}: no such file" in alert["annotations"]["reason"]
        clear = alert["annotations"]["clear_command"]
        assert clear == (
            f"engram-canary check --db {database} --textfile-dir {fleet.textfiles[FOREIGN].absolute()}"
        )
        held_foreign = fleet.alerts("EngramCanaryNewForeignTarget")
        assert sorted(a["labels"]["target_key"] for a in held_foreign) == ["cloud:q1", "cloud:q2"]
        assert all(a["state"] == "firing" for a in held_foreign)

        # The database is back; the operator runs the page's command.
        for path, moved in aside.items():
            moved.rename(path)
        program, *arguments = shlex.split(clear)
        assert program == "engram-canary"
        ran = canary(made[FOREIGN], *arguments)
        assert ran.returncode == 1, ran.stdout + ran.stderr
        cleared = fleet.textfile(FOREIGN).stat().st_mtime
        resolved = page(webhook, "resolved", "EngramCanaryUnknown", FOREIGN, "the Unknown page to resolve")
        seconds["readable check written -> EngramCanaryUnknown resolved"] = resolved.received - cleared
        time.sleep(3 * 2)
        print("seconds to each notification:", json.dumps(seconds))

        # One page per problem, nothing resolved that was not cleared, nothing sent twice.
        notifications = sent(webhook.received())
        assert sorted(notifications[:2]) == [
            ("firing", "EngramCanaryLaneBlocked", LANE),
            ("firing", "EngramCanaryNewForeignTarget", FOREIGN),
        ]
        assert notifications[2:] == [
            ("firing", "EngramCanarySilent", LANE),
            ("resolved", "EngramCanarySilent", LANE),
            ("firing", "EngramCanaryUnknown", FOREIGN),
            ("resolved", "EngramCanaryUnknown", FOREIGN),
        ]
    finally:
        fleet.close()
