"""A pytest plugin (loaded by tests/conftest.py): every canary and triage test in tests/canary/ that
reads a home the real engram v1.20.0 wrote runs once per schema generation (builder.FIXTURE_VERSIONS,
engram_sync_kit/engram_contract/generations.py): on v1.20.0 as written, and with the file opened as the
v1 line's generation 8, v2.0.0-rc.11, v2.0.0-rc.12+ and v3 (tests/engram_schemas/open_as.py, predicted
from store.go, never observed).

The real binary writes the home as always. While a test runs on a later generation, every engram process
the test drives leaves the file as that generation's open would: after each CLI run, once `engram serve`
is ready, and after each MCP tool call. v1.20 keeps writing into the later-shaped file (its INSERTs name
their columns, so the new columns take their defaults), as a downgrade-then-upgrade machine would; so on
rc.12+ and v3 the unenrolled projects' journal rows are legacy rows from before the upgrade, which the
canary must read right too (the fresh rc.12 shape, with no such rows, is tests/canary/
test_unjournaled_memories.py's). A triage --apply on a later generation is refused with nothing written
(tests/canary/schema_under_test.run_apply) and the test ends there, passed.

Tests that stay on v1.20.0 are listed with their reason in V120_ONLY, the one place.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_schemas.builder import FIXTURE_VERSIONS, V3, V120
from engram_schemas.open_as import open_as
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.engram.mcp_client import McpSession
from engram_sync_kit.harness.engram.serve import EngramDaemon

CANARY_TESTS = Path(__file__).resolve().parents[1] / "canary"
# make test plays the real-binary canary tests on v1.20.0 (the binary that builds here) and v3 (today's
# engram, which journals as rc.12+ does): the 15-minute budget, which rc.12+ copies pushed past (a fresh
# clone took 17 min on 2026-12-03). `make test-generations` plays all five. The schema and fixture tests of
# every generation, rc.12+ included, run in both.
PLAYED_VERSIONS = FIXTURE_VERSIONS if os.environ.get("ENGRAM_KIT_ALL_GENERATIONS") else (V120, V3)
ENGRAM_FIXTURES = {"engram_world", "engram_bin"}
# test module::name -> why it runs on v1.20.0 only.
V120_ONLY: dict[str, str] = {
    "test_inbox_unattributed::test_they_hold_back_an_enrolled_projects_rows": (
        "no canary command: it pins v1.20's own worker (a refused batch stops the cycle)"
    ),
    "test_canary_stage_a::test_engram_recorded_what_its_detection_saw": (
        "pins the columns the real v1.20 binary gives sessions (Stage A re-derives what v1.20 never records)"
    ),
    "test_triage_invariant::test_no_triage_command_shrinks_what_the_worker_delivers": (
        "a hypothesis invariant over triage's library writes on a module-wide real-v1.20 template; on v2/v3 "
        "triage writes nothing (the refusal is pinned by test_schema_versions and by every --apply test here)"
    ),
    "test_triage_invariant::test_the_model_sees_a_blocked_lane": (
        "shows the invariant's model has teeth through a triage write (drop-unattributed --apply), v1.20 only"
    ),
    "test_canary_liveness::test_the_real_worker_gives_up_and_check_says_so": (
        "time: ten real failures and engram's own backoffs (about 13 minutes); the finding on a v2/v3 file is "
        "pinned per version by test_a_worker_past_its_give_up_point_says_so_and_how_to_restart_it"
    ),
    "test_canary_liveness::test_a_pulled_row_engram_discards_on_apply_is_a_finding": (
        "time: six 30 s pull ticks of v1.20's own worker; the finding on v2/v3 files is pinned by "
        "test_a_dead_pulled_row_is_a_finding_on_every_schema"
    ),
    "test_reconcile_pull_behind::"
    "test_rows_of_another_device_that_this_machine_never_pulled_warn_then_clear_after_its_worker_pulls": (
        "time: a 30 s pull tick of v1.20's own worker; the warning on v2/v3 files is pinned per version by "
        "test_the_pull_side_is_read_with_a_since_window_that_needs_no_pull"
    ),
    # Left on v1.20 for the time budget (each costs ~10 s per version for little the other runs lack):
    "test_canary_fleet::test_three_machines_page_once_per_problem_naming_the_machine_the_finding_and_the_fix": (
        "time: three homes, real Prometheus, Alertmanager and node_exporters; the textfile they read is pinned "
        "per version by test_textfile_gauges_per_inbox_key_and_per_finding_with_acknowledged_labels"
    ),
    "test_canary_fleet::test_a_dead_exporter_and_an_unknown_check_hold_the_page_open_and_page_why": (
        "time: two homes, real Prometheus, Alertmanager and node_exporters (~35 s per version); what holds a "
        "page open is the alert rules' own, and the textfile they read is pinned per version as above"
    ),
    "test_triage_lane_e2e::test_triage_clears_a_blocked_lane_and_never_inserts_what_the_cloud_refuses": (
        "time: a real blocked lane (~35 s per version) whose triage --apply v2/v3 refuse with nothing written "
        "(the refusal is pinned per version by test_schema_versions and by the other --apply tests here)"
    ),
    "test_triage_defects::test_drop_refuses_bad_selections_in_one_line": (
        "time: six homes per version for argument errors, five of which are refused before the database is read"
    ),
    "test_canary_watch_restore::test_a_restore_with_mv_under_watch_is_not_undone": (
        "time: two homes and a watcher per run; the restore is SQLite's WAL at work, the same for every schema"
    ),
    "test_canary_watch_restore::test_engram_removes_its_wal_after_each_save_under_watch": (
        "the -wal's removal is SQLite's last close, the same for every schema; on v2/v3 the simulated open "
        "after each save is a write from the long-lived test process, which the watcher rightly reads beside"
    ),
    "test_canary_watch_restore::test_a_save_slowed_by_a_loaded_machine_still_removes_its_wal_under_watch": (
        "time: the wait for a young engram command is the watcher's own, the same for every schema"
    ),
    "test_canary_watch_exec::test_alerts_that_arrive_during_a_hook_run_are_one_next_run": (
        "time: the hook queue and the stop are the watcher's own, the same for every schema"
    ),
    "test_canary_watch_exec::test_a_stop_ends_the_watcher_within_2_s_whatever_is_queued": (
        "time: the hook queue and the stop are the watcher's own, the same for every schema"
    ),
    "test_triage_sync_state::test_drop_keeps_the_failure_record_of_a_failing_worker": (
        "time: four 30 s ticks of v1.20's own worker; on v2/v3 triage writes nothing (refusal pinned elsewhere)"
    ),
    "test_canary_watch_exec::test_a_stop_during_the_first_full_check_ends_it_at_once": (
        "time: the stop is the watcher's own, the same for every schema"
    ),
    "test_engram_db::test_each_command_discovers_once_per_connection": (
        "counts schema discoveries per connection of each command; on v2/v3 drop --apply stops at the "
        "refusal before triage's write connection (the refusal is pinned by test_schema_versions)"
    ),
}
# test module::name -> why its one v1.20.0 run also reads copies of its home opened as v2 and v3
# (schema_under_test.copies_opened_as_v2_v3) instead of building the home three times.
VERSIONS_INSIDE: dict[str, str] = {
    "test_reconcile_engram::test_real_client_to_real_cloud_loses_nothing": (
        "a real cloud on Postgres and a full autosync cycle (~45 s)"
    ),
    "test_reconcile_engram::test_ack_without_store_is_found_exactly": "a full autosync cycle (~35 s)",
    "test_canary_liveness::test_a_degraded_lane_whose_backoff_ran_out_with_no_worker_says_nothing_retries": (
        "two failed cycles of v1.20's own worker and a restart (~90 s)"
    ),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.path.parent != CANARY_TESTS or not ENGRAM_FIXTURES & set(metafunc.fixturenames):
        return
    key = f"{metafunc.module.__name__}::{metafunc.function.__name__}"
    versions = [V120] if key in V120_ONLY or key in VERSIONS_INSIDE else list(PLAYED_VERSIONS)
    metafunc.parametrize("engram_schema", versions, indirect=True)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[None]:
    try:
        return (yield)
    except RefusedAsPredicted as refusal:
        # Shown in --junitxml: which v2/v3 runs ended at the refusal.
        pyfuncitem.user_properties.append(("ended_at_predicted_refusal", str(refusal)))
        return None


class RefusedAsPredicted(Exception):
    """An --apply on a v2/v3 file was refused as predicted; the rest of the test pins v1.20's effects."""


