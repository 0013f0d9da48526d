"""The sections of the design (engram issue #1013) a design expectation can come from.

Every `tag: design` expectation names one (`design_section: §2a`), so a run can say, section by section,
how far an engram version is from the design. The upstream regression scenarios' fixes are not design
sections: they name the upstream issue (`upstream #742`).
"""

from __future__ import annotations

import re

DESIGN_SECTIONS: dict[str, str] = {
    "invariant": "central invariant: the closed target space (cloud:<enrolled>, cloud:inbox, cloud)",
    "§1": "inbox mechanism: cloud:inbox, raw payload kept, telemetry not enqueued, own lifecycle",
    "§2a": "save-time warning: MCP routed_to + warning, CLI stderr line",
    "§2b": "doctor inbox_depth: per-key 7-day tripwire, unsorted growth over 100 rows in 7 days",
    "§2c": "cloud status prints the inbox line",
    "§3": "lifecycle: engram cloud inbox list/claim/drop, enroll prints the waiting count and claim",
    "§4": "two-stage key derivation: designation, slugged git root, alias map, never basename",
    "item 1": "upstream item 1: enqueue routing and the per-project delivery lane",
    "item 2": "upstream item 2: cloud:inbox constant, own lifecycle, enroll inbox rejected",
    "item 3": "upstream item 3: doctor closed-target invariant and inbox_depth",
    "item 4": "upstream item 4: CLI inbox list/claim/drop and the enroll notification",
    "item 5": "upstream item 5: the two-stage derivation pipeline, no basename fallback",
    "item 6": "upstream item 6: relations forwarding contract",
    "item 7": "upstream item 7: identical re-delivery once a lane delivers",
    "out of scope": "out of scope: the allowlist is untouched",
    "risk": "risk / rollback: ack-based, nothing lost",
}
UPSTREAM_SECTION = re.compile(r"^upstream #[0-9]+$")
SECTION_PATTERN = (
    "^(" + "|".join(re.escape(name) for name in DESIGN_SECTIONS) + "|" + UPSTREAM_SECTION.pattern[1:-1] + ")$"
)


def section_problem(value: str) -> str | None:
    """Why VALUE is not a design section, or None when it is one."""
    if value in DESIGN_SECTIONS or UPSTREAM_SECTION.match(value):
        return None
    return f"unknown design section {value!r}; allowed: {', '.join(DESIGN_SECTIONS)}, upstream #N"


def section_order(section: str) -> tuple[int, int, str]:
    """The design's own order; upstream issues after it, by number."""
    names = list(DESIGN_SECTIONS)
    if section in DESIGN_SECTIONS:
        return (0, names.index(section), section)
    digits = re.sub(r"\D", "", section)
    return (1, int(digits) if digits else 0, section)


def section_title(section: str) -> str:
    if section in DESIGN_SECTIONS:
        return DESIGN_SECTIONS[section]
    return f"fix of engram issue {section.removeprefix('upstream ')}"
