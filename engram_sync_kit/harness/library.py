"""Where the shipped scenario library lives: inside the installed package (the wheel maps the repository's
scenarios/ to harness/scenario_library), else next to the package in a checkout."""

from __future__ import annotations

from pathlib import Path

PACKAGED_NAME = "scenario_library"


def scenario_library() -> Path:
    packaged = Path(__file__).with_name(PACKAGED_NAME)
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "scenarios"
