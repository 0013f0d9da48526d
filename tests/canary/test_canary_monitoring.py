"""The fleet view (issues 12 and 29): per-key inbox and per-finding gauges over a real engram database, and
monitoring/'s alerting rules under the real promtool: accepted, every rule with a unit test that fails
when the rule stops firing. The real Prometheus and Alertmanager run in test_canary_fleet.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from canary_support import run_canary
from fleet_support import ALERTMANAGER_CONFIG, MONITORING, RULES, alertmanager_tools, prometheus_tools

from engram_sync_kit.canary.report import TEXTFILE_PREFIX, textfile_name
from engram_sync_kit.harness.engram.env import EngramEnvironment


def test_promtool_accepts_the_rules_and_their_unit_tests() -> None:
    _, promtool, _ = prometheus_tools()
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 12 rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", "engram-canary.rules.test.yml"],
        cwd=MONITORING / "tests",
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_catches_a_rule_that_no_longer_fires(tmp_path: Path) -> None:
    """The unit tests can fail: a rule that stopped firing on a new target makes them exit non-zero."""
    _, promtool, _ = prometheus_tools()
    broken = tmp_path / "engram-canary.rules.yml"
    broken.write_text(
        RULES.read_text().replace(
            '{check=~"foreign_sync_target|foreign_mutation_target"}', '{check="foreign_sync_target"}'
        )
    )
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(MONITORING / "tests" / "engram-canary.rules.test.yml", tests)
    tested = subprocess.run(
        [promtool, "test", "rules", "engram-canary.rules.test.yml"],
        cwd=tests,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode != 0
    assert "EngramCanaryNewForeignTarget" in tested.stdout + tested.stderr


# Issue 36: each way the fleet view went quiet, undone in a copy of the rules, fails the unit tests at the
# alert that then resolves or pages wrongly.
QUIET_MUTANTS: dict[str, tuple[str, ...]] = {
    "a lane alert resolves when its machine goes down or UNKNOWN": (
        'ALERTS{alertname="EngramCanaryLaneBlocked",alertstate="firing"}',
        'ALERTS{alertname="none"}',
        "EngramCanaryLaneBlocked",
    ),
    "a critical finding resolves when the check turns UNKNOWN": (
        "or on (instance) group by (instance) (engram_canary_unknown_info)",
        "or on (instance) group by (instance) (engram_canary_unknown_info == 2)",
        "EngramCanaryCritical",
    ),
    "a dead machine's Silent page ends with its last hour of series": (
        'or (ALERTS{alertname="EngramCanarySilent"} and on (instance) up == 0)',
        "",
        "EngramCanarySilent",
    ),
    "Silent pages on one missed scrape": ("        for: 5m\n", "", "EngramCanarySilent"),
    "Stale resolves when node_exporter dies": (
        'ALERTS{alertname="EngramCanaryStale",alertstate="firing"}',
        'ALERTS{alertname="none"}',
        "EngramCanaryStale",
    ),
    "severity back in a foreign target's identity": (
        "max without (reason, clear_command, severity)\n"
        '          (engram_canary_finding_info{check=~"foreign_sync_target|foreign_mutation_target"})',
        "max without (reason, clear_command)\n"
        '          (engram_canary_finding_info{check=~"foreign_sync_target|foreign_mutation_target"})',
        "EngramCanaryNewForeignTarget",
        # and the finding's severity, not the rule's, on the alert
        "        labels:\n          severity: critical\n        annotations: *finding_annotations\n"
        "      - alert: EngramCanaryCritical",
        "        annotations: *finding_annotations\n      - alert: EngramCanaryCritical",
    ),
    "the cap silent again": (
        "{{ if gt .Value 0.0 }}",
        "{{ if gt .Value 100.0 }}",
        "EngramCanaryNewForeignTarget",
    ),
}


@pytest.mark.parametrize("mutant", list(QUIET_MUTANTS))
def test_promtool_catches_each_way_of_going_quiet(mutant: str, tmp_path: Path) -> None:
    _, promtool, _ = prometheus_tools()
    old, new, alert, *more = QUIET_MUTANTS[mutant]
    mutated = RULES.read_text()
    for before, after in [(old, new), *zip(more[::2], more[1::2], strict=True)]:
        assert before in mutated
        mutated = mutated.replace(before, after)
    (tmp_path / "engram-canary.rules.yml").write_text(mutated)
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(MONITORING / "tests" / "engram-canary.rules.test.yml", tests)
    tested = subprocess.run(
        [promtool, "test", "rules", "engram-canary.rules.test.yml"],
        cwd=tests,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode != 0
    assert f"alertname: {alert}," in tested.stdout + tested.stderr


def test_textfile_gauges_per_inbox_key_and_per_finding_with_acknowledged_labels(
    engram_world_for_gauges: tuple[EngramEnvironment, Path],
) -> None:
    world, config_home = engram_world_for_gauges
    db = str(world.db_path)
    prom = (config_home.parent / "prom" / textfile_name(TEXTFILE_PREFIX, db)).read_text()
    assert f'engram_canary_inbox_rows{{db="{db}",key="side",kind="memories"}} 1.0' in prom
    assert f'engram_canary_inbox_rows{{db="{db}",key="side",kind="telemetry"}} 1.0' in prom
    assert (
        f'engram_canary_finding_rows{{acknowledged="true",check="foreign_sync_target",db="{db}",key="",'
        'target_key="cloud:side"} 2.0'
    ) in prom
    assert f'engram_canary_acknowledged_findings{{db="{db}"}} 1.0' in prom
    assert f'engram_canary_new_foreign_targets{{db="{db}"}} 0.0' in prom


def test_amtool_accepts_the_shipped_alertmanager_config() -> None:
    _, amtool = alertmanager_tools()
    checked = subprocess.run(
        [amtool, "check-config", str(ALERTMANAGER_CONFIG)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 inhibit rules" in checked.stdout


def alert_names() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("alert", alert_names())
def test_every_rule_has_a_unit_test_that_sees_it_fire(alert: str, tmp_path: Path) -> None:
    """A rule that never fires again (its expression matches nothing) fails `promtool test rules`."""
    _, promtool, _ = prometheus_tools()
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                rule["expr"] = "vector(1) == 0"
    (tmp_path / "engram-canary.rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(MONITORING / "tests" / "engram-canary.rules.test.yml", tests)
    tested = subprocess.run(
        [promtool, "test", "rules", "engram-canary.rules.test.yml"],
        cwd=tests,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode != 0
    assert f"alertname: {alert}," in tested.stdout + tested.stderr


@pytest.fixture
def engram_world_for_gauges(
    engram_world: EngramEnvironment, tmp_path: Path
) -> tuple[EngramEnvironment, Path]:
    saved = engram_world.run(["save", "t", "c", "--project", "side"])
    assert saved.returncode == 0, saved.stderr
    config_home = tmp_path / "xdg"
    assert run_canary(["baseline", "--db", str(engram_world.db_path)], config_home).returncode == 0
    (tmp_path / "prom").mkdir()
    run_canary(
        ["check", "--db", str(engram_world.db_path), "--textfile-dir", str(tmp_path / "prom")], config_home
    )
    return engram_world, config_home
