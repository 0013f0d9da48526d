"""Benchmark the fake cloud: start to ready, reset, push throughput, memory with a full journal.

Run ``python -m bench.fake_cloud``; it writes bench/results/fake_cloud.json and prints a table.
``measure_push_throughput`` works against any server of the contract (the real ``engram cloud serve``
too), so a same-run ratio can be computed by calling it on both.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import select
import socket
import ssl
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx

from bench.worktree import extract
from engram_sync_kit.fake_cloud.process import FakeCloudProcess, command

RESULTS = Path(__file__).parent / "results" / "fake_cloud.json"
TOKEN = "bench-token"
BATCH = 100
_keys = itertools.count()


def _batch(project: str) -> dict[str, Any]:
    entries = []
    for _ in range(BATCH):
        key = f"obs-{next(_keys)}"
        payload = {
            "sync_id": key,
            "session_id": "bench-session",
            "type": "manual",
            "title": "benchmark observation",
            "content": "x" * 200,
            "project": project,
            "scope": "project",
        }
        entries.append(
            {
                "project": project,
                "entity": "observation",
                "entity_key": key,
                "op": "upsert",
                "payload": payload,
            }
        )
    return {"entries": entries}


def measure_push_throughput(
    base_url: str, token: str, seconds: float, *, project: str = "bench", ca_file: str | None = None
) -> float:
    """Entries per second accepted by POST /sync/mutations/push in 100-entry batches on one keep-alive connection."""
    verify: Any = ca_file if ca_file else True
    headers = {"Authorization": f"Bearer {token}"}
    bodies = [json.dumps(_batch(project)).encode() for _ in range(50)]
    accepted = 0
    with httpx.Client(base_url=base_url, headers=headers, verify=verify, trust_env=False, timeout=30) as http:
        http.post("/sync/mutations/push", content=bodies[0]).raise_for_status()  # warm the connection
        started = time.perf_counter()
        for body in itertools.cycle(bodies):
            response = http.post(
                "/sync/mutations/push", content=body, headers={"Content-Type": "application/json"}
            )
            response.raise_for_status()
            accepted += len(response.json()["accepted_seqs"])
            if time.perf_counter() - started >= seconds:
                break
        elapsed = time.perf_counter() - started
    return accepted / elapsed


def server_env() -> dict[str, str]:
    """This environment without ENGRAM_CLOUD_*, so that only the flags configure the server."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_CLOUD_")}


def machine(**extra: Any) -> dict[str, Any]:
    """Where and when a benchmark ran, plus what the caller adds."""
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        **extra,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def print_rows(rows: list[tuple[str, str, str]]) -> None:
    width = max(len(name) for name, _, _ in rows)
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>22}  {note}".rstrip())


def save(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


def _ready(base_url: str) -> bool:
    with urllib.request.urlopen(f"{base_url}/_fake/ready", timeout=5) as response:
        return bool(response.status == 200)


def measure_start_to_ready(runs: int = 15) -> dict[str, float]:
    """Wall time from spawning ``engram-fake-cloud serve --port 0`` to its first line and /_fake/ready."""
    samples = []
    env = server_env()
    for _ in range(runs):
        started = time.perf_counter()
        process = FakeCloudProcess(["--port", "0", "--token", TOKEN], env=env).start()
        try:
            assert _ready(process.base_url)
            samples.append((time.perf_counter() - started) * 1000)
        finally:
            process.stop()
    return _summary(samples)


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 2),
        "min_ms": round(ordered[0], 2),
        "max_ms": round(ordered[-1], 2),
        "runs": len(ordered),
    }


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc status")


def measure_reset(http: httpx.Client, runs: int = 50) -> dict[str, float]:
    """Round-trip time of POST /_fake/reset right after a 1000-entry push (state to clear each time)."""
    samples = []
    body = json.dumps(_batch("bench")).encode()
    for _ in range(runs):
        for _ in range(10):
            http.post("/sync/mutations/push", content=body).raise_for_status()
        started = time.perf_counter()
        http.post("/_fake/reset").raise_for_status()
        samples.append((time.perf_counter() - started) * 1000)
    return _summary(samples)


