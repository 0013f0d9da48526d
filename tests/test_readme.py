"""The README starts with the user: what it is, install, the first check, what each finding means, then
the rest in the issue's order; benchmark tables live in bench/README.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
README = (REPOSITORY / "README.md").read_text(encoding="utf-8")
DESIGN_URL = "https://github.com/Gentleman-Programming/engram/issues/1013"

SECTIONS = [
    "Install",
    "First check",
    "What the check tells you",
    "Cron and systemd",
    "Fleets",
    "The harness (for maintainers)",
    "validate (for beta testers)",
    "Development",
    "Links",
]


def test_the_sections_come_in_the_users_order() -> None:
    headings = re.findall(r"^## (.+)$", README, flags=re.MULTILINE)
    assert [heading for heading in headings if heading in SECTIONS] == SECTIONS
    intro = README.split("\n## ", 1)[0].split("\n", 1)[1].strip()
    assert len(intro.splitlines()) == 3


def test_install_comes_before_the_first_command_and_make_comes_last() -> None:
    # The first command works as written in a clone (the kit is on no package index: `pipx install
    # engram-sync-kit` found nothing) and says how to get pipx on a machine without it.
    install = README.split("## Install", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    first = install.splitlines()[0]
    assert first.startswith("pipx install . ") and "apt install pipx" in first
    assert "pipx install engram-sync-kit" not in README and "'engram-sync-kit[harness]'" not in README
    assert README.index("pipx install .") < README.index("engram-canary check")
    # The walk-through's new user had pipx and no `build` module: the wheel is built through pipx too.
    assert "pipx run build --wheel" in README and "python -m build" not in README
    assert README.index("make demo") > README.index("## Development")


TABLE_CELL_LIMIT = 200


def test_no_table_cell_holds_a_procedure() -> None:
    # Before: the foreign_sync_target row's last cell was 670 characters of commands; steps go in a list.
    cells = [
        cell.strip()
        for line in README.splitlines()
        if line.startswith("|")
        for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))
    ]
    assert cells and max(len(cell) for cell in cells) <= TABLE_CELL_LIMIT


def test_make_test_says_what_it_does_to_the_machine() -> None:
    development = README.split("## Development", 1)[1].split("\n## ", 1)[0]
    for said in (
        "apt-get install",
        "docker.io",
        "postgresql",
        "machine-wide `dockerd`",
        "PostgreSQL cluster",
    ):
        assert said in development, said


def test_the_readme_speaks_of_the_product_not_the_build_machines() -> None:
    for phrase in ("../shared", "shared/seed", "module proxy", "these machines", "can be built here"):
        assert phrase not in README
    assert DESIGN_URL in README


def test_at_most_five_headline_figures_and_no_benchmark_table() -> None:
    assert not [line for line in README.splitlines() if line.startswith("|") and re.search(r"\d ms\b", line)]
    development = README.split("## Development", 1)[1].split("\n## ", 1)[0]
    assert 1 <= len(re.findall(r"^- ", development, flags=re.MULTILINE)) <= 5
    assert "| what | measured | goal |" in (REPOSITORY / "bench" / "README.md").read_text(encoding="utf-8")


def test_every_finding_the_canary_reports_is_explained() -> None:
    explained = README.split("## What the check tells you", 1)[1].split("\n## ", 1)[0]
    sources = _canary_sources()
    constants = dict(re.findall(r'^([A-Z_]+) = "([a-z_]+)"$', sources, flags=re.MULTILINE))
    checks = set(re.findall(r'check="([a-z_]+)"', sources))
    checks |= {constants[name] for name in re.findall(r"check=([A-Z_]+)\b", sources) if name in constants}
    assert {"foreign_sync_target", "legacy_lane_blocked", "unattributed_mutations"} <= checks
    assert {check for check in checks if f"`{check}`" not in explained} == set()


def _canary_sources() -> str:
    return "\n".join(
        path.read_text(encoding="utf-8") for path in (REPOSITORY / "engram_sync_kit" / "canary").rglob("*.py")
    )


def first_check_output() -> str:
    """The console block under "First check": what `engram-canary check` printed, as pasted."""
    section = README.split("## First check", 1)[1]
    block = section.split("```console\n", 1)[1].split("```", 1)[0]
    return block.split("$ engram-canary check\n", 1)[1].split("$ echo", 1)[0]


def test_the_cron_line_runs_under_crons_own_environment(tmp_path: Path) -> None:
    # Before: `out=$(engram-canary check)` printed "engram-canary: not found" under cron's PATH.
    section = README.split("## Cron and systemd", 1)[1]
    line = section.split("```cron\n", 1)[1].split("\n", 1)[0]
    command = line.split(None, 5)[5]
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "engram-canary").symlink_to(Path(sys.executable).parent / "engram-canary")
    # what cron gives a job: HOME, LOGNAME, SHELL=/bin/sh and PATH=/usr/bin:/bin, nothing else
    cron_env = ["env", "-i", f"HOME={home}", "LOGNAME=user", "SHELL=/bin/sh", "PATH=/usr/bin:/bin"]
    ran = subprocess.run(
        [*cron_env, "/bin/sh", "-c", command], capture_output=True, text=True, timeout=60, check=False
    )
    # no engram database in this home: the check says UNKNOWN, which the line prints for cron to mail
    assert ran.stderr == ""
    assert ran.stdout.startswith("ENGRAM-CANARY UNKNOWN - "), ran.stdout


def test_the_first_example_says_which_engram_versions_behave_which_way() -> None:
    """v1.20 (and rc.11) mint a target per unenrolled project; from rc.12 (PR #1157) nothing is journaled,
    and the inbox view reads the memories (docs/version-reach.md, "Schema generations")."""
    first = README.split("## First check", 1)[1].split("\n## ", 1)[0]
    for phrase in (
        "v1.20.0",
        "v2.0.0-rc.11",
        "v2.0.0-rc.12",
        "v3",
        "engram-canary inbox list",
        "engram doctor repair --check sync_target_closed_space",
        "docs/version-reach.md",
    ):
        assert phrase in first, phrase
