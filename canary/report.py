"""Rendering a CheckResult: the monitoring-plugin text, the JSON contract, a Prometheus textfile."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from canary.checks import FOREIGN_CHECKS, CheckResult
from canary.config import CanaryConfig
from canary.errors import CanaryError

PLUGIN_NAME = "ENGRAM-CANARY"
TEXTFILE_NAME = "engram_canary.prom"


class ReportError(CanaryError):
    """A report cannot be written."""


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def headline(result: CheckResult) -> str:
    if result.error is not None:
        return result.error
    foreign = result.summary.get("foreign_targets", 0)
    new = result.summary.get("new_foreign_targets", 0)
    others = [f for f in result.findings if f.check not in FOREIGN_CHECKS]
    if foreign:
        text = f"{_plural(foreign, 'foreign sync target')} ({new} new)"
    else:
        text = f"closed target space holds ({_plural(len(result.allowed_targets), 'allowed target')})"
    if others:
        new_others = sum(1 for f in others if f.new)
        text += f", {_plural(len(others), 'other finding')} ({new_others} new)"
    return text


def perfdata(result: CheckResult, config: CanaryConfig) -> str:
    """Nagios perfdata: label=value;warn;crit;min."""
    if result.error is not None:
        return ""
    summary = result.summary
    critical = config.thresholds.critical_new_foreign_targets
    metrics = [
        f"foreign_targets={summary.get('foreign_targets', 0)};1;;0",
        f"new_foreign_targets={summary.get('new_foreign_targets', 0)};1;{critical};0",
        f"unacked_rows={summary.get('unacked_rows', 0)};;;0",
        f"allowed_targets={len(result.allowed_targets)};;;0",
    ]
    return " ".join(metrics)


def _evidence_text(evidence: dict[str, Any]) -> str:
    skip = {"target_key", "note"}
    return ", ".join(
        f"{key}={json.dumps(value, sort_keys=True)}" for key, value in evidence.items() if key not in skip
    )


def render_text(result: CheckResult, config: CanaryConfig) -> str:
    first = f"{PLUGIN_NAME} {result.status.upper()} - {headline(result)}"
    data = perfdata(result, config)
    lines = [f"{first} | {data}" if data else first]
    for finding in sorted(result.findings, key=lambda f: (not f.new, f.check, f.target_key or f.key or "")):
        marker = "NEW" if finding.new else "known"
        lines.append(f"[{marker}] {finding.severity} {finding.check}: {finding.message}")
        if finding.evidence:
            lines.append(f"    {_evidence_text(finding.evidence)}")
    if result.error is None:
        lines.append(f"allowed targets: {', '.join(result.allowed_targets)}")
        notes = {str(f.evidence["note"]) for f in result.findings if f.evidence.get("note")}
        lines.extend(f"note: {note}" for note in sorted(notes))
    return "\n".join(lines)


def render_json(result: CheckResult) -> str:
    return result.model_dump_json(by_alias=True, indent=2)


def write_textfile(result: CheckResult, directory: Path) -> Path:
    """node_exporter textfile collector format; prometheus_client writes tmp + rename (atomic)."""
    if not directory.is_dir():
        raise ReportError(f"--textfile-dir {directory}: not a directory")
    registry = CollectorRegistry()
    db = result.db
    Gauge("engram_canary_status", "0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN", ["db"], registry=registry).labels(
        db
    ).set(int(result.exit_status))
    Gauge(
        "engram_canary_last_check_timestamp_seconds", "When the check ran", ["db"], registry=registry
    ).labels(db).set(_timestamp(result.checked_at))
    if result.error is None:
        summary = result.summary
        for name, help_text in (
            ("foreign_targets", "Sync target keys outside the closed target space"),
            ("new_foreign_targets", "Foreign target keys not in the baseline"),
            ("unacked_rows", "Unacked sync_mutations rows, all targets"),
        ):
            Gauge(f"engram_canary_{name}", help_text, ["db"], registry=registry).labels(db).set(
                summary.get(name, 0)
            )
        per_target = Gauge(
            "engram_canary_foreign_target_unacked_rows",
            "Unacked rows on (or mapped by project to) a foreign target",
            ["db", "check", "target_key", "new"],
            registry=registry,
        )
        for finding in result.findings:
            if finding.check in FOREIGN_CHECKS and finding.target_key is not None:
                rows = int(finding.evidence.get("unacked_rows") or 0)
                rows += int(finding.evidence.get("project_unacked_rows") or 0)
                per_target.labels(db, finding.check, finding.target_key, str(finding.new).lower()).set(rows)
        counts: dict[tuple[str, str], int] = {}
        for finding in result.findings:
            counts[(finding.check, finding.severity)] = counts.get((finding.check, finding.severity), 0) + 1
        by_check = Gauge(
            "engram_canary_findings",
            "Findings per check and severity",
            ["db", "check", "severity"],
            registry=registry,
        )
        for (check, severity), count in counts.items():
            by_check.labels(db, check, severity).set(count)
    path = directory / TEXTFILE_NAME
    try:
        write_to_textfile(str(path), registry)
    except OSError as error:
        raise ReportError(
            f"--textfile-dir {directory}: cannot write {path.name} ({error.strerror})"
        ) from error
    return path


def _timestamp(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