def _open_idle(host: str, port: int, count: int, context: ssl.SSLContext | None) -> list[socket.socket]:
    """count connections that finished their TLS handshake (if any) and then send nothing.

    A connection the server refused (closed at once) is dropped from the list."""
    opened = []
    for _ in range(count):
        raw = socket.create_connection((host, port), timeout=10)
        try:
            opened.append(raw if context is None else context.wrap_socket(raw, server_hostname=host))
        except (OSError, ssl.SSLError):
            raw.close()
    return opened


def _settled_rss_kib(pid: int, seconds: float = 1.0) -> int:
    time.sleep(seconds)
    return _rss_kib(pid)


def measure_idle_connections(count: int = 2000, rounds: int = 2, tree: Path | None = None) -> dict[str, Any]:
    """RSS of `engram-fake-cloud serve` before, while and after `count` idle connections (plain http and
    TLS), in `rounds` rounds on one server: the cost per connection, how many it held, and whether the
    memory comes back once they close. `tree`: run the server from that source tree instead."""
    out: dict[str, Any] = {"connections": count, "rounds": rounds}
    env = server_env()
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    for transport in ("http", "tls"):
        with tempfile.TemporaryDirectory() as scratch:
            ca = Path(scratch) / "ca.pem"
            tls_args = ["--tls", "--ca-out", str(ca)] if transport == "tls" else []
            with FakeCloudProcess(["--port", "0", "--token", TOKEN, *tls_args], env=env) as process:
                assert process.process is not None
                pid = process.process.pid
                host, port = process.base_url.split("://")[1].rsplit(":", 1)
                context = ssl.create_default_context(cafile=str(ca)) if transport == "tls" else None
                start = _settled_rss_kib(pid)
                samples = []
                for _ in range(rounds):
                    opened = _open_idle(host, int(port), count, context)
                    busy = _settled_rss_kib(pid)
                    still_open = sum(1 for sock in opened if _still_open(sock))
                    for sock in opened:
                        sock.close()
                    after = _settled_rss_kib(pid, 3.0)  # the server trims 1 s after a burst of closes
                    samples.append(
                        {
                            "held_open": still_open,
                            "rss_with_connections_mib": round(busy / 1024, 1),
                            "per_connection_kib": round((busy - start) / max(still_open, 1), 1),
                            "rss_after_close_mib": round(after / 1024, 1),
                        }
                    )
                out[transport] = {
                    "rss_start_mib": round(start / 1024, 1),
                    "rounds": samples,
                    "after_close_vs_start": round(samples[-1]["rss_after_close_mib"] * 1024 / start, 3),
                }
    return out


def _still_open(sock: socket.socket) -> bool:
    """Whether the server still holds this connection (nothing but TLS records waiting to be read)."""
    poller = select.poll()  # select() cannot take descriptors past 1024
    poller.register(sock, select.POLLIN)
    if not poller.poll(0):
        return True
    sock.setblocking(False)
    try:
        sock.recv(1)  # an idle server sends nothing: this is EOF, or the 503 of a refused connection
        return False
    except (BlockingIOError, ssl.SSLWantReadError):  # TLS 1.3's session ticket, no data
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def run(seconds: float = 5.0, journal_limit: int = 100_000) -> dict[str, Any]:
    results: dict[str, Any] = {"start_to_ready": measure_start_to_ready()}
    env = server_env()
    args = ["--port", "0", "--token", TOKEN, "--journal-limit", str(journal_limit)]
    with FakeCloudProcess(args, env=env) as process:
        assert process.process is not None
        pid = process.process.pid
        with httpx.Client(
            base_url=process.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
        ) as http:
            results["reset"] = measure_reset(http)
            http.post("/_fake/reset").raise_for_status()
            idle_rss = _rss_kib(pid)
            results["push_throughput_entries_per_s"] = round(
                measure_push_throughput(process.base_url, TOKEN, seconds), 1
            )
            body = json.dumps(_batch("bench")).encode()
            while http.get("/_fake/journal", params={"since_id": 10**12}).json()["overflow"] == 0:
                for _ in range(100):
                    http.post("/sync/mutations/push", content=body).raise_for_status()
            stored = http.get("/_fake/received", params={"since_seq": 10**12}).json()["count"]
            results["memory"] = {
                "idle_rss_mib": round(idle_rss / 1024, 1),
                "full_journal_rss_mib": round(_rss_kib(pid) / 1024, 1),
                "journal_limit": journal_limit,
                "stored_mutations": stored,
                "note": "RSS with the journal full (overflowing) and every accepted mutation stored",
            }
            started = time.perf_counter()
            http.post("/_fake/reset").raise_for_status()
            results["reset_full_state_ms"] = round((time.perf_counter() - started) * 1000, 2)
    results["environment"] = machine(server_command=" ".join(Path(part).name for part in command()))
    results["goals"] = {"start_to_ready_ms": 150, "reset_ms": 5}
    return results


def print_table(results: dict[str, Any]) -> None:
    start, reset, memory = results["start_to_ready"], results["reset"], results["memory"]
    rows = [
        ("start to ready (median)", f"{start['median_ms']} ms", "< 150 ms"),
        ("start to ready (p95)", f"{start['p95_ms']} ms", ""),
        ("reset round trip (median)", f"{reset['median_ms']} ms", "< 5 ms"),
        ("reset round trip (p95)", f"{reset['p95_ms']} ms", ""),
        ("reset with a full journal", f"{results['reset_full_state_ms']} ms", "< 5 ms"),
        ("push throughput", f"{results['push_throughput_entries_per_s']} entries/s", "100-entry batches"),
        ("RSS idle", f"{memory['idle_rss_mib']} MiB", ""),
        ("RSS, full journal", f"{memory['full_journal_rss_mib']} MiB", f"{memory['journal_limit']} entries"),
    ]
    print_rows(rows)


def main() -> None:
    results = run()
    results["idle_connections"] = idle_connections_side_by_side()
    print_table(results)
    save(results, RESULTS)


IDLE_BEFORE = "a978bde"  # the tree before issue 24's fixes: a 256 KiB TLS read buffer, no cap, no trim


def idle_connections_side_by_side(against: str = IDLE_BEFORE) -> dict[str, Any]:
    """This tree's idle-connection memory, and the same measurement of `against` in the same run."""
    results: dict[str, Any] = {"this_tree": measure_idle_connections()}
    with tempfile.TemporaryDirectory(prefix="fake-cloud-idle-") as scratch:
        extract(against, Path(scratch))
        results["against"] = {"revision": against, **measure_idle_connections(tree=Path(scratch))}
    results["environment"] = machine()
    results["goals"] = {"tls_per_idle_connection_kib": 64, "rss_after_close_vs_start": 1.2}
    return results


def print_idle(results: dict[str, Any]) -> None:
    rows = []
    for side in ("this_tree", "against"):
        for transport in ("http", "tls"):
            measured = results[side][transport]
            last = measured["rounds"][-1]
            rows.append(
                (
                    f"{side} {transport}",
                    f"{last['per_connection_kib']} KiB/conn",
                    f"held {last['held_open']}, RSS {measured['rss_start_mib']} -> "
                    f"{last['rss_with_connections_mib']} -> {last['rss_after_close_mib']} MiB "
                    f"({measured['after_close_vs_start']}x)",
                )
            )
    print_rows(rows)


def main_idle(against: str) -> None:
    """`python -m bench.fake_cloud idle [REVISION]`: only the idle-connection part, saved into the results."""
    idle = idle_connections_side_by_side(against)
    print_idle(idle)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results["idle_connections"] = idle
    save(results, RESULTS)


if __name__ == "__main__":
    if sys.argv[1:2] == ["idle"] and len(sys.argv) <= 3:
        main_idle(sys.argv[2] if len(sys.argv) == 3 else IDLE_BEFORE)
    elif len(sys.argv) > 1:
        raise SystemExit(f"usage: {sys.executable} -m bench.fake_cloud [idle [REVISION]]")
    else:
        main()
