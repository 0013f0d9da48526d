"""`engram-canary watch` as a subprocess, against databases the real engram v1.20 binary writes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import pytest
from canary_support import CANARY, WatchProcess, canary_env, rows_digest, run_canary, write_settings
from engram_schemas.open_as import open_as
from engram_schemas.per_version import current

from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.polling import eventually, free_port

pytestmark = pytest.mark.engram


RECOVERY_BUSY = "database is locked (261)"


def save(world: EngramEnvironment, cwd: Path, project: str) -> None:
    """One `engram save`. These tests judge the alerts, so a save that met the watcher's own open at the
    instant engram set WAL mode (SQLITE_BUSY_RECOVERY, 261: docs/canary.md, watch, known limits) is
    tried once more; any other failure fails the test."""
    args = ["save", f"note for {project}", "content", "--project", project]
    result = world.run(args, cwd=cwd)
    if result.returncode != 0 and RECOVERY_BUSY in result.stderr:
        result = world.run(args, cwd=cwd)
    assert result.returncode == 0, result.stderr


def new_alerts(watcher: WatchProcess, key: str) -> list[str]:
    return watcher.matching(lambda line: "NEW foreign sync target" in line and f" {key} " in line)


def gone_alerts(watcher: WatchProcess, key: str) -> list[str]:
    return watcher.matching(lambda line: "GONE foreign sync target" in line and f" {key} " in line)


def says(text: str) -> Callable[[str], bool]:
    """A wait_for predicate bound to `text` now (a lambda in a loop would see the loop's last value)."""
    return lambda line: text in line


@pytest.fixture
def watcher_factory(tmp_path: Path) -> Iterator[list[WatchProcess]]:
    started: list[WatchProcess] = []
    yield started
    for watcher in started:
        watcher.kill()


@pytest.mark.parametrize("mode", ["inotify", "poll"])
def test_each_foreign_target_is_reported_once_on_appear_and_once_on_disappear(
    engram_world: EngramEnvironment, tmp_path: Path, watcher_factory: list[WatchProcess], mode: str
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    save(engram_world, scratch, "seed")
    engram_world.run(["cloud", "enroll", "seed"])
    settings = "watch:\n  full_recheck_seconds: 600\n"
    if mode == "poll":
        settings += "  poll: true\n  poll_interval_seconds: 0.05\n"
    write_settings(tmp_path / "xdg", settings)
    watcher = WatchProcess(["--db", str(engram_world.db_path)], tmp_path / "xdg")
    watcher_factory.append(watcher)
    watcher.wait_started()

    save(engram_world, scratch, "scratch")
    line = watcher.wait_for(lambda text: "NEW foreign sync target cloud:scratch " in text, what="the alert")
    assert line.startswith("engram-canary WARNING: NEW foreign sync target cloud:scratch in sync_state (")
    assert f"db={engram_world.db_path}" in line

    save(engram_world, scratch, "scratch")  # more writes on the same target: no second alert
    save(engram_world, scratch, "other")
    watcher.wait_for(lambda text: "NEW foreign sync target cloud:other " in text, what="the second alert")
    engram_world.run(["cloud", "enroll", "scratch"])
    watcher.wait_for(lambda text: "GONE foreign sync target cloud:scratch " in text, what="the gone line")

    assert watcher.stop() == 0
    assert len(new_alerts(watcher, "cloud:scratch")) == 1
    assert len(gone_alerts(watcher, "cloud:scratch")) == 1
    assert len(new_alerts(watcher, "cloud:other")) == 1
    assert gone_alerts(watcher, "cloud:other") == []
    assert watcher.snapshot()[-1].startswith("engram-canary: stopped (")


def test_watch_never_triggers_itself_and_never_writes(
    engram_world: EngramEnvironment, tmp_path: Path, watcher_factory: list[WatchProcess]
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    save(engram_world, scratch, "scratch")
    before = rows_digest(engram_world.db_path)
    write_settings(tmp_path / "xdg", "watch:\n  full_recheck_seconds: 0.2\n")
    watcher = WatchProcess(["--db", str(engram_world.db_path), "--verbose"], tmp_path / "xdg")
    watcher_factory.append(watcher)
    watcher.wait_started()

    for _ in range(3):  # other readers open and close the files the watcher watches
        assert run_canary(["check", "--db", str(engram_world.db_path)], tmp_path / "xdg").returncode == 1
    # Two more full checks: every file event of those readers has been handled by then.
    full_checks = len(watcher.matching(lambda text: text.startswith("engram-canary: full check ")))
    watcher.wait_for(
        lambda text: text == f"engram-canary: full check {full_checks + 2}", what="two more full checks"
    )

    assert watcher.stop() == 0
    lines = watcher.snapshot()
    assert len(new_alerts(watcher, "cloud:scratch")) == 1  # the one foreign target present at start
    assert watcher.matching(lambda text: "commit seen" in text) == []
    stopped = lines[-1]
    assert " 0 commits seen, " in stopped, stopped
    # A reader that opens the file first (a `check`, the watcher's own full check) rebuilds the wal-index in
    # -shm: at most one look after each, never a loop (which would be hundreds of looks a second).
    counts = re.search(r" (\d+) incremental and (\d+) full checks", stopped)
    assert counts is not None, stopped
    assert int(counts.group(1)) <= 3 + int(counts.group(2)), stopped
    assert stopped.endswith(" 1 alerts)")
    assert rows_digest(engram_world.db_path) == before


class _PingRecorder(BaseHTTPRequestHandler):
    paths: list[tuple[str, str]]

    def do_POST(self) -> None:  # http.server names it
        length = int(self.headers.get("Content-Length", "0"))
        self.server.paths.append((self.path, self.rfile.read(length).decode()))  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def test_exec_and_ping_url(
    engram_world: EngramEnvironment, tmp_path: Path, watcher_factory: list[WatchProcess]
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    server = HTTPServer(("127.0.0.1", 0), _PingRecorder)
    pings: list[tuple[str, str]] = []
    server.paths = pings  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/ping/abc"
    exec_log = tmp_path / "exec.jsonl"
    save(engram_world, scratch, "seed")
    engram_world.run(["cloud", "enroll", "seed"])
    command = (
        f'printf \'{{"event":"%s","key":"%s","status":"%s","stdin":"%s"}}\\n\' '
        f'"$ENGRAM_CANARY_EVENT" "$ENGRAM_CANARY_TARGET_KEY" "$ENGRAM_CANARY_STATUS" "$(cat)" >> {exec_log}'
    )
    write_settings(tmp_path / "xdg", "watch:\n  full_recheck_seconds: 600\n")
    watcher = WatchProcess(
        ["--db", str(engram_world.db_path), "--exec", command, "--ping-url", url], tmp_path / "xdg"
    )
    watcher_factory.append(watcher)
    try:
        watcher.wait_started()
        eventually(lambda: pings or None, timeout=10, what="the startup ping", error=AssertionError)
        save(engram_world, scratch, "scratch")
        alert = watcher.wait_for(lambda text: "NEW foreign sync target cloud:scratch " in text, what="alert")
        records = eventually(
            lambda: (exec_log.read_text().splitlines() or None) if exec_log.exists() else None,
            timeout=10,
            what="exec",
            error=AssertionError,
        )
        eventually(lambda: len(pings) >= 2 or None, timeout=10, what="the status ping", error=AssertionError)
        assert watcher.stop() == 0
    finally:
        server.shutdown()
    assert [json.loads(record) for record in records] == [
        {"event": "appeared", "key": "cloud:scratch", "status": "warning", "stdin": alert}
    ]
    paths = [path for path, _ in pings]
    assert paths[:2] == ["/ping/abc/0", "/ping/abc/1"]


def test_engram_serve_keeps_writing_while_watched(
    engram_world: EngramEnvironment, tmp_path: Path, watcher_factory: list[WatchProcess]
) -> None:
    port = free_port()
    serve = subprocess.Popen(
        [str(engram_world.binary), "serve"],
        env=engram_world.env({"ENGRAM_PORT": str(port)}),
        cwd=engram_world.home,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool | None:
            try:
                return httpx.get(f"{base}/health", timeout=1).status_code == 200 or None
            except httpx.HTTPError:
                return None

        eventually(healthy, timeout=30, what="engram serve", error=AssertionError)
        # On a v2/v3 run: the file as that version's open leaves it, while v1.20's serve keeps writing.
        open_as(current(), engram_world.db_path)
        write_settings(tmp_path / "xdg", "watch:\n  full_recheck_seconds: 0.3\n")
        watcher = WatchProcess(["--db", str(engram_world.db_path)], tmp_path / "xdg")
        watcher_factory.append(watcher)
        watcher.wait_started()
        statuses: list[int] = []
        with httpx.Client(base_url=base, timeout=10) as client:
            for number in range(40):
                session = f"s-{number}"
                project = f"svc{number % 4}"
                statuses.append(
                    client.post(
                        "/sessions", json={"id": session, "project": project, "directory": str(tmp_path)}
                    ).status_code
                )
                statuses.append(
                    client.post(
                        "/observations",
                        json={"session_id": session, "type": "note", "title": f"t{number}", "content": "c"},
                    ).status_code
                )
        for project in ("svc0", "svc1", "svc2", "svc3"):
            watcher.wait_for(says(f"NEW foreign sync target cloud:{project} "), what=project)
        assert watcher.stop() == 0
    finally:
        serve.terminate()
        _, serve_stderr = serve.communicate(timeout=15)
    assert all(200 <= status < 300 for status in statuses), statuses
    assert "database is locked" not in serve_stderr
    assert "SQLITE_BUSY" not in serve_stderr
    for project in ("svc0", "svc1", "svc2", "svc3"):
        assert len(new_alerts(watcher, f"cloud:{project}")) == 1
    assert watcher.matching(lambda text: "UNKNOWN" in text or "Traceback" in text) == []


def test_baseline_known_targets_do_not_alert(
    engram_world: EngramEnvironment, tmp_path: Path, watcher_factory: list[WatchProcess]
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    save(engram_world, scratch, "known")
    assert run_canary(["baseline", "--db", str(engram_world.db_path)], tmp_path / "xdg").returncode == 0
    watcher = WatchProcess(["--db", str(engram_world.db_path)], tmp_path / "xdg")
    watcher_factory.append(watcher)
    started = watcher.wait_for(lambda text: text.startswith("engram-canary: watching"), what="start")
    assert started.endswith("; 0 foreign targets open, 1 known in baseline")

    save(engram_world, scratch, "known")
    save(engram_world, scratch, "fresh")
    watcher.wait_for(lambda text: "NEW foreign sync target cloud:fresh " in text, what="the new target")

    assert watcher.stop() == 0
    assert watcher.matching(lambda text: "cloud:known" in text) == []


def test_watch_on_a_missing_database_is_unknown(tmp_path: Path) -> None:
    missing = tmp_path / "engram.db"

    result = subprocess.run(
        [str(CANARY), "watch", "--db", str(missing)],
        env=canary_env(tmp_path / "xdg"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 3
    assert result.stderr == (
        f"engram-canary: error: {missing}: no such file (pass --db or set ENGRAM_DATA_DIR)\n"
    )


def test_journal_priorities_when_stderr_is_the_journal(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    save(engram_world, scratch, "scratch")
    read_end, write_end = os.pipe()
    status = os.fstat(write_end)
    process = subprocess.Popen(
        [str(CANARY), "watch", "--db", str(engram_world.db_path)],
        env=canary_env(tmp_path / "xdg", JOURNAL_STREAM=f"{status.st_dev}:{status.st_ino}"),
        stderr=write_end,
        stdout=subprocess.DEVNULL,
    )
    os.close(write_end)
    try:
        with os.fdopen(read_end, encoding="utf-8") as journal:
            first = journal.readline()
            second = journal.readline()
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=15) == 0
            rest = journal.read()
    finally:
        process.kill()
        process.wait(timeout=15)

    assert first.startswith("<4>engram-canary WARNING: NEW foreign sync target cloud:scratch ")
    assert second.startswith("<6>engram-canary: watching ")
    assert rest.startswith("<6>engram-canary: stopped (")


def test_watch_on_a_database_in_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no such dir" / "engram.db"

    result = subprocess.run(
        [str(CANARY), "watch", "--db", str(missing)],
        env=canary_env(tmp_path / "xdg"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert (result.returncode, result.stderr) == (
        3,
        f"engram-canary: error: {missing}: no such file (pass --db or set ENGRAM_DATA_DIR)\n",
    )
