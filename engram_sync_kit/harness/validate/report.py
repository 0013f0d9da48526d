"""Render a validate report (harness.validate) for people: markdown for an issue, one offline HTML file
with inline SVG plots. `anonymized` (harness.validate_anonymize) hashes every name a report carries.

Everything here reads the typed report (harness.validate_model.ValidateReport), whose JSON form is what
--json writes, so the JSON, the markdown and the HTML say the same thing.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engram_sync_kit.harness.validate.model import (
    CanarySnapshot,
    Database,
    Doctor,
    ForeignTarget,
    InboxKey,
    LaneRow,
    Migrations,
    ProjectRow,
    Run,
    StuckRow,
    Totals,
    ValidateReport,
    WhatIf,
)
from engram_sync_kit.harness.validate.stuck import project_name

COUNTS = ("delivered", "stranded", "refused", "lost", "duplicated")


# ─── shared facts for both renderings ───────────────────────────────────────


def _inbox_totals(inbox: Sequence[InboxKey]) -> tuple[int, int, int]:
    """(keys, memories, telemetry) of an inbox listing."""
    return len(inbox), sum(k.count for k in inbox), sum(k.telemetry for k in inbox)


def _doctor_line(doctor: Doctor) -> str:
    if doctor.status == "skipped":
        return "skipped (--no-doctor)"
    if doctor.error:
        return f"{doctor.status} ({doctor.error})"
    flagged = [c.check_id for c in doctor.checks if c.result not in ("ok", None)]
    text = f"{doctor.status} ({doctor.summary.get('total', '?')} checks"
    return text + (f"; not ok: {', '.join(map(str, flagged))})" if flagged else ")")


def _migrations_line(migrations: Migrations | None) -> str:
    if migrations is None:
        return "not compared"
    before, after = migrations.user_version
    parts = [
        f"{len(names)} {kind}"
        for kind, names in (
            ("added", migrations.added),
            ("changed", migrations.changed),
            ("dropped", migrations.dropped),
        )
        if names
    ]
    columns = sum(len(columns) for columns in migrations.added_columns.values())
    if columns:
        parts.append(f"{columns} new column(s)")
    if not parts and before == after:
        return f"none (schema unchanged, user_version {after})"
    return ", ".join(parts) + f" (user_version {before} -> {after})"


def next_steps(report: ValidateReport) -> list[str]:
    current = report.current
    total = current.totals
    steps = []
    if total.lost:
        steps.append(
            f"{total.lost} row(s) were acked but never reached the cloud: this is an engram bug; "
            "attach this report (--anonymize) to an engram issue."
        )
    for item in current.refused:
        steps.append(
            f"The server refused {item.rows} row(s) of project {item.project!r}: "
            + (one_line(item.reasons[0]) if item.reasons else f"HTTP {', '.join(item.statuses)}")
            + f" ({_refusal_hint(item.statuses)})."
        )
    inbox_keys, memories, telemetry = _inbox_totals(current.inbox_after)
    what_if = report.what_if
    if what_if is not None:
        effect, proof = what_if.effect, what_if.proof
        if proof.ok and (effect.discarded_rows or effect.to_deliver_rows):
            steps.append(
                f"The {what_if.plan_source} plan makes no row worse off "
                f"(discards {effect.discarded_rows}, delivers {effect.to_deliver_rows}): "
                "run its lines with --apply on the real database (engram-canary takes a backup first)."
            )
        elif not proof.ok:
            failed = [f"{check.check} ({check.detail})" for check in proof.checks if not check.ok]
            steps.append(f"Do not apply the plan as is: {'; '.join(failed)}.")
            for item in what_if.run.refused:
                reason = one_line(item.reasons[0]) if item.reasons else "HTTP " + ", ".join(item.statuses)
                steps.append(
                    f"With the plan, the server refuses {item.rows} row(s) of {item.project!r}: {reason}."
                )
    if memories or telemetry:
        steps.append(
            f"{memories} memories and {telemetry} telemetry rows in {inbox_keys} inbox key(s) stay undelivered "
            "with this engram: `engram-canary inbox list` shows how to claim or drop them."
        )
    if not steps:
        steps.append("Nothing to do: every row this engram reads was delivered and nothing is waiting.")
    return steps


REFUSAL_HINTS = {
    "401": "the token: check ENGRAM_CLOUD_TOKEN",
    "403": "the server's project allowlist: ask its admin; the rows wait, nothing is lost",
    "409": "the project is paused on the server: ask its admin; the rows wait, nothing is lost",
    "413": "a batch too large for the server",
    "400": "the server rejects the rows themselves; rows without a project (v1.20's `engram save` without "
    "--project) are never accepted and hold back the rows after them",
}


def _refusal_hint(statuses: dict[str, int]) -> str:
    hints = [REFUSAL_HINTS[status] for status in sorted(statuses) if status in REFUSAL_HINTS]
    return "; ".join(hints) or "the rows wait, nothing is lost"


# ─── markdown ────────────────────────────────────────────────────────────────


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    header, rows = _without_empty_columns(header, rows)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def _interesting(rows: Sequence[LaneRow], limit: int) -> list[LaneRow]:
    """Rows with something undelivered first, biggest first; at most LIMIT."""
    ranked = sorted(rows, key=lambda r: (-(r.stranded + r.refused + r.lost), -r.delivered, r.project))
    return ranked[:limit]


def one_line(text: str) -> str:
    """engram's multi-line messages (last_error carries its own advice) on one line, words unchanged."""
    return " / ".join(line.strip() for line in text.splitlines() if line.strip())


