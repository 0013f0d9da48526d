"""Rendering the canary's results, check's and reconcile's: the monitoring-plugin text, the JSON contract,
Prometheus (a textfile for node_exporter's collector, or reconcile's exposition on stdout)."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from engram_sync_kit.canary.checks import FOREIGN_CHECKS, CheckResult, stuck_rows
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.findings import Finding, Status, counted_severities
from engram_sync_kit.canary.inbox.selection import UNATTRIBUTED_MUTATIONS
from engram_sync_kit.canary.lane_health import LANE_CHECKS
from engram_sync_kit.canary.liveness import LIVENESS_CHECKS, duration_text
from engram_sync_kit.canary.text import printable
from engram_sync_kit.engram_contract.worker_liveness import WorkerPresence

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from engram_sync_kit.canary.reconcile_result import PullSide, ReconcileResult

PLUGIN_NAME = "ENGRAM-CANARY"
RECONCILE_PLUGIN_NAME = "ENGRAM-CANARY-RECONCILE"
# One textfile per database (two databases on one machine never overwrite each other's):
# engram_canary_<id>.prom and engram_canary_reconcile_<id>.prom, <id> from the `db` label the series carry.
TEXTFILE_PREFIX = "engram_canary"
RECONCILE_TEXTFILE_PREFIX = "engram_canary_reconcile"
# What versions before one file per database wrote; removed when it holds this database's series.
LEGACY_TEXTFILE_NAMES = {
    TEXTFILE_PREFIX: "engram_canary.prom",
    RECONCILE_TEXTFILE_PREFIX: "engram_canary_reconcile.prom",
}
RECONCILE_TEXT_LOST_LINES = 20


class ReportError(CanaryError):
    """A report cannot be written."""


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def headline(result: CheckResult) -> str:
    """Counts only unacknowledged findings ("new": never acknowledged), then how many are acknowledged."""
    if result.error is not None:
        return result.error
    counted = [f for f in result.findings if f.new]
    foreign = {f.target_key for f in counted if f.check in FOREIGN_CHECKS}
    never = {f.target_key for f in counted if f.check in FOREIGN_CHECKS and f.acknowledgement is None}
    others = [f for f in counted if f.check not in FOREIGN_CHECKS]
    acknowledged = sum(1 for f in result.findings if f.acknowledged)
    if foreign:
        text = f"{_plural(len(foreign), 'foreign sync target')} ({len(never)} new)"
    elif any(f.check in FOREIGN_CHECKS for f in result.findings):
        text = "no unacknowledged foreign sync target"
    else:
        text = f"closed target space holds ({_plural(len(result.allowed_targets), 'allowed target')})"
    if others:
        new_others = sum(1 for f in others if f.acknowledgement is None)
        text += f", {_plural(len(others), 'other finding')} ({new_others} new)"
    if acknowledged:
        text += f", {acknowledged} acknowledged"
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
    if summary.get("acknowledged_findings"):
        metrics.append(f"acknowledged_findings={summary['acknowledged_findings']};;;0")
    return " ".join(metrics)


def _evidence_text(evidence: dict[str, Any]) -> str:
    skip = {"target_key", "note"}
    # ensure_ascii=False: a cwd with unicode stays copyable from the text.
    return ", ".join(
        f"{key}={json.dumps(value, sort_keys=True, ensure_ascii=False)}"
        for key, value in evidence.items()
        if key not in skip
    )


def _marker(finding: Finding) -> str:
    if finding.acknowledged:
        return "acknowledged"
    if finding.acknowledgement is None:
        return "NEW"
    return "EXPIRED" if finding.acknowledgement_expired else "WORSE"


def _acknowledgement_text(finding: Finding) -> str | None:
    ack = finding.acknowledgement
    if ack is None:
        return None
    parts = [f"acknowledged {ack.acknowledged_at}"]
    if ack.size is not None:
        parts.append(f"at {ack.size} rows")
    if ack.expires is not None:
        parts.append(f"until {ack.expires}")
    if ack.reason:
        parts.append(f"reason: {ack.reason}")
    if finding.realarm:
        parts.append(f"alarms again: {finding.realarm}")
    return ", ".join(parts)


def status_line(plugin: str, status: str, headline_text: str, performance: str = "") -> str:
    """A monitoring plugin's first line: NAME STATUS - headline | perfdata (the perfdata when there is any)."""
    first = f"{plugin} {status.upper()} - {headline_text}"
    return f"{first} | {performance}" if performance else first


