"""Reports of a harness run: rich tables on the terminal, a JSON report and JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from engram_sync_kit.harness.design.conformance import conformance_json, junit_suites
from engram_sync_kit.harness.lanes import LaneTable, MeasuredLaneRow
from engram_sync_kit.harness.scenario.results import ExpectMode, ScenarioResult, unjudged_reason
from engram_sync_kit.harness.scenario.schema import LANE_COUNTS
from engram_sync_kit.harness.scenario.step_results import save_result_name

REPORT_SCHEMA = "engram-harness/report/v1"
EMPTY_PROJECT = '""'  # the empty project, spelled as in the scenario files and the JSON report
SYNC_STATE_SHOWN = (
    "target_key",
    "lifecycle",
    "reason_code",
    "consecutive_failures",
    "last_enqueued_seq",
    "last_acked_seq",
    "last_pulled_seq",
    "last_error",
)
_STYLE = {"passed": "green", "failed": "red", "error": "red", "pass": "green", "fail": "red", "n/a": "dim"}


def lane_table(lanes: LaneTable, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("lane")
    table.add_column("project")
    for count in LANE_COUNTS:
        table.add_column(count, justify="right")
    earlier = any(row.acked_before_run for row in lanes.rows)
    if earlier:
        table.add_column("acked before run", justify="right")
    for row in lanes.rows:
        counts = row.counts()
        cells = [str(counts[c]) for c in LANE_COUNTS]
        if counts["lost"]:
            cells[LANE_COUNTS.index("lost")] = f"[red]{counts['lost']}[/red]"
        if earlier:
            cells.append(str(row.acked_before_run))
        table.add_row(row.lane, row.project or EMPTY_PROJECT, *cells)
    if lanes.unmatched_received:
        table.caption = f"{lanes.unmatched_received} received mutation(s) match no local row"
    return table


def expected_lane_table(result: ScenarioResult) -> Table | None:
    rows = [(e, row) for e in result.expectations if e.status == "fail" for row in e.expected_rows]
    if not rows:
        return None
    table = Table(title="expected (failing lane expectations)", title_justify="left")
    for column in ("tag", "lane", "project", *LANE_COUNTS):
        table.add_column(column)
    for expectation, row in rows:
        table.add_row(
            expectation.tag,
            row["lane"],
            row["project"] or EMPTY_PROJECT,
            *[str(row.get(count, "·")) for count in LANE_COUNTS],
        )
    return table


def sync_state_table(rows: Sequence[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in SYNC_STATE_SHOWN:
        table.add_column(column.removeprefix("last_").replace("consecutive_failures", "failures"))
    for row in rows:
        table.add_row(
            *["" if row.get(column) is None else str(row.get(column)) for column in SYNC_STATE_SHOWN]
        )
    return table


def _json_block(console: Console, title: str, value: Any) -> None:
    console.print(f"[bold]{title}[/bold]")
    console.print(json.dumps(value, indent=2, default=str), markup=False)


def print_evidence(console: Console, result: ScenarioResult) -> None:
    """Everything the scenario recorded (--verbose): each piece under the name of its evidence file."""
    evidence = result.evidence
    for label, snapshot in evidence.get("observe", {}).items():
        console.print(sync_state_table(snapshot.get("sync_state", []), f"sync_state at observe {label}"))
        if snapshot.get("sync_status"):
            console.print(f"  /sync/status: {json.dumps(snapshot['sync_status'], default=str)}", markup=False)
    for name, device in evidence.get("devices", {}).items():
        console.print(
            sync_state_table(device.get("sync_state", []), f"sync_state of device {name} at the end")
        )
    for label, answer in evidence.get("results", {}).items():
        _json_block(console, f"results/{label} (checker or command answer):", answer)
    for command in evidence.get("commands", []):
        device = f"on {command['device']}: " if command.get("device") else ""
        console.print(
            f"command {device}{' '.join(command['args'])} (in {command['cwd']}) exit {command['exit']}",
            markup=False,
        )
        for stream in ("stdout", "stderr"):
            if command.get(stream, "").strip():
                console.print(f"  {stream}:", markup=False)
                console.print("    " + command[stream].rstrip().replace("\n", "\n    "), markup=False)
    for request in evidence.get("requests", []):
        if request.get("via") == "mcp":
            line = f"  mcp {request.get('tool')} {json.dumps(request.get('arguments'), default=str)[:200]}"
            line += f" (in {request.get('cwd')}) -> {str(request.get('answer'))[:300]}"
        else:
            line = (
                f"  {request.get('via', 'http')} {request.get('method')} {request.get('path')} -> "
                f"{request.get('status')}: {json.dumps(request.get('answer'), default=str)[:300]}"
            )
        console.print(line, markup=False)
    console.print(f"[bold]cloud journal ({len(evidence.get('journal', []))} entries):[/bold]")
    for entry in evidence.get("journal", []):
        console.print("  " + json.dumps(entry, default=str), markup=False)
    for name, text in evidence.get("logs", {}).items():
        console.print(f"[bold]log {name}:[/bold]")
        console.print(text.rstrip() or "  (empty)", markup=False)


def judged_answers(result: ScenarioResult) -> dict[str, Any]:
    """The checker or command answers that failing canary/inbox/doctor/command checks looked at."""
    answers: dict[str, Any] = {}
    results = result.evidence.get("results", {})
    by_index = {at.index: at.expectation for at in result.scenario.expectations}
    for outcome in result.expectations:
        expectation = by_index.get(outcome.index)
        if outcome.status != "fail" or expectation is None:
            continue
        label = getattr(expectation.check, "of", None)
        if not isinstance(label, str):
            continue
        # a labelled save's answer is kept under a name of its own, which these two checks read
        name = save_result_name(label) if expectation.kind in {"save_answer", "inbox_row"} else label
        if name in results:
            answers[label] = results[name]
    return answers


def print_result(
    console: Console, result: ScenarioResult, mode: ExpectMode, *, verbose: bool = False
) -> None:
    verdict = result.verdict(mode)
    scenario = result.scenario
    console.rule(
        f"[{_STYLE[verdict]}]{verdict.upper()}[/] {scenario.name} ({scenario.path}) on engram {result.version}"
    )
    if result.error:
        console.print(f"[red]error:[/red] {result.error}")
    console.print(lane_table(result.lanes, "actual lanes"))
    console.print(sync_state_table(result.sync_state, "sync_state at the end"))
    expectations = Table(title="expectations", title_justify="left")
    for column in ("line", "tag", "check", "result", "detail"):
        expectations.add_column(column)
    for e in result.expectations:
        selected = mode == "all" or e.tag in (mode, "invariant")
        style = _STYLE[e.status] if selected else "dim"
        label = e.status if selected else f"{e.status} (not selected)"
        expectations.add_row(str(e.line), e.tag, e.kind, f"[{style}]{label}[/]", e.detail or e.why)
    console.print(expectations)
    if verbose:
        print_evidence(console, result)
    if result.kept:
        console.print(f"evidence kept in {result.root}/evidence (logs in {result.root}/logs)", markup=False)
    if verdict == "passed":
        return
    failed = result.failed_step
    if failed is not None:
        console.print(
            f"[red]failed step[/red] {failed.index} at {scenario.path}:{failed.line}: {failed.error}"
        )
    console.print("[bold]replay (steps as run):[/bold]")
    for step in result.steps:
        mark = {"ok": "✓", "failed": "✗", "skipped": "–"}[step.status]
        console.print(
            f"  {mark} {step.index}. {step.text}" + (f"  # {step.error}" if step.error else ""), markup=False
        )
    expected = expected_lane_table(result)
    if expected is not None:
        console.print(expected)
    if not verbose:
        for label, answer in judged_answers(result).items():
            _json_block(console, f"results/{label} (the answer a failing check judged):", answer)
    for mutation in result.lanes.lost_rows[:10]:
        console.print(
            f"lost: seq {mutation.seq} {mutation.lane}/{mutation.project or EMPTY_PROJECT} {mutation.entity} "
            f"{mutation.entity_key} {mutation.op} (acked, never received)",
            markup=False,
        )
    for entity, entity_key, op, digest in result.lanes.unmatched[:10]:
        console.print(
            f"received, matching no local row: {entity} {entity_key} {op} {digest[:12]}", markup=False
        )
    if result.stderr:
        console.print("[bold]engram stderr:[/bold]")
        console.print("\n".join(result.stderr.splitlines()[-30:]), markup=False)
    if result.journal_excerpt and not verbose:
        console.print("[bold]cloud journal (last entries):[/bold]")
        for entry in result.journal_excerpt[-15:]:
            console.print("  " + json.dumps(entry, default=str), markup=False)
    if result.root:
        console.print(f"kept for inspection: {result.root}")


def summary_table(results: Sequence[ScenarioResult], mode: ExpectMode) -> Table:
    table = Table(title=f"scenarios (expect: {mode})", title_justify="left")
    for column in ("scenario", "engram", "result", "baseline", "design", "lanes", "seconds"):
        table.add_column(column)
    for result in results:
        verdict = result.verdict(mode)
        counts = {}
        for tag in ("baseline", "design"):
            tagged = [e for e in result.expectations if e.tag == tag and e.status != "n/a"]
            passed = sum(1 for e in tagged if e.status == "pass")
            counts[tag] = f"{passed}/{len(tagged)}" if tagged else "-"
        lanes = ", ".join(lane_summary(row) for row in result.lanes.rows)
        table.add_row(
            result.scenario.id,
            result.version,
            f"[{_STYLE[verdict]}]{verdict}[/]",
            counts["baseline"],
            counts["design"],
            lanes or "-",
            f"{result.timings.get('total', 0):.1f}",
        )
    return table


def lane_summary(row: MeasuredLaneRow) -> str:
    """`cloud/app 1/3 delivered, 1 stranded, 1 lost`: what did not arrive says whether it still may."""
    text = f"{row.lane}/{row.project or EMPTY_PROJECT} {row.delivered}/{row.enqueued} delivered"
    undelivered = [
        f"{count} {name}" for name in ("stranded", "lost", "duplicated") if (count := getattr(row, name))
    ]
    return ", ".join([text, *undelivered])


def matrix_table(results: Sequence[ScenarioResult], mode: ExpectMode) -> Table:
    versions = sorted({r.version for r in results})
    table = Table(title=f"scenario × engram version (expect: {mode})", title_justify="left")
    table.add_column("scenario")
    for version in versions:
        table.add_column(version)
    for scenario_id in sorted({r.scenario.id for r in results}):
        cells = []
        for version in versions:
            match = next((r for r in results if r.scenario.id == scenario_id and r.version == version), None)
            verdict = match.verdict(mode) if match else "-"
            cells.append(f"[{_STYLE.get(verdict, 'dim')}]{verdict}[/]")
        table.add_row(scenario_id, *cells)
    return table


def as_json(results: Sequence[ScenarioResult], mode: ExpectMode) -> dict[str, Any]:
    return {
        "schema": REPORT_SCHEMA,
        "expect": mode,
        "passed": all(r.verdict(mode) == "passed" for r in results),
        "scenarios": [
            {
                "name": r.scenario.name,
                "id": r.scenario.id,
                "file": str(r.scenario.path),
                "line": r.scenario.line,
                "engram_version": r.version,
                "cloud_url": r.cloud_url,
                "status": r.verdict(mode),
                "error": r.error,
                "lanes": r.lanes.as_json(),
                "unmatched_received": r.lanes.unmatched_received,
                "sync_state_targets": r.sync_state_targets,
                "sync_state": r.sync_state,
                "kept": r.root if r.kept else None,
                "steps": [
                    {
                        "index": s.index,
                        "device": s.device,
                        "step": s.name,
                        "text": s.text,
                        "line": s.line,
                        "status": s.status,
                        "seconds": round(s.seconds, 3),
                        "error": s.error,
                    }
                    for s in r.steps
                ],
                "stderr": r.stderr,
                "evidence": r.evidence,
                "expectations": [
                    {
                        "line": e.line,
                        "tag": e.tag,
                        "check": e.kind,
                        "status": e.status,
                        "detail": e.detail,
                        "why": e.why,
                        "design_section": design_section(r, e.index),
                    }
                    for e in r.expectations
                ],
                "timings": {k: round(v, 3) for k, v in r.timings.items()},
            }
            for r in results
        ],
        "design_conformance": conformance_json(results),
    }


def design_section(result: ScenarioResult, index: int) -> str | None:
    """The design section of the scenario's expectation INDEX (None: baseline or the lost-rows rule)."""
    at = next((at for at in result.scenario.expectations if at.index == index), None)
    return at.expectation.design_section if at is not None else None