def worker_line(run: Run) -> str:
    """engram's worker in engram's own words: its lane's lifecycle and last_error, never a word of ours."""
    worker = run.worker
    text = f"engram's worker: {worker.lifecycle or 'unknown'}"
    if worker.last_error:
        text += f" — {one_line(worker.last_error)}"
    if worker.consecutive_failures:
        text += f" ({worker.consecutive_failures} consecutive failure(s))"
    return text


def lost_line(run: Run) -> str:
    lost = run.totals.lost
    if not lost:
        return "**Lost:** 0 rows (nothing was acked without reaching the cloud)."
    named = [f"{r.lane} {project_name(r.project)}: {r.lost}" for r in run.lanes if r.lost]
    return f"**Lost:** {lost} row(s) acked but never received — an engram bug: {', '.join(named)}."


def stuck_line(run: Run) -> str:
    stuck = run.stuck
    rows = sum(entry.rows for entry in stuck)
    if not rows:
        return "**Stuck:** 0 rows."
    kinds: Counter[str] = Counter()
    for entry in stuck:
        kinds[entry.kind] += entry.rows
    return f"**Stuck:** {rows} row(s) (" + ", ".join(f"{n} {kind}" for kind, n in kinds.items()) + ")."


def plan_line(report: ValidateReport) -> str | None:
    """What the what-if plan did, said plainly; a plan that frees nothing while rows are held back too."""
    what_if = report.what_if
    if what_if is None:
        return None
    held = sum(e.rows for e in report.current.stuck if e.kind in ("refused", "held back"))
    gained = what_if.run.totals.delivered - report.current.totals.delivered
    text = (
        f"With the {what_if.plan_source} plan, the what-if delivers {gained} more row(s) than today "
        f"and discards {what_if.effect.discarded_rows}"
    )
    if gained <= 0 and held:
        text += f" — it delivers nothing while {held} row(s) are held back"
    failed = [check for check in what_if.proof.checks if not check.ok]
    if failed:
        text += ". Its proof FAILS: " + "; ".join(f"{c.check} ({c.detail})" for c in failed)
        text += ". Do not run it as is."
    else:
        text += "; its proof holds (nothing blocked after the plan, no row worse off)."
    return text


def time_line(report: ValidateReport) -> str:
    """validate's own time apart from engram's (its doctor, serve's start and the worker's ticks)."""
    timings = report.timings
    text = f"{timings.get('total', 0):.0f} s in all"
    if "own" in timings:
        text += f", validate's own {timings['own']:.0f} s, engram's {timings.get('engram', 0):.0f} s"
    run = report.current.timings
    if run:
        doctor = run.get("doctor_before", 0) + run.get("doctor_after", 0)
        text += (
            f" (this run: engram doctor {doctor:.0f} s, serve's start {run.get('serve_start', 0):.0f} s, "
            f"worker ticks {run.get('worker', 0) - run.get('serve_start', 0):.0f} s)"
        )
    return text


