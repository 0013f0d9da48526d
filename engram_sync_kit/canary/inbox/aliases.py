"""The user-edited alias map of the design's Stage B, as YAML.

Default location: $XDG_CONFIG_HOME/engram-canary/aliases.yaml (else ~/.config/engram-canary/aliases.yaml),
overridden by --aliases. Two sections, both optional:

    keys:            # candidate key -> enrolled project (renamed folders, old names)
      old-name: new-project
    cwds:            # working directory -> enrolled project (non-repo dirs)
      /home/me/workspace: my-project

A missing default file is an empty map. Errors are one line with file:line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from engram_sync_kit.canary.derive import AliasMap, normalize_cwd
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.targets import RESERVED_INBOX_PROJECT, normalize_project
from engram_sync_kit.engram_contract.files import atomic_write, xdg_config_home

if TYPE_CHECKING:
    import yaml

ALIASES_FILE_NAME = "aliases.yaml"
SECTIONS = ("keys", "cwds")


class AliasError(CanaryError):
    """The alias file cannot be read, does not validate, or cannot take a new entry."""


def default_aliases_path() -> Path:
    """Next to the canary's config.yaml (canary.config uses the same directory)."""
    return xdg_config_home() / "engram-canary" / ALIASES_FILE_NAME


def load_aliases(path: Path | None) -> tuple[AliasMap, Path]:
    """The map at `path` (must exist), else the default file if present, else an empty map."""
    explicit = path is not None
    aliases_path = path if path is not None else default_aliases_path()
    if not aliases_path.exists():
        if explicit:
            raise AliasError(f"{aliases_path}: alias file not found")
        return AliasMap(), aliases_path
    try:
        text = aliases_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise AliasError(f"{aliases_path}: cannot read alias file ({error})") from error
    return parse_aliases(text, aliases_path), aliases_path


def parse_aliases(text: str, path: Path) -> AliasMap:
    # Imported here: PyYAML costs a check without an alias file ~12 ms of start-up.
    import yaml

    from engram_sync_kit.engram_contract.yaml_source import YamlSyntaxError, compose_yaml

    try:
        root = compose_yaml(text)
    except YamlSyntaxError as error:
        raise AliasError(f"{path}:{error.line}: invalid YAML ({error.problem})") from error
    if root is None:
        return AliasMap()
    if not isinstance(root, yaml.MappingNode):
        raise AliasError(f"{path}:{_line(root)}: expected a mapping with sections {' and '.join(SECTIONS)}")
    sections: dict[str, dict[str, str]] = {section: {} for section in SECTIONS}
    seen: set[str] = set()
    for key_node, value_node in root.value:
        section = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if section not in SECTIONS:
            raise AliasError(
                f"{path}:{_line(key_node)}: unknown section {section!r} (allowed: {', '.join(SECTIONS)})"
            )
        if section in seen:
            raise AliasError(f"{path}:{_line(key_node)}: section {section!r} is listed twice")
        seen.add(section)
        if isinstance(value_node, yaml.ScalarNode) and value_node.tag.endswith(":null"):
            continue
        if not isinstance(value_node, yaml.MappingNode):
            raise AliasError(
                f"{path}:{_line(value_node)}: section {section!r} must be a mapping of name: project"
            )
        entries = sections[section]
        for alias_node, project_node in value_node.value:
            alias = _scalar(alias_node, path, "alias")
            project = normalize_project(_scalar(project_node, path, "project"))
            where = f"{path}:{_line(alias_node)}"
            if not alias.strip():
                raise AliasError(f"{where}: an alias must not be empty")
            if not project:
                raise AliasError(f"{where}: alias {alias!r} maps to an empty project name")
            if project == RESERVED_INBOX_PROJECT:
                raise AliasError(f"{where}: alias {alias!r} maps to the reserved name 'inbox'")
            if section == "cwds":
                if not alias.startswith("/"):
                    raise AliasError(f"{where}: cwd alias {alias!r} must be an absolute path")
                alias = normalize_cwd(alias)
            elif normalize_project(alias) in {normalize_project(existing) for existing in entries}:
                raise AliasError(f"{where}: key alias {alias!r} is listed twice")
            if section == "cwds" and alias in entries:
                raise AliasError(f"{where}: cwd alias {alias!r} is listed twice")
            entries[alias] = project
    return AliasMap(keys=sections["keys"], cwds=sections["cwds"])


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _scalar(node: yaml.Node, path: Path, what: str) -> str:
    import yaml  # as in parse_aliases: PyYAML only once an alias file is read

    if not isinstance(node, yaml.ScalarNode) or node.tag.endswith(":null"):
        raise AliasError(f"{path}:{_line(node)}: the {what} must be a plain string")
    return str(node.value)


def register_alias(path: Path, section: str, alias: str, project: str) -> bool:
    """Add `alias: project` to `section`; False when it is already there. Keeps the user's comments.

    The entry is inserted as text under the section header and the result is parsed back before it
    replaces the file (atomically); an entry that already maps elsewhere is refused.
    """
    if section not in SECTIONS:
        raise AliasError(f"unknown alias section {section!r} (allowed: {', '.join(SECTIONS)})")
    current, _ = load_aliases(path) if path.exists() else (AliasMap(), path)
    existing = current.project_for_cwd(alias) if section == "cwds" else current.project_for_key(alias)
    if existing is not None:
        if existing == normalize_project(project):
            return False
        raise AliasError(
            f"{path}: {section} alias {alias!r} already maps to {existing!r}; edit the file to change it"
        )
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    entry = f"{json.dumps(alias, ensure_ascii=False)}: {json.dumps(project, ensure_ascii=False)}\n"
    updated = _insert_entry(text, section, entry)
    result = parse_aliases(updated, path)
    found = result.project_for_cwd(alias) if section == "cwds" else result.project_for_key(alias)
    if found != normalize_project(project):
        raise AliasError(
            f"{path}: cannot add {section} alias {alias!r} safely (the section is not a block mapping); "
            "add it by hand"
        )
    atomic_write(path, updated)
    return True


def _insert_entry(text: str, section: str, entry: str) -> str:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    for index, line in enumerate(lines):
        stripped = line.split("#", 1)[0].rstrip()
        if stripped in (f"{section}:", f'"{section}":', f"'{section}':"):
            indent = _entry_indent(lines[index + 1 :])
            return "".join([*lines[: index + 1], indent + entry, *lines[index + 1 :]])
    return "".join([*lines, f"{section}:\n", "  " + entry])


def _entry_indent(following: list[str]) -> str:
    """The indentation of the section's existing entries, so the new one lines up with them."""
    for line in following:
        content = line.strip()
        if not content or content.startswith("#"):
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        return indent if indent else "  "
    return "  "


def check_alias_free(current: AliasMap, path: Path, section: str, alias: str, project: str) -> None:
    """Refuse before any write when --as would contradict an alias the user already has."""
    existing = current.project_for_cwd(alias) if section == "cwds" else current.project_for_key(alias)
    if existing is not None and existing != normalize_project(project):
        raise AliasError(
            f"{path}: {section} alias {alias!r} already maps to {existing!r}; edit the file to change it"
        )