# The text a cron line mails stays bounded as the textfile does: the TEXT_MAX_FINDINGS most urgent
# findings (the textfile's ranking), then one line saying how many were left out.
TEXT_MAX_FINDINGS = 20


def render_text(result: CheckResult, config: CanaryConfig) -> str:
    lines = [status_line(PLUGIN_NAME, result.status, headline(result), perfdata(result, config))]
    severities = counted_severities(result.findings, config.thresholds.critical_new_foreign_targets)
    shown = sorted(result.findings, key=lambda finding: _urgency(finding, severities))[:TEXT_MAX_FINDINGS]
    for finding in sorted(shown, key=lambda f: (f.acknowledged, f.check, f.target_key or "", f.key or "")):
        lines.append(f"[{_marker(finding)}] {finding.severity} {finding.check}: {finding.message}")
        if finding.evidence:
            lines.append(f"    {_evidence_text(finding.evidence)}")
        acknowledgement = _acknowledgement_text(finding)
        if acknowledgement:
            lines.append(f"    {acknowledgement}")
    left_out = len(result.findings) - len(shown)
    if left_out:
        lines.append(
            f"... and {_plural(left_out, 'more finding')} left out, the least urgent "
            f"(the text lists the {TEXT_MAX_FINDINGS} most urgent; --format json lists every finding)"
        )
    if result.error is None:
        lines.append(f"allowed targets: {', '.join(result.allowed_targets)}")
        notes = {str(f.evidence["note"]) for f in shown if f.evidence.get("note")}
        lines.extend(f"note: {note}" for note in sorted(notes))
    return "\n".join(printable(line) for line in lines)


def render_json(result: BaseModel) -> str:
    """The stable JSON document of a result (check's or reconcile's), its field names as aliased."""
    return result.model_dump_json(by_alias=True, indent=2)


# A machine's textfile stays bounded however many phantom targets or inbox keys its database holds: the
# per-finding series (info, rows, rows per foreign target) cover the first TEXTFILE_MAX_ITEMIZED findings,
# the most urgent first, and the per-key inbox series the fullest TEXTFILE_MAX_ITEMIZED keys; the counts
# of what was left out are series of their own (engram_canary_not_itemized).
TEXTFILE_MAX_ITEMIZED = 20
# The reason and command labels of engram_canary_finding_info: one line, at most this many characters.
TEXTFILE_MAX_LABEL_CHARS = 1024


def finding_id(db: str, finding: Finding) -> str:
    """A short stable id of one finding on one database: the alert rules' annotations look a finding's
    reason and command up by it (a label value safe to quote in PromQL, whatever the path or key holds)."""
    return hashlib.sha256(f"{db}\0{finding.identity}".encode()).hexdigest()[:16]


def clearing_command(finding: Finding, db: str) -> str:
    """The command that clears FINDING, as the canary knows it; else the check that shows the evidence."""
    for name in ("clear_command", "claim_command"):
        command = finding.evidence.get(name)
        if isinstance(command, str) and command.strip():
            return command
    if finding.check in FOREIGN_CHECKS:
        projects = finding.evidence.get("projects")
        if isinstance(projects, list) and len(projects) == 1 and isinstance(projects[0], str) and projects[0]:
            return shlex.join(["engram", "cloud", "enroll", projects[0]])
    if finding.check == UNATTRIBUTED_MUTATIONS:
        return shlex.join(["engram-canary", "inbox", "drop", "--unattributed", "--db", db, "--apply"])
    return shlex.join(["engram-canary", "check", "--db", db])