@dataclass(frozen=True)
class ReasonGroup:
    """The stuck rows of one lane that share a kind and a reason: the reason said once, with every
    project it holds (a real home holds back dozens of projects behind one refused row)."""

    lane: str
    why: str
    rows: int
    projects: tuple[str, ...]

    @property
    def members(self) -> str:
        return ", ".join(self.projects)


def reason_groups(stuck: Sequence[StuckRow]) -> list[ReasonGroup]:
    """STUCK grouped by (lane, kind, reason), in the order each group first appears."""
    grouped: dict[tuple[str, str, str], list[StuckRow]] = {}
    for entry in stuck:
        grouped.setdefault((entry.lane, entry.kind, entry.reason), []).append(entry)
    return [
        ReasonGroup(
            lane=lane,
            why=f"{kind}: {reason}",
            rows=sum(entry.rows for entry in entries),
            projects=tuple(_member(entry) for entry in entries),
        )
        for (lane, kind, reason), entries in grouped.items()
    ]


def _member(entry: StuckRow) -> str:
    seqs = f"; seq {', '.join(map(str, entry.seqs))}" if entry.seqs else ""
    return f"{entry.project} ({entry.rows}{seqs})"


def first_screen(report: ValidateReport) -> list[str]:
    """The answers, in markdown: lost, stuck, what to run (the plan's verdict and its commands), then why
    the rows are stuck, each reason once with the projects it holds."""
    current = report.current
    lines = [lost_line(current), "", stuck_line(current), ""]
    lines += ["**What to run** (in order, on your database; each command takes a backup first):", ""]
    plan_text = plan_line(report)
    if plan_text:
        lines += [plan_text, ""]
    if report.what_to_run:
        lines += ["```sh", *report.what_to_run, "```"]
    else:
        lines.append("Nothing: no command of the canary frees a row here.")
    lines += ["", worker_line(current)]
    groups = reason_groups(current.stuck)
    if groups:
        lines += ["", "**Why they are stuck**", ""]
        lines += _table(
            ["lane", "why", "rows", "projects (rows)"],
            [[group.lane, group.why, group.rows, group.members] for group in groups[:15]],
        )
        if len(groups) > 15:
            lines.append(f"\n({len(groups) - 15} more reasons in the JSON/HTML report)")
    return lines


def _counts(row: LaneRow | ProjectRow | Totals) -> list[int]:
    return [row.delivered, row.stranded, row.refused, row.lost, row.duplicated]  # COUNTS, in order


def _canary_status(snapshot: CanarySnapshot | None) -> str:
    return snapshot.status if snapshot is not None else "not checked"


def _canary_headline(snapshot: CanarySnapshot | None) -> str:
    return snapshot.headline if snapshot is not None else ""


