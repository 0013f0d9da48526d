"""The design's two-stage derivation (seed §4) gives the design's answers for the seed's cases."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram_sync_kit.canary.derive import (
    UNSORTED,
    AliasMap,
    CandidateSource,
    Resolution,
    RowContext,
    derive,
    normalize_cwd,
    session_designation,
    slug,
)

ENROLLED = frozenset({"agent-memory", "new-name", "scratch-project", "lm-tools"})
ALIASES = AliasMap(
    keys={"old-name": "new-name"},
    cwds={"/home/ana/scratch": "scratch-project"},
)
UUID_DIR = "/home/ana/apps/3f2b9c1e-8d4a-4b7e-9f10-2a6c5d8e7b41"


@dataclass(frozen=True)
class Case:
    name: str
    session_id: str | None
    session_project: str | None
    directory: str | None
    repo_name: str | None
    key: str
    resolution: Resolution
    project: str | None
    source: CandidateSource


CASES = [
    # 348 sessions of a non-repo agent workspace, designated as an enrolled project.
    Case(
        "designated-workspace",
        "sess-0001",
        "agent-memory",
        "/home/ana/agent-ws",
        None,
        "agent-memory",
        Resolution.ENROLLED,
        "agent-memory",
        CandidateSource.DESIGNATION,
    ),
    # A designation is kept with no enrollment guard: filed in the inbox under the designated name.
    Case(
        "designated-unenrolled",
        "sess-0002",
        "Future_Project",
        "/home/ana/agent-ws",
        None,
        "future_project",
        Resolution.INBOX,
        None,
        CandidateSource.DESIGNATION,
    ),
    # A session named after its own non-repo directory is the basename fallback, whatever its id:
    # engram's MCP auto-detection also uses manual-save-<project>.
    Case(
        "manual-save-basename",
        "manual-save-agent-ws",
        "agent-ws",
        "/home/ana/agent-ws",
        None,
        UNSORTED,
        Resolution.INBOX,
        None,
        CandidateSource.NONE,
    ),
    # `engram save --project P` from a directory with another name designates P.
    Case(
        "manual-save-designation",
        "manual-save-side-project",
        "side-project",
        "/home/ana/agent-ws",
        None,
        "side-project",
        Resolution.INBOX,
        None,
        CandidateSource.DESIGNATION,
    ),
    # A renamed folder: the repo still carries the old name, the alias map sends it to the new project.
    Case(
        "renamed-folder",
        "sess-0003",
        "old_name",
        "/home/ana/code/Old_Name",
        "Old_Name",
        "old-name",
        Resolution.ALIAS_KEY,
        "new-name",
        CandidateSource.GIT_REPO,
    ),
    # One non-repo working dir, two keys over time (basename fallback in July, another key in August):
    # the cwd alias fixes both.
    Case(
        "non-repo-dir-july",
        "sess-0004",
        "scratch",
        "/home/ana/scratch",
        None,
        UNSORTED,
        Resolution.ALIAS_CWD,
        "scratch-project",
        CandidateSource.NONE,
    ),
    Case(
        "non-repo-dir-august",
        "sess-0005",
        "prueba",
        "/home/ana/scratch",
        None,
        "prueba",
        Resolution.ALIAS_CWD,
        "scratch-project",
        CandidateSource.DESIGNATION,
    ),
    # The home dir (538 sessions under its basename) and / are noise: unsorted, never their basename.
    Case(
        "home-dir",
        "sess-0006",
        "ana",
        "/home/ana",
        None,
        UNSORTED,
        Resolution.INBOX,
        None,
        CandidateSource.NONE,
    ),
    Case("root-dir", "sess-0007", "/", "/", None, UNSORTED, Resolution.INBOX, None, CandidateSource.NONE),
    Case(
        "uuid-dir",
        "sess-0008",
        UUID_DIR.rsplit("/", 1)[1],
        UUID_DIR,
        None,
        UNSORTED,
        Resolution.INBOX,
        None,
        CandidateSource.NONE,
    ),
    # A git repo keeps its identity, slugged; engram itself had recorded lm_studio_model.
    Case(
        "git-repo-slug",
        "sess-0009",
        "lm_studio_model",
        "/home/ana/models/LM_Studio_Model",
        "LM_Studio_Model",
        "lm-studio-model",
        Resolution.INBOX,
        None,
        CandidateSource.GIT_REPO,
    ),
    # A subdirectory of a repo: the git root's name, not the subdirectory's basename.
    Case(
        "repo-subdir",
        "sess-0010",
        "lm-tools",
        "/home/ana/src/lm-tools/cmd/run",
        "LM Tools",
        "lm-tools",
        Resolution.ENROLLED,
        "lm-tools",
        CandidateSource.GIT_REPO,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_seed_cases(case: Case) -> None:
    context = RowContext(
        designation=session_designation(case.session_id, case.session_project, case.directory),
        cwd=normalize_cwd(case.directory) if case.directory else None,
        repo_name=case.repo_name,
    )
    result = derive(context, ALIASES, ENROLLED)
    assert (result.inbox_key, result.resolution, result.project, result.source) == (
        case.key,
        case.resolution,
        case.project,
        case.source,
    )


def test_designated_sessions_all_land_on_the_designated_project() -> None:
    results = {
        derive(
            RowContext(
                designation=session_designation(f"s-{n}", "agent-memory", "/home/ana/agent-ws"),
                cwd="/home/ana/agent-ws",
            ),
            AliasMap(),
            ENROLLED,
        ).project
        for n in range(348)
    }
    assert results == {"agent-memory"}


def test_without_the_cwd_alias_the_non_repo_dir_splits_in_two() -> None:
    july = derive(
        RowContext(session_designation("s1", "scratch", "/home/ana/scratch"), "/home/ana/scratch"),
        AliasMap(),
        ENROLLED,
    )
    august = derive(
        RowContext(session_designation("s2", "prueba", "/home/ana/scratch"), "/home/ana/scratch"),
        AliasMap(),
        ENROLLED,
    )
    assert (july.inbox_key, august.inbox_key) == (UNSORTED, "prueba")


def test_cwd_alias_wins_over_key_alias() -> None:
    aliases = AliasMap(keys={"repo": "new-name"}, cwds={"/w/repo": "agent-memory"})
    result = derive(RowContext(cwd="/w/repo", repo_name="repo"), aliases, ENROLLED)
    assert (result.resolution, result.project) == (Resolution.ALIAS_CWD, "agent-memory")


def test_a_blank_detected_name_falls_back_to_the_repository() -> None:
    context = RowContext(
        cwd="/w/repo", repo_name="Repo", detected="   ", detected_source=CandidateSource.GIT_REMOTE
    )
    result = derive(context, AliasMap(), ENROLLED)
    assert (result.candidate, result.source, result.inbox_key) == ("repo", CandidateSource.GIT_REPO, "repo")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("LM_Studio_Model", "lm-studio-model"),
        ("My Repo", "my-repo"),
        ("a _ b", "a-b"),
        ("already-slug", "already-slug"),
        ("  Spaced Repo\t", "spaced-repo"),  # surrounding blanks are trimmed, not hyphens
    ],
)
def test_slug(name: str, expected: str) -> None:
    assert slug(name) == expected


@pytest.mark.parametrize(
    ("raw", "expected"), [("/a/b/", "/a/b"), ("/a/./b/../c", "/a/c"), ("/", "/"), ("//x", "/x")]
)
def test_normalize_cwd(raw: str, expected: str) -> None:
    assert normalize_cwd(raw) == expected


names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=30)
segments = st.text(
    st.characters(categories=["Ll", "Lu", "Nd"], include_characters="_- ."),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in {".", ".."})


@given(names)
def test_slug_is_idempotent(name: str) -> None:
    once = slug(name)
    assert slug(once) == once
    assert "_" not in once and " " not in once


@given(st.lists(segments, min_size=1, max_size=5), st.text(min_size=1, max_size=10))
def test_a_non_repo_dir_never_yields_its_basename(parts: list[str], session_id: str) -> None:
    directory = "/" + "/".join(parts)
    basename = parts[-1]
    designation = session_designation(session_id, basename, directory)
    result = derive(
        RowContext(designation=designation, cwd=directory, repo_name=None), AliasMap(), frozenset()
    )
    assert designation is None
    assert result.candidate is None
    assert result.inbox_key == UNSORTED


@given(st.lists(segments, min_size=1, max_size=5), names)
def test_a_designation_always_ends_stage_a(parts: list[str], repo: str) -> None:
    directory = "/" + "/".join(parts)
    result = derive(RowContext(designation="chosen", cwd=directory, repo_name=repo), AliasMap(), frozenset())
    assert (result.candidate, result.source, result.inbox_key) == (
        "chosen",
        CandidateSource.DESIGNATION,
        "chosen",
    )