_current = [V120]


def set_current(version: str) -> None:
    _current[0] = version


def current() -> str:
    """The schema the running test reads (v1.20.0 outside tests/canary and for tests not parametrized)."""
    return _current[0]


def _then_open_as(
    version: str, method: Callable[..., Any], db_of: Callable[[Any], Any]
) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        open_as(version, db_of(self))
        return result

    return wrapped


@pytest.fixture(autouse=True)
def engram_schema(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    version = str(getattr(request, "param", V120))
    set_current(version)
    if version != V120:
        monkeypatch.setattr(
            EngramEnvironment, "run", _then_open_as(version, EngramEnvironment.run, lambda env: env.db_path)
        )
        monkeypatch.setattr(
            EngramDaemon,
            "start",
            _then_open_as(version, EngramDaemon.start, lambda daemon: daemon._env.db_path),
        )
        original_init = McpSession.__init__

        def remember_db(self: McpSession, env: EngramEnvironment, *args: Any, **kwargs: Any) -> None:
            self.__dict__["schema_db"] = env.db_path
            original_init(self, env, *args, **kwargs)

        monkeypatch.setattr(McpSession, "__init__", remember_db)
        monkeypatch.setattr(
            McpSession,
            "call_tool",
            _then_open_as(version, McpSession.call_tool, lambda session: session.__dict__["schema_db"]),
        )
    yield version
    set_current(V120)