def render_markdown(report: ValidateReport) -> str:
    current = report.current
    total = current.totals
    database = report.database
    lines = [
        f"### engram {report.engram.version} rehearsed on a copy of `{database.path}`",
        "",
        *first_screen(report),
    ]
    lines += [
        "",
        "**Details**",
        "",
        f"- Original untouched: {_untouched(database)}; "
        f"{total.enqueued} sync rows; {len(current.ticks)} worker tick(s), "
        f"{_ended(current)}.",
        f"- Migrations applied by the binary: {_migrations_line(current.migrations)}.",
        *([f"- Time: {time_line(report)}."] if report.timings else []),
        f"- Canary: {_canary_status(current.canary_before)} -> {current.canary_after.status} "
        f"({current.canary_after.headline}).",
        f"- engram doctor: {_doctor_line(current.doctor_before)} -> {_doctor_line(current.doctor_after)}.",
    ]
    before, after = _inbox_totals(current.inbox_before), _inbox_totals(current.inbox_after)
    lines.append(
        f"- Inbox: {before[1]} memories + {before[2]} telemetry in {before[0]} key(s) -> "
        f"{after[1]} + {after[2]} in {after[0]}."
    )
    lines += ["", "**Totals**", ""]
    lines += _table(["acked before", *COUNTS], [[total.acked_before_run, *_counts(total)]])
    lines += ["", "**Per lane** (undelivered first)", ""]
    lines += _table(
        ["lane", "project", "enqueued", *COUNTS],
        [[r.lane, project_name(r.project), r.enqueued, *_counts(r)] for r in _interesting(current.lanes, 12)],
    )
    if len(current.lanes) > 12:
        lines.append(f"\n({len(current.lanes) - 12} more lane rows in the JSON/HTML report)")
    if current.refused:
        lines += ["", "**Refused by the server in the run** (the worker stops at the first refusal)", ""]
        lines += _table(
            ["project", "rows", "attempts", "status", "reason"],
            [
                [
                    project_name(r.project),
                    r.rows,
                    r.attempts,
                    ", ".join(r.statuses),
                    one_line((r.reasons or [""])[0])[:160],
                ]
                for r in current.refused
            ],
        )
    what_if = report.what_if
    if what_if is not None:
        effect, proof = what_if.effect, what_if.proof
        applied = sum(1 for step in what_if.plan if step.outcome == "applied")
        wtotal = what_if.run.totals
        lines += [
            "",
            f"**What-if** ({what_if.plan_source} plan, {len(what_if.plan)} line(s), {applied} applied)",
            "",
            f"- Discards {effect.discarded_rows} row(s); hands {effect.to_deliver_rows} claimed copies to "
            f"the worker ({effect.delivered_in_run} delivered in the run, {effect.still_waiting} waiting)"
            + (
                f"; the canary's pre-flight keeps {effect.kept_by_preflight} row(s) the server would refuse."
                if effect.kept_by_preflight
                else "."
            ),
            f"- Stranded {total.stranded} -> {wtotal.stranded}, delivered {total.delivered} -> "
            f"{wtotal.delivered}, refused {total.refused} -> {wtotal.refused}, lost {wtotal.lost}.",
            f"- Proof: {'holds' if proof.ok else 'FAILS'} ("
            + "; ".join(f"{'ok' if c.ok else 'FAILED'}: {c.check}" for c in proof.checks)
            + ")",
        ]
    lines += ["", "**Next**", ""] + [f"- {step}" for step in next_steps(report)]
    if report.anonymized:
        lines += [
            "",
            "_Names and paths are replaced by keyed hashes (--anonymize; the key file of --anonymize-key "
            "maps them back); counts, ages and shapes are real._",
        ]
    return "\n".join(lines) + "\n"


ENDINGS = {
    "idle": "idle after the last one",
    "stalled": "stalled: rows it reads still wait and the last tick moved none",
    "tick limit": "stopped at --ticks while still delivering",
}


def _ended(run: Run) -> str:
    if run.worker.lifecycle == "degraded":
        return "engram's worker degraded: " + one_line(run.worker.last_error or "no reason recorded")
    ticks = run.ticks
    ended = run.ended or ("idle" if ticks and ticks[-1].worker_pending in (0, -1) else "tick limit")
    return ENDINGS.get(ended, ended)


def _untouched(database: Database) -> str:
    if database.original_untouched:
        return "yes"
    if database.live:
        return "no, the live engram wrote it meanwhile (validate only reads it)"
    return "NO"


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


# ─── SVG plots ───────────────────────────────────────────────────────────────

