"""The closed target space of the design, and engram's own project-name normalization.

Every canary module names a per-project lane through here (project_target, and named_project for the
way back), never by joining LEGACY_TARGET and ':' itself (tests/canary/test_targets.py)."""

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
PROJECT_TARGET_PREFIX = LEGACY_TARGET + ":"


def project_target(project: str) -> str:
    """The lane `cloud:<project>` engram names for a project (its normalized name); `cloud` for none."""
    normalized = normalize_project(project)
    return PROJECT_TARGET_PREFIX + normalized if normalized else LEGACY_TARGET


def named_project(target_key: str) -> str | None:
    """The project a `cloud:<project>` key names, as written in the key; None for any other key."""
    return target_key[len(PROJECT_TARGET_PREFIX) :] if target_key.startswith(PROJECT_TARGET_PREFIX) else None


def allowed_targets(enrolled_projects: Iterable[str], extra_keys: Iterable[str] = ()) -> frozenset[str]:
    """{cloud, cloud:inbox, local} ∪ {cloud:<p> for enrolled p} ∪ configured extras."""
    enrolled = {project_target(project) for project in enrolled_projects if normalize_project(project)}
    return BUILTIN_TARGETS | enrolled | frozenset(extra_keys)