def _label_text(text: str) -> str:
    line = printable(text)
    if len(line) <= TEXTFILE_MAX_LABEL_CHARS:
        return line
    return line[: TEXTFILE_MAX_LABEL_CHARS - 1] + "\u2026"


def _urgency(finding: Finding, severities: dict[str, Status]) -> tuple[bool, bool, int, int, str]:
    """Sort key: unacknowledged first, a blocked lane first among them, then the worst and the biggest."""
    weight = severities.get(finding.identity, finding.status) if finding.new else Status.OK
    return (
        not finding.new,
        finding.check not in LANE_CHECKS,
        -int(weight),
        -finding.measure(),
        finding.identity,
    )


def textfile_name(prefix: str, db: str) -> str:
    """The textfile of one database: PREFIX_<12 hex digits of the db label's SHA-256>.prom."""
    return f"{prefix}_{hashlib.sha256(db.encode()).hexdigest()[:12]}.prom"


def rerun_command(db: str, directory: Path, config_file: Path | None = None) -> str:
    """The check that writes DB's textfile into DIRECTORY again: what the cron line or timer runs."""
    config = ["--config", str(config_file.absolute())] if config_file is not None else []
    return shlex.join(
        ["engram-canary", *config, "check", "--db", db, "--textfile-dir", str(directory.absolute())]
    )