PALETTE = {
    "memories": "#2f6fb3",
    "telemetry": "#b7c7d9",
    "before": "#9aa5b1",
    "current": "#2f6fb3",
    "what-if": "#2e9d5b",
    "line": "#b3412f",
    "refused": "#b3412f",
    "held back": "#e08a3c",
    "not enrolled": "#2f6fb3",
    "per-project lane": "#8e6bbf",
    "waiting": "#9aa5b1",
    "other lane": "#5b6773",
    "stranded": "#2f6fb3",
}
FONT = "font-family='system-ui, sans-serif' font-size='12'"


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _short(label: str, limit: int = 28) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def hbar_chart(
    chart_id: str,
    title: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    stacked: bool,
    note: Callable[[int], str] = lambda _i: "",
    width: int = 760,
) -> str:
    """Horizontal bars, one group per label; series stacked or side by side. Values are labelled."""
    label_width, right = 200, 150
    band = 22 if stacked else 10 + 12 * len(series)
    height = 40 + band * len(labels) + 30
    scale_width = width - label_width - right
    totals = [
        sum(values[i] for _, values in series)
        if stacked
        else max((values[i] for _, values in series), default=0)
        for i in range(len(labels))
    ]
    peak = max(totals, default=0) or 1
    parts = [
        f"<svg id='{chart_id}' class='plot' role='img' aria-label='{_esc(title)}' viewBox='0 0 {width} {height}' "
        f"width='{width}' height='{height}' xmlns='http://www.w3.org/2000/svg' {FONT}>",
        f"<text x='0' y='16' font-weight='bold' font-size='14'>{_esc(title)}</text>",
    ]
    legend_x = label_width
    for name, _ in series:
        parts.append(
            f"<rect x='{legend_x}' y='24' width='10' height='10' fill='{PALETTE.get(name, '#777')}'/>"
            f"<text x='{legend_x + 14}' y='33'>{_esc(name)}</text>"
        )
        legend_x += 14 + 8 * len(name) + 16
    for index, label in enumerate(labels):
        top = 44 + band * index
        parts.append(
            f"<text x='{label_width - 6}' y='{top + band / 2 + 4:.1f}' text-anchor='end'>"
            f"<title>{_esc(label)}</title>{_esc(_short(label))}</text>"
        )
        offset = 0.0
        for series_index, (name, values) in enumerate(series):
            value = values[index]
            length = scale_width * value / peak
            y = top + 3 if stacked else top + 3 + 12 * series_index
            h = band - 6 if stacked else 10
            x = label_width + (offset if stacked else 0)
            parts.append(
                f"<rect class='bar' data-series='{_esc(name)}' data-label='{_esc(label)}' data-value='{value:g}' "
                f"x='{x:.1f}' y='{y}' width='{max(length, 0.0):.1f}' height='{h}' fill='{PALETTE.get(name, '#777')}'>"
                f"<title>{_esc(label)}: {_esc(name)} {value:g}</title></rect>"
            )
            if not stacked:
                parts.append(f"<text x='{x + length + 4:.1f}' y='{y + 9}' font-size='10'>{value:g}</text>")
            offset += length
        if stacked:
            text = f"{totals[index]:g}" + (f" · {note(index)}" if note(index) else "")
            parts.append(
                f"<text x='{label_width + offset + 4:.1f}' y='{top + band / 2 + 4:.1f}'>{_esc(text)}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _moment(text: Any) -> datetime | None:
    if not text:
        return None
    value = str(text).replace("T", " ").replace("Z", "")
    for pattern in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f"):
        try:
            return datetime.strptime(value[:26], pattern)
        except ValueError:
            continue
    return None


def timeline_chart(chart_id: str, title: str, targets: Sequence[ForeignTarget], width: int = 760) -> str:
    """Foreign targets over time: the cumulative count by the time engram last touched each target."""
    points = sorted(
        ((moment, target) for target in targets if (moment := _moment(target.updated_at)) is not None),
        key=lambda pair: pair[0],
    )
    height, left, bottom, top = 260, 50, 40, 30
    parts = [
        f"<svg id='{chart_id}' class='plot' role='img' aria-label='{_esc(title)}' viewBox='0 0 {width} {height}' "
        f"width='{width}' height='{height}' xmlns='http://www.w3.org/2000/svg' {FONT}>",
        f"<text x='0' y='16' font-weight='bold' font-size='14'>{_esc(title)}</text>",
    ]
    if not points:
        parts.append(f"<text x='{left}' y='{height / 2}'>no foreign target has a time</text></svg>")
        return "".join(parts)
    first, last = points[0][0], points[-1][0]
    span = max((last - first).total_seconds(), 1.0)
    plot_w, plot_h = width - left - 20, height - top - bottom
    count = len(points)

    def x_of(moment: datetime) -> float:
        return left + plot_w * (moment - first).total_seconds() / span

    def y_of(value: int) -> float:
        return top + plot_h - plot_h * value / count

    parts.append(
        f"<line x1='{left}' y1='{top + plot_h}' x2='{left + plot_w}' y2='{top + plot_h}' stroke='#444'/>"
        f"<line x1='{left}' y1='{top}' x2='{left}' y2='{top + plot_h}' stroke='#444'/>"
        f"<text x='{left - 6}' y='{y_of(count) + 4:.1f}' text-anchor='end'>{count}</text>"
        f"<text x='{left - 6}' y='{y_of(0) + 4:.1f}' text-anchor='end'>0</text>"
        f"<text x='{left}' y='{height - 12}'>{first:%Y-%m-%d}</text>"
        f"<text x='{left + plot_w}' y='{height - 12}' text-anchor='end'>{last:%Y-%m-%d}</text>"
    )
    path = [f"M{x_of(first):.1f},{y_of(0):.1f}"]
    for index, (moment, target) in enumerate(points, start=1):
        x, y = x_of(moment), y_of(index)
        path.append(f"H{x:.1f}V{y:.1f}")
        parts.append(
            f"<circle class='point' data-target='{_esc(target.target_key)}' cx='{x:.1f}' cy='{y:.1f}' r='3' "
            f"fill='{PALETTE['line']}'><title>{_esc(target.target_key)}: seq {_esc(target.last_enqueued_seq)}, "
            f"{_esc(target.updated_at)}, {_esc(target.lifecycle)}</title></circle>"
        )
    parts.append(f"<path d='{''.join(path)}' fill='none' stroke='{PALETTE['line']}' stroke-width='1.5'/>")
    parts.append("</svg>")
    return "".join(parts)


# ─── HTML ────────────────────────────────────────────────────────────────────

CSS = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:980px;padding:0 1rem;color:#1d2733;line-height:1.45}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #dde3ea}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}td,th{border:1px solid #dde3ea;padding:.2rem .5rem;text-align:right}
td:first-child,th:first-child,td.name{text-align:left}th{background:#f3f6f9}
.figures{display:flex;flex-wrap:wrap;gap:.8rem;margin:1rem 0}.figure{border:1px solid #dde3ea;border-radius:6px;padding:.5rem .9rem;min-width:7rem}
.figure b{display:block;font-size:1.4rem}.ok{color:#2e7d32}.bad{color:#b3412f}.plot{max-width:100%;height:auto;display:block;margin:.6rem 0}
code{background:#f3f6f9;padding:0 .2rem}pre{background:#f3f6f9;padding:.6rem;overflow-x:auto;white-space:pre-wrap}
#answers{border:1px solid #dde3ea;border-radius:6px;padding:.2rem 1rem;margin:1rem 0}
#stuck td,#stuck th{text-align:left}#stuck td:nth-child(3){text-align:right}#worker{font-size:.85rem;color:#5b6773}small{color:#5b6773}
"""


def _without_empty_columns(
    header: Sequence[str], rows: Iterable[Sequence[Any]]
) -> tuple[list[str], list[list[Any]]]:
    """A column no row has a value in says nothing: it is left out (0 is a value, '' and None are not)."""
    listed = [list(row) for row in rows]
    keep = [i for i in range(len(header)) if not listed or any(row[i] not in ("", None) for row in listed)]
    return [header[i] for i in keep], [[row[i] for i in keep] for row in listed]


def _html_table(header: Sequence[str], rows: Iterable[Sequence[Any]], table_id: str = "") -> str:
    header, rows = _without_empty_columns(header, rows)
    ident = f" id='{table_id}'" if table_id else ""
    head = "".join(f"<th>{_esc(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{_esc(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(figure_id: str, label: str, value: Any, good: bool | None = None) -> str:
    css = "" if good is None else (" ok" if good else " bad")
    return f"<div class='figure{css}' id='{figure_id}'><b>{_esc(value)}</b>{_esc(label)}</div>"


SPREAD_SECONDS = 3600.0  # a timeline of targets all touched within the hour is a vertical line


def _foreign_view(targets: Sequence[ForeignTarget]) -> str:
    """The foreign targets over time when their times spread; else (one moment, or none) a table."""
    moments = sorted(m for t in targets if (m := _moment(t.updated_at)) is not None)
    if len(moments) >= 2 and (moments[-1] - moments[0]).total_seconds() >= SPREAD_SECONDS:
        return timeline_chart(
            "plot-foreign", "Foreign sync targets over time (cumulative, by last update)", targets
        )
    if not targets:
        return "<p id='foreign-targets'>No foreign sync target.</p>"
    return _html_table(
        ["target", "lifecycle", "last enqueued seq", "last update"],
        [[t.target_key, t.lifecycle or "", t.last_enqueued_seq or "", t.updated_at or ""] for t in targets],
        "foreign-targets",
    )


def _md_bold(text: str) -> str:
    """`**Lost:** 0` as HTML: the bold label of a first-screen answer."""
    parts = _esc(text).split("**")
    return "".join(f"<b>{part}</b>" if index % 2 else part for index, part in enumerate(parts))


def _blocked_check(what_if: WhatIf) -> bool:
    """The proof's honest headline: false whenever a blocker remains after the plan (or the proof fails)."""
    return what_if.proof.ok and all(
        check.ok for check in what_if.proof.checks if check.check == "nothing blocked after the plan"
    )


def _inbox_chart(inbox: Sequence[InboxKey]) -> str:
    keys = sorted(inbox, key=lambda k: -k.total)[:25]
    labels = [k.key for k in keys]
    return hbar_chart(
        "plot-inbox",
        "Inbox before the run: rows per key (oldest age in days)",
        labels,
        [
            ("memories", [float(k.count) for k in keys]),
            ("telemetry", [float(k.telemetry) for k in keys]),
        ],
        stacked=True,
        note=lambda i: f"{keys[i].oldest_age_days:.0f} d",
    )


STUCK_KINDS = ("refused", "held back", "not enrolled", "per-project lane", "waiting", "other lane")


def _lanes_chart(current: Run, limit: int = 25) -> str:
    """The undelivered rows of this engram's run per lane and project, split by why they are stuck."""
    totals: Counter[str] = Counter()
    cells: dict[tuple[str, str], float] = {}
    for entry in current.stuck:
        label = f"{entry.lane} · {entry.project}"
        totals[label] += entry.rows
        cells[(label, entry.kind)] = cells.get((label, entry.kind), 0.0) + float(entry.rows)
    labels = [label for label, _ in sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:limit]]
    kinds = [kind for kind in STUCK_KINDS if any(k == kind for _, k in cells)]
    more = len(totals) - len(labels)
    return hbar_chart(
        "plot-lanes",
        "Rows this engram leaves undelivered, per lane · project, by why"
        + (f" (top {limit}; {more} more in the table)" if more else ""),
        labels,
        [(kind, [cells.get((label, kind), 0.0) for label in labels]) for kind in kinds],
        stacked=True,
    )


def _what_if_chart(current: Totals, what_if: WhatIf) -> str:
    labels = ["delivered", "stranded", "refused", "lost", "discarded by the plan"]
    now = [float(n) for n in _counts(current)[:4]] + [0.0]
    then = [float(n) for n in _counts(what_if.run.totals)[:4]] + [float(what_if.effect.discarded_rows)]
    return hbar_chart(
        "plot-what-if",
        "What-if: this engram as is vs after the plan",
        labels,
        [("current", now), ("what-if", then)],
        stacked=False,
    )


def render_html(report: ValidateReport) -> str:
    current = report.current
    total = current.totals
    what_if = report.what_if
    database = report.database
    title = f"engram {report.engram.version} rehearsed on {_basename(database.path)}"
    figures = [
        _figure("fig-delivered", "delivered", total.delivered),
        _figure("fig-stranded", "stranded", total.stranded),
        _figure("fig-refused", "refused", total.refused, total.refused == 0),
        _figure("fig-lost", "lost", total.lost, total.lost == 0),
        _figure("fig-duplicated", "duplicated", total.duplicated),
        _figure(
            "fig-canary", "canary after", current.canary_after.status, current.canary_after.status == "ok"
        ),
        _figure(
            "fig-untouched",
            "original untouched",
            "yes" if database.original_untouched else ("live" if database.live else "NO"),
            bool(database.original_untouched),
        ),
    ]
    if what_if is not None:
        figures.append(
            _figure(
                "fig-proof",
                "nothing blocked after the plan",
                "yes" if _blocked_check(what_if) else "NO",
                _blocked_check(what_if),
            )
        )
    stuck = current.stuck
    plan_text = plan_line(report)
    commands = report.what_to_run
    body = [
        f"<h1>{_esc(title)}</h1>",
        f"<small>{_esc(report.generated_at)} · {len(current.ticks)} worker tick(s) · "
        f"{total.enqueued} sync rows{' · names anonymized' if report.anonymized else ''}</small>",
        f"<section id='answers'><p id='answer-lost' class='{'ok' if not total.lost else 'bad'}'>"
        f"{_md_bold(lost_line(current))}</p>",
        f"<p id='answer-stuck'>{_md_bold(stuck_line(current))}</p>",
        "<p><b>What to run</b> (in order, on your database; each command takes a backup first):</p>",
        f"<p id='plan-verdict' class='{'ok' if what_if is None or what_if.proof.ok else 'bad'}'>"
        f"{_esc(plan_text)}</p>"
        if plan_text
        else "",
        "<pre id='what-to-run'>" + _esc("\n".join(commands)) + "</pre>"
        if commands
        else "<p id='what-to-run'>Nothing: no command of the canary frees a row here.</p>",
        f"<p id='worker'>{_esc(worker_line(current))}</p>",
        "<p><b>Why they are stuck</b> (each reason once, with the projects it holds)</p>"
        + _html_table(
            ["lane", "why", "rows", "projects (rows)"],
            [[group.lane, group.why, group.rows, group.members] for group in reason_groups(stuck)],
            "stuck",
        )
        if stuck
        else "",
        "</section>",
        f"<div class='figures'>{''.join(figures)}</div>",
        "<h2>Next</h2><ul id='next-steps'>"
        + "".join(f"<li>{_esc(step)}</li>" for step in next_steps(report))
        + "</ul>",
        "<h2>Lanes</h2>",
        _lanes_chart(current),
        _html_table(
            ["lane", "project", "enqueued", "acked before", *COUNTS],
            [
                [r.lane, project_name(r.project), r.enqueued, r.acked_before_run, *_counts(r)]
                for r in current.lanes
            ],
            "lanes",
        ),
        "<h2>Per project</h2>",
        _html_table(
            ["project", "enqueued", "acked before", *COUNTS],
            [
                [project_name(r.project), r.enqueued, r.acked_before_run, *_counts(r)]
                for r in current.projects
            ],
            "projects",
        ),
    ]
    if current.refused:
        body += [
            "<h2>Refused by the server</h2>",
            _html_table(
                ["project", "rows", "attempts", "status", "reason (as engram recorded it)"],
                [
                    [project_name(r.project), r.rows, r.attempts, ", ".join(r.statuses), "; ".join(r.reasons)]
                    for r in current.refused
                ],
                "refused",
            ),
        ]
    inbox_after = _inbox_totals(current.inbox_after)
    body += [
        "<h2>Inbox</h2>",
        _inbox_chart(current.inbox_before),
        _html_table(
            ["key", "memories", "telemetry", "oldest (days)", "claim"],
            [
                [k.key, k.count, k.telemetry, f"{k.oldest_age_days:.1f}", k.claim_command or ""]
                for k in current.inbox_before
            ],
            "inbox",
        ),
        f"<p>After the run: {inbox_after[1]} memories and "
        f"{inbox_after[2]} telemetry rows in {inbox_after[0]} key(s).</p>",
        "<h2>Foreign targets</h2>",
        _foreign_view(current.foreign_targets_before),
        "<h2>Canary, doctor, migrations</h2>",
        _html_table(
            ["", "before", "after"],
            [
                ["canary", _canary_status(current.canary_before), current.canary_after.status],
                ["canary headline", _canary_headline(current.canary_before), current.canary_after.headline],
                ["engram doctor", _doctor_line(current.doctor_before), _doctor_line(current.doctor_after)],
            ],
            "verdicts",
        ),
        f"<p id='migrations'>Migrations applied by the binary: {_esc(_migrations_line(current.migrations))}</p>",
        "<h2>Worker ticks</h2>",
        _html_table(
            ["tick", "seconds", "phase", "accepted", "refused", "waiting after"],
            [[t.tick, t.seconds, t.phase, t.accepted, t.refused, t.worker_pending] for t in current.ticks],
            "ticks",
        ),
    ]
    if what_if is not None:
        effect = what_if.effect
        body += [
            "<h2>What-if</h2>",
            f"<p>{_esc(what_if.plan_source)} plan applied to a second copy: discards {effect.discarded_rows} row(s), "
            f"hands {effect.to_deliver_rows} claimed copies to the worker ({effect.delivered_in_run} delivered in the run).</p>",
            _what_if_chart(total, what_if),
            _html_table(
                ["line", "command", "outcome"],
                [[step.line, step.command, step.outcome] for step in what_if.plan],
                "plan",
            ),
            _html_table(
                ["check", "holds", "detail"],
                [[c.check, "yes" if c.ok else "NO", c.detail] for c in what_if.proof.checks],
                "proof",
            ),
        ]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_esc(title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )
