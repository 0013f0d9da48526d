"""The design's two-stage key derivation (seed §4), as pure functions.

Stage A picks a candidate key: the session designation (one early return, no enrollment guard), else the
slug of the git repository name of the row's directory, else nothing, never the directory's basename.
Stage B decides: the alias map (by cwd, then by key), else an enrolled project equal to the candidate,
else the inbox under the candidate, or `unsorted` when there is none.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import PurePosixPath

from engram_sync_kit.canary.targets import normalize_project
from engram_sync_kit.engram_contract import enrolled_name

UNSORTED = "unsorted"
_SEPARATORS = re.compile(r"[\s_]+")
_HYPHENS = re.compile(r"-{2,}")


class CandidateSource(Enum):
    DESIGNATION = "designation"
    GIT_REPO = "git_repo"  # engram's git_root: the cwd is (inside) a repository on this machine
    GIT_REMOTE = "git_remote"  # engram named the project after the repository's origin remote
    GIT_CHILD = "git_child"  # engram promoted the cwd's only child repository
    RECORDED = "recorded"  # the cwd is gone: the repository name engram recorded when it saved
    KEY_MAP = "key_map"  # decided on the database's own machine (inbox export-keys)
    NONE = "none"


# engram's detection sources (internal/project/detect.go, v1.20.0): which of them are a designation.
DETECTED_SOURCES = {
    "git_root": CandidateSource.GIT_REPO,
    "git_remote": CandidateSource.GIT_REMOTE,
    "git_child": CandidateSource.GIT_CHILD,
}
NO_CANDIDATE_SOURCES = frozenset({"dir_basename", "ambiguous", "all_projects"})


class Resolution(Enum):
    ALIAS_CWD = "alias_cwd"
    ALIAS_KEY = "alias_key"
    ENROLLED = "enrolled"
    INBOX = "inbox"


@dataclass(frozen=True)
class RowContext:
    """What the pipeline may know about one mutation row."""

    designation: str | None = None
    cwd: str | None = None
    repo_name: str | None = None
    detected: str | None = None  # a repository name engram detected (remote, child, or recorded)
    detected_source: CandidateSource = CandidateSource.NONE
    cwd_missing: bool = False


@dataclass(frozen=True)
class AliasMap:
    keys: Mapping[str, str] = field(default_factory=dict)
    cwds: Mapping[str, str] = field(default_factory=dict)
    # Stage A decided on the database's own machine (`inbox export-keys`), by (cwd, session project):
    # a copied database gets the same keys although its cwds do not exist here.
    recorded: Mapping[tuple[str, str], tuple[str | None, str]] = field(default_factory=dict)

    def recorded_key(self, cwd: str | None, project: str) -> tuple[str | None, str] | None:
        if not self.recorded:
            return None
        return self.recorded.get((normalize_cwd(cwd or ""), normalize_project(project)))

    def project_for_key(self, key: str) -> str | None:
        wanted = normalize_project(key)
        for alias, project in self.keys.items():
            if normalize_project(alias) == wanted:
                return project
        return None

    def project_for_cwd(self, cwd: str) -> str | None:
        return self.cwds.get(normalize_cwd(cwd))


@dataclass(frozen=True)
class Derivation:
    candidate: str | None
    source: CandidateSource
    inbox_key: str
    resolution: Resolution
    project: str | None

    @property
    def is_resolved(self) -> bool:
        return self.project is not None


def slug(name: str) -> str:
    """Lowercase; runs of spaces and underscores become one hyphen: LM_Studio_Model -> lm-studio-model."""
    hyphenated = _SEPARATORS.sub("-", name.strip().lower())
    return _HYPHENS.sub("-", hyphenated)


@lru_cache(maxsize=65536)
def normalize_cwd(cwd: str) -> str:
    """One spelling per directory: no trailing slash, no '.' or '..' segments ('/' stays '/')."""
    text = cwd.strip()
    if not text:
        return ""
    parts: list[str] = []
    for part in PurePosixPath(text).parts[1:] if text.startswith("/") else PurePosixPath(text).parts:
        if part == "..":
            if parts:
                parts.pop()
        elif part != ".":
            parts.append(part)
    joined = "/".join(parts)
    return "/" + joined if text.startswith("/") else joined


@lru_cache(maxsize=65536)
def cwd_derived_names(directory: str) -> frozenset[str]:
    """Every project name engram's cwd detection could have produced for `directory`.

    Detection names a project after the git root (an ancestor or the directory itself) or, failing
    that, the directory's basename; engram spells the basename of '/' as '/'.
    """
    path = PurePosixPath(normalize_cwd(directory) or "/")
    names = {normalize_project(part.name or "/") for part in (path, *path.parents)}
    return frozenset(name for name in names if name)


def session_designation(
    session_id: str | None, session_project: str | None, directory: str | None
) -> str | None:
    """The project a session was explicitly designated for, if any.

    engram v1.20 records no project source, so a designation is recognised by what it is not:
    sessions.project is a designation when cwd detection could not have produced it from the
    session's own directory, i.e. it is neither that directory's basename (the fallback) nor an
    ancestor's (a git root). ENGRAM_PROJECT / `engram mcp --project`, `engram save --project` and
    POST /sessions all designate that way. The session id says nothing: MCP's auto-detected saves
    also use `manual-save-<project>`. A session without a directory keeps its project.
    `session_id` is accepted for the record and for callers; it does not change the answer.
    """
    del session_id
    project = normalize_project(session_project or "")
    if not project:
        return None
    if not directory or not directory.strip():
        return project
    if project in cwd_derived_names(directory):
        return None
    return project


def stage_a(context: RowContext) -> tuple[str | None, CandidateSource]:
    if context.designation:
        return normalize_project(context.designation), CandidateSource.DESIGNATION
    if context.detected:
        detected_slug = slug(context.detected)
        if detected_slug:
            return detected_slug, context.detected_source
    if context.repo_name:
        repo_slug = slug(context.repo_name)
        if repo_slug:
            return repo_slug, CandidateSource.GIT_REPO
    return None, CandidateSource.NONE


def derive(context: RowContext, aliases: AliasMap, enrolled: Collection[str]) -> Derivation:
    candidate, source = stage_a(context)
    inbox_key = candidate if candidate else UNSORTED
    if context.cwd:
        project = aliases.project_for_cwd(context.cwd)
        if project is not None:
            return Derivation(candidate, source, inbox_key, Resolution.ALIAS_CWD, project)
    if candidate is not None:
        project = aliases.project_for_key(candidate)
        if project is not None:
            return Derivation(candidate, source, inbox_key, Resolution.ALIAS_KEY, project)
        match = enrolled_name(candidate, enrolled)
        if match is not None:
            return Derivation(candidate, source, inbox_key, Resolution.ENROLLED, match)
    return Derivation(candidate, source, inbox_key, Resolution.INBOX, None)