def write_textfile(
    result: CheckResult,
    directory: Path,
    config: CanaryConfig | None = None,
    config_file: Path | None = None,
) -> Path:
    """node_exporter textfile collector format; prometheus_client writes tmp + rename (atomic)."""
    # Imported here: only --textfile-dir needs it, and it costs a one-shot check ~20 ms of start-up.
    from prometheus_client import CollectorRegistry, Gauge

    _require_directory(directory)
    thresholds = (config or CanaryConfig()).thresholds
    registry = CollectorRegistry()
    db = result.db
    name = textfile_name(TEXTFILE_PREFIX, db)
    Gauge(
        "engram_canary_check_info",
        "1, naming this database's textfile and the command that writes it again (the Stale, Unknown and "
        "Silent alerts' clear_command)",
        ["db", "textfile", "rerun_command"],
        registry=registry,
    ).labels(
        db, str((directory / name).absolute()), _label_text(rerun_command(db, directory, config_file))
    ).set(1)
    Gauge("engram_canary_status", "0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN", ["db"], registry=registry).labels(
        db
    ).set(int(result.exit_status))
    Gauge(
        "engram_canary_last_check_timestamp_seconds", "When the check ran", ["db"], registry=registry
    ).labels(db).set(_timestamp(result.checked_at))
    if result.error is not None:
        Gauge(
            "engram_canary_unknown_info",
            "1 while the check is UNKNOWN, with the one line that says why",
            ["db", "reason"],
            registry=registry,
        ).labels(db, _label_text(result.error)).set(1)
    else:
        summary = result.summary
        for name, help_text in (
            ("foreign_targets", "Sync target keys outside the closed target space"),
            ("new_foreign_targets", "Foreign target keys not in the baseline"),
            ("unacked_rows", "Unacked sync_mutations rows, all targets"),
        ):
            Gauge(f"engram_canary_{name}", help_text, ["db"], registry=registry).labels(db).set(
                summary.get(name, 0)
            )
        Gauge(
            "engram_canary_acknowledged_findings",
            "Findings silenced by an acknowledgement",
            ["db"],
            registry=registry,
        ).labels(db).set(summary.get("acknowledged_findings", 0))
        Gauge(
            "engram_canary_unacknowledged_findings",
            "Findings that count toward the status",
            ["db"],
            registry=registry,
        ).labels(db).set(summary.get("unacknowledged_findings", 0))
        severities = counted_severities(result.findings, thresholds.critical_new_foreign_targets)
        ranked = sorted(result.findings, key=lambda finding: _urgency(finding, severities))
        itemized = ranked[:TEXTFILE_MAX_ITEMIZED]
        info = Gauge(
            "engram_canary_finding_info",
            "1 per unacknowledged finding: severity as the status counts it, the canary's one-line reason "
            "and the command that clears it (lane: a blocked lane's target key)",
            ["db", "finding", "check", "severity", "lane", "target_key", "key", "reason", "clear_command"],
            registry=registry,
        )
        for finding in itemized:
            if not finding.new:
                continue
            lane = (finding.target_key or "") if finding.check in LANE_CHECKS | LIVENESS_CHECKS else ""
            info.labels(
                db,
                finding_id(db, finding),
                finding.check,
                severities[finding.identity].label,
                lane,
                "" if lane else finding.target_key or "",
                finding.key or "",
                _label_text(finding.message),
                _label_text(clearing_command(finding, db)),
            ).set(1)
        per_target = Gauge(
            "engram_canary_foreign_target_unacked_rows",
            "Unacked rows on (or mapped by project to) a foreign target",
            ["db", "check", "target_key", "new"],
            registry=registry,
        )
        for finding in itemized:
            if finding.check in FOREIGN_CHECKS and finding.target_key is not None:
                rows = stuck_rows(finding.evidence)
                per_target.labels(db, finding.check, finding.target_key, str(finding.new).lower()).set(rows)
        lane_rows = Gauge(
            "engram_canary_lane_blocked_rows",
            "Rows of a blocked sync lane: refused (blocking) and accepted but waiting behind them (held_back)",
            ["db", "lane", "kind"],
            registry=registry,
        )
        for finding in result.findings:
            if finding.check in LANE_CHECKS and finding.target_key is not None:
                lane_rows.labels(db, finding.target_key, "blocking").set(
                    finding.evidence.get("blocking_rows") or 0
                )
                lane_rows.labels(db, finding.target_key, "held_back").set(
                    finding.evidence.get("held_back_rows") or 0
                )
        per_finding = Gauge(
            "engram_canary_finding_rows",
            "Rows each finding is about (what an acknowledgement compares); acknowledged ones labelled",
            ["db", "check", "target_key", "key", "acknowledged"],
            registry=registry,
        )
        for finding in itemized:
            per_finding.labels(
                db,
                finding.check,
                finding.target_key or "",
                finding.key or "",
                str(finding.acknowledged).lower(),
            ).set(finding.measure())
        inbox_rows = Gauge(
            "engram_canary_inbox_rows",
            "Unacked rows waiting per inbox key (kind: memories or telemetry)",
            ["db", "key", "kind"],
            registry=registry,
        )
        inbox_age = Gauge(
            "engram_canary_inbox_oldest_memory_age_days",
            "Age of the oldest waiting memory per inbox key",
            ["db", "key"],
            registry=registry,
        )
        inbox_keys: dict[str, Any] = summary.get("inbox_keys", {})
        fullest = sorted(inbox_keys.items(), key=lambda item: (-item[1]["memories"], item[0]))
        for key, totals in fullest[:TEXTFILE_MAX_ITEMIZED]:
            inbox_rows.labels(db, key, "memories").set(totals["memories"])
            inbox_rows.labels(db, key, "telemetry").set(totals["telemetry"])
            if totals.get("oldest_memory_age_days") is not None:
                inbox_age.labels(db, key).set(totals["oldest_memory_age_days"])
        not_itemized = Gauge(
            "engram_canary_not_itemized",
            f"Findings (what=findings) or inbox keys (what=inbox_keys) beyond the textfile's cap of "
            f"{TEXTFILE_MAX_ITEMIZED} per-item series",
            ["db", "what"],
            registry=registry,
        )
        not_itemized.labels(db, "findings").set(len(ranked) - len(itemized))
        not_itemized.labels(db, "inbox_keys").set(max(0, len(fullest) - TEXTFILE_MAX_ITEMIZED))
        _liveness_gauges(
            registry,
            db,
            summary.get("sync_liveness") or {},
            thresholds.stall_after_seconds,
            summary.get("pull_side") or {},
        )
        counts: dict[tuple[str, str, str], int] = {}
        for finding in result.findings:
            labels = (finding.check, finding.severity, str(finding.acknowledged).lower())
            counts[labels] = counts.get(labels, 0) + 1
        by_check = Gauge(
            "engram_canary_findings",
            "Findings per check and severity; acknowledged=true ones do not count toward the status",
            ["db", "check", "severity", "acknowledged"],
            registry=registry,
        )
        for (check, severity, acknowledged), count in counts.items():
            by_check.labels(db, check, severity, acknowledged).set(count)
    return _write_textfile(registry, directory, TEXTFILE_PREFIX, db)