def write_json(path: Path, results: Sequence[ScenarioResult], mode: ExpectMode) -> None:
    path.write_text(json.dumps(as_json(results, mode), indent=2, default=str) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class RunProblem:
    """What failed the run outside any scenario's result: an invalid file, no engram binary."""

    name: str
    message: str
    file: str = ""
    #: "error" fails the JUnit; "skipped" records a scenario that was asked to be skipped
    kind: str = "error"


def write_junit(
    path: Path,
    results: Sequence[ScenarioResult],
    mode: ExpectMode,
    *,
    problems: Sequence[RunProblem] = (),
    unjudged_hint: str = "",
) -> None:
    """One testsuite of scenarios (a testcase per scenario and version), then one per design section.

    PROBLEMS become testcases of their own, so a run that played nothing is never an empty green file.
    With UNJUDGED_HINT, a scenario that passed with nothing judged is a failure that ends with the hint."""
    root = ElementTree.Element("testsuites")
    suite = ElementTree.SubElement(
        root, "testsuite", name="engram-harness", tests=str(len(results) + len(problems))
    )
    failures = errors = skipped = 0
    for r in results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"scenarios.{r.version}",
            name=r.scenario.id,
            file=str(r.scenario.path),
            line=str(r.scenario.line),
            time=f"{r.timings.get('total', 0):.3f}",
        )
        properties = ElementTree.SubElement(case, "properties")
        ElementTree.SubElement(properties, "property", name="engram", value=r.binary)
        ElementTree.SubElement(properties, "property", name="engram version", value=_version_text(r))
        verdict = r.verdict(mode)
        unjudged = unjudged_reason(r, mode) if unjudged_hint else ""
        if verdict == "passed" and not unjudged:
            continue
        lines = [r.error] if r.error else []
        if r.failed_step is not None:
            lines.append(f"step {r.failed_step.index} (line {r.failed_step.line}): {r.failed_step.error}")
        lines += [
            f"line {e.line} [{e.tag}] {e.kind}: {e.detail}" for e in r.selected(mode) if e.status == "fail"
        ]
        if unjudged:
            lines.append(f"nothing judged: {unjudged}; {unjudged_hint}")
        element = "error" if verdict == "error" else "failure"
        errors += verdict == "error"
        failures += verdict != "error"
        node = ElementTree.SubElement(case, element, message=(lines[0] if lines else verdict)[:500])
        node.text = "\n".join(lines)
        ElementTree.SubElement(case, "system-err").text = r.stderr[-5000:]
    for problem in problems:
        case = ElementTree.SubElement(
            suite, "testcase", classname="engram-harness", name=problem.name, file=problem.file
        )
        ElementTree.SubElement(case, problem.kind, message=problem.message[:500]).text = problem.message
        errors += problem.kind == "error"
        skipped += problem.kind == "skipped"
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    junit_suites(root, results, mode)
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _version_text(result: ScenarioResult) -> str:
    if result.reported_version:
        return f"{result.version} (named; the binary reports {result.reported_version})"
    return result.version
