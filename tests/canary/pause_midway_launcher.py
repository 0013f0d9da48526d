"""engram-canary with its --apply transaction paused halfway: `python pause_midway_launcher.py MARKER ARGS...`.

The process writes its pid to MARKER inside the transaction and waits (at most 300 s) until MARKER is
removed, so the crash-safety test can SIGKILL it at a known point. Production code has no such hook.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from engram_sync_kit.canary import cli
from engram_sync_kit.canary.triage import plan as triage

PAUSE_LIMIT_SECONDS = 300.0


def main() -> None:
    marker = Path(sys.argv[1])

    def pause() -> None:
        partial = marker.with_name(marker.name + ".partial")
        partial.write_text(str(os.getpid()), encoding="utf-8")
        os.replace(partial, marker)
        deadline = time.monotonic() + PAUSE_LIMIT_SECONDS
        while marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    triage.pause_midway = pause
    sys.argv = ["engram-canary", *sys.argv[2:]]
    cli.main()


if __name__ == "__main__":
    main()