def _liveness_gauges(
    registry: CollectorRegistry,
    db: str,
    liveness: dict[str, Any],
    stall_after_seconds: float,
    pull_side: dict[str, Any],
) -> None:
    """Per lane: what canary.liveness reads (a dashboard shows a stall growing before it is one), and the
    pull side's rows engram has not applied."""
    from prometheus_client import Gauge  # only --textfile-dir needs it (~20 ms of start-up)

    lanes: dict[str, dict[str, Any]] = liveness.get("lanes") or {}
    Gauge(
        "engram_canary_sync_stall_threshold_seconds",
        "thresholds.stall_after_seconds: sync_stalled past this wait with no ack in as long",
        ["db"],
        registry=registry,
    ).labels(db).set(float(liveness.get("stall_after_seconds", stall_after_seconds)))
    series = (
        ("sync_waiting_rows", "waiting_rows", "Rows engram's worker sends that wait on the lane"),
        ("sync_oldest_waiting_seconds", "oldest_waiting_seconds", "Age of the oldest row the worker sends"),
        ("sync_seconds_since_last_ack", "seconds_since_last_ack", "Seconds since the lane's last ack"),
        (
            "worker_consecutive_failures",
            "consecutive_failures",
            "sync_state.consecutive_failures (v1.20 gives up at 10)",
        ),
    )
    for name, key, help_text in series:
        gauge = Gauge(f"engram_canary_{name}", help_text, ["db", "lane"], registry=registry)
        for lane, facts in sorted(lanes.items()):
            value = facts.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                gauge.labels(db, lane).set(value)
    pulled = Gauge(
        "engram_canary_pull_rows_not_applied",
        "Pulled rows engram has not applied (sync_apply_deferred): status dead (never retried) or deferred",
        ["db", "status"],
        registry=registry,
    )
    for status in ("dead", "deferred"):
        count = pull_side.get(f"{status}_rows")
        if isinstance(count, int):
            pulled.labels(db, status).set(count)
    lease = Gauge(
        "engram_canary_worker_lease_held",
        "1 while a worker holds the lane's lease (engram serve or engram mcp cycles), else 0",
        ["db", "lane"],
        registry=registry,
    )
    for lane, facts in sorted(lanes.items()):
        lease.labels(db, lane).set(1 if facts.get("worker") == WorkerPresence.HOLDS_LEASE else 0)


def _require_directory(directory: Path) -> None:
    if not directory.is_dir():
        raise ReportError(f"--textfile-dir {directory}: not a directory")


def _write_textfile(registry: CollectorRegistry, directory: Path, prefix: str, db: str) -> Path:
    """node_exporter textfile collector format; prometheus_client writes tmp + rename (atomic)."""
    # Imported here: only the Prometheus outputs need it (~20 ms of a one-shot command's start-up).
    from prometheus_client import write_to_textfile

    path = directory / textfile_name(prefix, db)
    try:
        write_to_textfile(str(path), registry)
    except OSError as error:
        raise ReportError(
            f"--textfile-dir {directory}: cannot write {path.name} ({error.strerror})"
        ) from error
    _remove_legacy_textfile(directory / LEGACY_TEXTFILE_NAMES[prefix], db)
    return path


