"""--anonymize as a transform of the typed report: every string of the model has a decision in its type
(harness.validate_model.Hide), and the transform follows it. The sample is a real run's report (see
test_validate_html.py)."""

from __future__ import annotations

import itertools
import json
import shlex
from pathlib import Path

import pytest
from pydantic import BaseModel

from engram_sync_kit.harness.validate.anonymize import anonymized, stable_hash
from engram_sync_kit.harness.validate.model import (
    Hide,
    Name,
    ValidateReport,
    as_report,
    rewrite_strings,
    string_fields,
)
from engram_sync_kit.harness.validate.report import render_html, render_markdown

DATA = Path(__file__).parent / "data" / "validate-report.json"
KEY = b"\x02" * 32
SECRET = "Sécret"


def _sample() -> ValidateReport:
    return as_report(json.loads(DATA.read_text(encoding="utf-8")))


def test_every_string_of_the_report_says_what_anonymize_does_with_it() -> None:
    # A new string field without a Hide mark fails here: say whether it is the tester's or the kit's.
    undecided = [path for path, mark in string_fields(ValidateReport) if mark is None]
    assert undecided == []
    places = dict(string_fields(ValidateReport))
    assert len(places) > 60  # the walk reaches every nested model, list item and dict key
    assert places["current.lanes[].project"] is Hide.NAME
    assert places["current.inbox_before[].cwds{}"] is Hide.NAME
    assert places["current.stuck[].reason"] is Hide.TEXT
    assert places["current.serve_log"] is Hide.QUOTES_ROWS
    assert places["database.path"] is Hide.PATH
    assert places["current.doctor_before.summary{}"] is Hide.KIT


class _Undecided(BaseModel):
    project: Name
    title: str  # no decision
    notes: dict[str, int]


def test_a_string_without_a_decision_is_found_and_refused() -> None:
    assert [path for path, mark in string_fields(_Undecided) if mark is None] == ["title", "notes{}"]
    with pytest.raises(TypeError, match="title: a string without a Hide mark"):
        rewrite_strings(_Undecided(project="p", title="t", notes={}), lambda text, _mark: text)


def _planted(report: ValidateReport) -> ValidateReport:
    """Every string that may carry the tester's data replaced by a secret of its kind: names and lanes
    by distinct secret names, paths and free text by text that names one of them and quotes a secret
    session id, as engram and the cloud do."""
    numbers = itertools.count(1)

    def plant(text: str, mark: Hide) -> str:
        number = next(numbers)
        if mark is Hide.NAME:
            return text if text in ("", "cloud", "unsorted", "(no project)", "*") else f"{SECRET} {number}"
        if mark is Hide.LANE:
            return text if text == "cloud" else f"cloud:{SECRET} {number}"
        if mark in (Hide.PATH, Hide.PROGRAM, Hide.PLAN_FILE):
            return f"/home/{SECRET}/{number}"
        if mark is Hide.TEXT and text.startswith("engram-canary "):  # a command names a project as a word
            return shlex.join([*shlex.split(text), "--as", f"{SECRET} app", "--cwd", f"/home/{SECRET}/x"])
        if mark is Hide.TEXT:
            return f'{text} project {SECRET} app: references missing session_id "{SECRET}-session-{number}"'
        if mark is Hide.QUOTES_ROWS:
            return f"title {SECRET} {number}"
        return text

    planted = rewrite_strings(report, plant)
    known = [f"{SECRET} app", f"/home/{SECRET}/x"]
    options = planted.options.model_copy(update={"allowed_projects": known})
    return planted.model_copy(update={"options": options})


def test_no_planted_name_path_text_or_session_id_survives_in_any_rendering() -> None:
    report = _planted(_sample())
    assert report.current.lanes[1].project.startswith(SECRET)  # the planting reached the report
    hidden = anonymized(report, KEY, [f"/home/{SECRET}"])
    assert isinstance(hidden, ValidateReport) and hidden.anonymized
    outputs = {
        "json": json.dumps(hidden.to_json(), ensure_ascii=False),
        "markdown": render_markdown(as_report(hidden)),
        "html": render_html(as_report(hidden)),
    }
    for kind, text in outputs.items():
        assert SECRET not in text, f"{kind}: {text[max(0, text.find(SECRET) - 80) : text.find(SECRET) + 40]}"
    # the numbers and the kit's words stay
    assert hidden.current.totals == report.current.totals
    assert hidden.current.canary_after.status == report.current.canary_after.status
    assert hidden.current.worker.lifecycle == "degraded"


def test_a_session_id_the_cloud_quotes_in_a_refusal_is_hashed() -> None:
    sample = _sample()
    reason = 'push: cloud: status 500: mutations[0] references missing session_id "ana-laptop-7"'
    refusal = sample.current.refused[0].model_copy(update={"reasons": [reason]})
    report = sample.model_copy(update={"current": sample.current.model_copy(update={"refused": [refusal]})})
    hidden = anonymized(report, KEY)
    assert hidden.current.refused[0].reasons == [
        f'push: cloud: status 500: mutations[0] references missing session_id "{stable_hash("ana-laptop-7", KEY)}"'
    ]


def test_a_project_named_like_a_word_of_the_kit_leaves_the_kits_words_alone() -> None:
    # The canary's status, engram's lifecycle and the stuck table's kinds are the kit's words, not names:
    # a project called "degraded" is hashed as a name, the worker's lifecycle stays readable.
    sample = _sample()
    lanes = [sample.current.lanes[0].model_copy(update={"project": "degraded"}), *sample.current.lanes[1:]]
    report = sample.model_copy(update={"current": sample.current.model_copy(update={"lanes": lanes})})
    hidden = anonymized(report, KEY)
    assert hidden.current.lanes[0].project == stable_hash("degraded", KEY)
    assert hidden.current.worker.lifecycle == "degraded"
    assert "engram's worker: degraded" in render_markdown(as_report(hidden))
