"""The fleet walk-through of docs/canary.md, "Walk-through", with the shipped rules and Alertmanager file
unchanged (every `for:`, group_wait 30s, group_interval 5m; only the receiver is this webhook, and
Prometheus scrapes and evaluates every 5 s). Machines made by the real engram v1.20.0, the check every
15 s on each as a timer would, and the seconds from each event to each notification printed as JSON.
It takes about 30 minutes (EngramCanaryUnknown's 20); run it by hand, it is not a test:

    ENGRAM_BIN_V1=... .venv/bin/python tests/canary/fleet_walkthrough.py /tmp/walk
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fleet_support import Fleet, Webhook
from inbox_support import canary, engram_ok, save

from engram_sync_kit.harness.engram.env import EngramEnvironment

LANE, FOREIGN, LOCKED = "ana", "bo", "cy"


class Shipped(Fleet):
    FOR = None
    GROUP_WAIT = None
    GROUP_INTERVAL = None
    SCRAPE_INTERVAL = "5s"


def main(root: Path, engram_bin: Path) -> None:
    started = time.time()
    made = {
        name: EngramEnvironment(binary=engram_bin, root=root / name).prepare()
        for name in (LANE, FOREIGN, LOCKED)
    }
    lane = made[LANE]
    engram_ok(lane, "cloud", "enroll", "main-proj")
    engram_ok(lane, "save", "loose", "no --project", cwd=lane.home)
    save(lane, "main-proj", "held one", cwd=lane.home)
    for index in range(1, 10):
        save(made[FOREIGN], f"p{index:02}", "a note", cwd=made[FOREIGN].home)
    engram_ok(made[LOCKED], "cloud", "enroll", "main-proj")
    save(made[LOCKED], "side", "a note of a project never enrolled", cwd=made[LOCKED].home)

    webhook = Webhook()
    fleet = Shipped(root, list(made), webhook)
    events: dict[str, float] = {}
    stop = threading.Event()

    def timer() -> None:  # the check every 15 s on each machine
        while not stop.is_set():
            for name, world in made.items():
                canary(world, "check", "--textfile-dir", str(fleet.textfiles[name]))
            stop.wait(15)

    def wait_for(status: str, alertname: str, instance: str, after: float, timeout: float) -> float | None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for n in webhook.received():
                if n.received >= after and (n.status, n.group.get("alertname"), n.group.get("instance")) == (
                    status,
                    alertname,
                    instance,
                ):
                    return n.received
            time.sleep(0.5)
        return None

    try:
        while len(fleet.query("up == 1")) < 3:
            time.sleep(0.5)
        events["first check"] = time.time()
        checker = threading.Thread(target=timer, daemon=True)
        checker.start()
        for name, alertname in ((LANE, "EngramCanaryLaneBlocked"), (FOREIGN, "EngramCanaryNewForeignTarget")):
            events[f"{alertname} firing ({name})"] = wait_for("firing", alertname, name, 0, 180) or -1
        wait_for("firing", "EngramCanaryNewForeignTarget", LOCKED, 0, 60)

        # Three things at once: ana's node_exporter dies, bo's tenth project makes all ten critical, cy's
        # database is moved away (its check turns UNKNOWN).
        events["quiet"] = time.time()
        fleet.kill_exporter(LANE)
        save(made[FOREIGN], "p10", "the tenth", cwd=made[FOREIGN].home)
        database = made[LOCKED].db_path
        aside = {
            path: path.with_name(path.name + ".aside") for path in database.parent.glob(database.name + "*")
        }
        for path, moved in aside.items():
            path.rename(moved)
        silent = wait_for("firing", "EngramCanarySilent", LANE, events["quiet"], 600)
        events["EngramCanarySilent firing"] = silent or -1
        events["node_exporter restarted"] = time.time()
        fleet.start_exporter(LANE)
        events["EngramCanarySilent resolved"] = (
            wait_for("resolved", "EngramCanarySilent", LANE, events["node_exporter restarted"], 600) or -1
        )
        unknown = wait_for("firing", "EngramCanaryUnknown", LOCKED, events["quiet"], 1800)
        events["EngramCanaryUnknown firing"] = unknown or -1
        for path, moved in aside.items():
            moved.rename(path)
        events["database back"] = time.time()
        events["EngramCanaryUnknown resolved"] = (
            wait_for("resolved", "EngramCanaryUnknown", LOCKED, events["database back"], 600) or -1
        )
        time.sleep(60)
    finally:
        stop.set()
        fleet.close()
        webhook.close()
    report: dict[str, Any] = {
        "seconds": {name: round(moment - started, 1) for name, moment in events.items()},
        "notifications": [
            {
                "at": round(n.received - started, 1),
                "status": n.status,
                "group": n.group,
                "alerts": [
                    {
                        "labels": {
                            k: v for k, v in a["labels"].items() if k in ("check", "target_key", "lane")
                        },
                        "status": a["status"],
                        "annotations": a["annotations"],
                    }
                    for a in n.alerts
                ],
            }
            for n in webhook.received()
        ],
    }
    (root / "walkthrough.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report["seconds"], indent=1))
    print(json.dumps([(n["at"], n["status"], n["group"], len(n["alerts"])) for n in report["notifications"]]))


if __name__ == "__main__":
    import os

    main(Path(sys.argv[1]), Path(os.environ["ENGRAM_BIN_V1"]))