def _remove_legacy_textfile(legacy: Path, db: str) -> None:
    """The one fixed-name file of earlier versions, once this database's own file replaces it: node_exporter
    would serve both (the same series twice). Another database's legacy file stays until its next check."""
    # Imported here: only the Prometheus outputs need it (~20 ms of a one-shot command's start-up).
    from prometheus_client.parser import text_string_to_metric_families

    if not legacy.is_file():  # absent, or a FIFO or device a read would hang on
        return
    try:
        with legacy.open("rb") as file:
            text = file.read(_LEGACY_READ_LIMIT).decode("utf-8", errors="replace")
        families = list(text_string_to_metric_families(text))
    except (OSError, ValueError):
        return
    if any(sample.labels.get("db") == db for family in families for sample in family.samples):
        legacy.unlink(missing_ok=True)


_LEGACY_READ_LIMIT = 4_000_000


def _timestamp(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


# ----- reconcile's result -----


def reconcile_headline(result: ReconcileResult) -> str:
    if result.error is not None:
        return result.error
    s = result.summary
    window = f" since {result.since}" if result.since else ""
    if s["lost"]:
        return f"{s['lost']} of {s['acked']} acked rows{window} are not in the cloud {result.cloud_url}"
    delivered = f"all {s['acked']} acked rows{window} are in the cloud {result.cloud_url}"
    if result.pull is not None and result.pull.behind:
        return f"{pull_behind_text(result.pull)}; {delivered}"
    return delivered


def pull_behind_text(pull: PullSide) -> str:
    return (
        f"this machine has not pulled {pull.not_pulled} cloud rows of other devices, the oldest stored "
        f"{duration_text(pull.oldest_not_pulled_seconds or 0)} ago (lane {pull.lane} pulled up to seq "
        f"{pull.last_pulled_seq}, the cloud holds up to {pull.cloud_newest_seq}): its worker is not pulling"
    )


def pull_line(pull: PullSide) -> str:
    newest = (
        "nothing above it" if pull.cloud_newest_seq is None else f"the cloud's newest {pull.cloud_newest_seq}"
    )
    waited = (
        ""
        if pull.oldest_not_pulled_seconds is None
        else f", the oldest {duration_text(pull.oldest_not_pulled_seconds)} old"
    )
    held = f", {pull.held_already} already here (a chunk import)" if pull.held_already else ""
    return (
        f"pull: lane {pull.lane} pulled up to seq {pull.last_pulled_seq}, {newest}; not pulled yet: "
        f"{pull.not_pulled} rows of other devices{waited}, {pull.own_not_pulled} of this device's own{held}"
    )


def render_reconcile_text(result: ReconcileResult) -> str:
    # Imported here: the result's models are reconcile's, and a one-shot check must not build them.
    from engram_sync_kit.canary.reconcile_result import LOST_EVIDENCE_LIMIT

    if result.error is not None:
        return status_line(RECONCILE_PLUGIN_NAME, result.status, reconcile_headline(result))
    s = result.summary
    perf = (
        f"lost={s['lost']};;1;0 delivered={s['delivered']};;;0 pending={s['pending']};;;0 "
        f"cloud_only={s['cloud_only']};;;0 not_expected={s['not_expected']};;;0"
    )
    lines = [status_line(RECONCILE_PLUGIN_NAME, result.status, reconcile_headline(result), perf)]
    for lane in result.lanes:
        if lane.enrolled:
            lines.append(
                f"lane {lane.lane} project {lane.project or '(none)'}: acked {lane.acked}, delivered {lane.delivered}, "
                f"lost {lane.lost}, pending {lane.pending}"
                + (f", acked by triage (dropped or repaired) {lane.triaged}" if lane.triaged else "")
            )
        else:
            lines.append(
                f"lane {lane.lane} project {lane.project or '(none)'}: not enrolled, {lane.not_expected} rows never expected in the cloud"
            )
    for row in result.lost[:RECONCILE_TEXT_LOST_LINES]:
        lines.append(
            f"[LOST] seq={row.seq} lane={row.lane} project={row.project} {row.entity} {row.entity_key} "
            f"op={row.op} acked_at={row.acked_at}"
        )
    if s["lost"] > RECONCILE_TEXT_LOST_LINES:
        lines.append(
            f"... and {s['lost'] - RECONCILE_TEXT_LOST_LINES} more lost rows (--format json lists {LOST_EVIDENCE_LIMIT})"
        )
    via = s["delivered_via"]
    lines.append(
        f"delivered via mutation pull {via['mutation']}, chunk {via['chunk']}, current state {via['current_state']}; "
        f"cloud-only rows (other devices) {s['cloud_only']}; read {s['cloud_rows_read']} cloud rows and "
        f"{s['chunks_read']} chunks in {s['cloud_requests']} requests"
    )
    if result.pull is not None:
        lines.append(("[BEHIND] " if result.pull.behind else "") + pull_line(result.pull))
    return "\n".join(printable(line) for line in lines)


def reconcile_registry(result: ReconcileResult) -> CollectorRegistry:
    # Imported here: only the Prometheus outputs need it (~20 ms of a one-shot command's start-up).
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    db = result.db
    Gauge(
        "engram_canary_reconcile_status",
        "0 OK, 1 WARNING (the pull is behind), 2 CRITICAL (rows lost), 3 UNKNOWN",
        ["db"],
        registry=registry,
    ).labels(db).set(int(result.exit_status))
    Gauge(
        "engram_canary_reconcile_last_run_timestamp_seconds", "When reconcile ran", ["db"], registry=registry
    ).labels(db).set(_timestamp(result.checked_at))
    if result.error is None:
        per_project: dict[str, Counter[str]] = defaultdict(Counter)
        for lane in result.lanes:
            per_project[lane.project].update(
                {"lost": lane.lost, "delivered": lane.delivered, "pending": lane.pending, "acked": lane.acked}
            )
        for name, help_text in (
            ("lost", "Rows acked locally that the cloud does not hold"),
            ("delivered", "Rows acked locally that the cloud holds"),
            ("pending", "Rows of enrolled projects not acked yet"),
            ("acked", "Rows acked locally (in the --since window)"),
        ):
            gauge = Gauge(f"engram_canary_{name}_rows", help_text, ["db", "project"], registry=registry)
            for project, counts in sorted(per_project.items()):
                gauge.labels(db, project).set(counts[name])
        cloud_only = Gauge(
            "engram_canary_cloud_only_rows",
            "Cloud rows of entities this journal never wrote",
            ["db", "project"],
            registry=registry,
        )
        for project, count in result.cloud_only.items():
            cloud_only.labels(db, project).set(count)
        if result.pull is not None:
            pull = result.pull
            for name, help_text, value in (
                (
                    "pull_behind",
                    "1: cloud rows of other devices waited past thresholds.stall_after_seconds unpulled",
                    int(pull.behind),
                ),
                (
                    "not_pulled_rows",
                    "Cloud rows of other devices above this machine's pull cursor",
                    pull.not_pulled,
                ),
                (
                    "oldest_not_pulled_seconds",
                    "How long the oldest of them has been in the cloud (0: none)",
                    pull.oldest_not_pulled_seconds or 0,
                ),
            ):
                Gauge(f"engram_canary_reconcile_{name}", help_text, ["db", "lane"], registry=registry).labels(
                    db, pull.lane
                ).set(value)
    return registry


def render_reconcile_prometheus(result: ReconcileResult) -> str:
    # Imported here: only the Prometheus outputs need it (~20 ms of a one-shot command's start-up).
    from prometheus_client import generate_latest

    return str(generate_latest(reconcile_registry(result)).decode())


def write_reconcile_textfile(result: ReconcileResult, directory: Path) -> Path:
    _require_directory(directory)
    return _write_textfile(reconcile_registry(result), directory, RECONCILE_TEXTFILE_PREFIX, result.db)
