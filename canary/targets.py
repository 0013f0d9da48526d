"""The closed target space of the design, and engram's own project-name normalization."""

from __future__ import annotations

from collections.abc import Iterable

from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.engram_contract import (
    normalize_project as normalize_project,  # canary modules import it from here
)

INBOX_TARGET = "cloud:inbox"
LOCAL_TARGET = "local"
RESERVED_INBOX_PROJECT = "inbox"
BUILTIN_TARGETS = frozenset({LEGACY_TARGET, INBOX_TARGET, LOCAL_TARGET})


def project_target(project: str) -> str:
    normalized = normalize_project(project)
    return f"{LEGACY_TARGET}:{normalized}" if normalized else LEGACY_TARGET


def allowed_targets(enrolled_projects: Iterable[str], extra_keys: Iterable[str] = ()) -> frozenset[str]:
    """{cloud, cloud:inbox, local} ∪ {cloud:<p> for enrolled p} ∪ configured extras."""
    enrolled = {project_target(project) for project in enrolled_projects if normalize_project(project)}
    return BUILTIN_TARGETS | enrolled | frozenset(extra_keys)
