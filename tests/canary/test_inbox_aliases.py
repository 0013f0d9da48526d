"""The alias map file: one-line file:line errors, and --as writes that keep it valid YAML."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engram_sync_kit.canary.derive import AliasMap
from engram_sync_kit.canary.inbox.aliases import AliasError, load_aliases, parse_aliases, register_alias


def test_missing_default_file_is_an_empty_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    aliases, path = load_aliases(None)
    assert (aliases, path) == (AliasMap(), tmp_path / "engram-canary" / "aliases.yaml")


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(AliasError, match=r"^.*/nope\.yaml: alias file not found$"):
        load_aliases(tmp_path / "nope.yaml")


def test_parses_both_sections() -> None:
    text = "# mine\nkeys:\n  Old_Name: New-Name\ncwds:\n  /home/ana/ws/: agent-memory\n"
    aliases = parse_aliases(text, Path("a.yaml"))
    assert aliases.project_for_key("old_name") == "new-name"
    assert aliases.project_for_cwd("/home/ana/ws") == "agent-memory"
    assert parse_aliases("", Path("a.yaml")) == AliasMap()
    assert parse_aliases("keys:\ncwds:\n", Path("a.yaml")) == AliasMap()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("keys:\n  a: b\n c: d\n", "a.yaml:3: invalid YAML"),
        ("keys:\n  a: b\nprojects:\n  c: d\n", "a.yaml:3: unknown section 'projects' (allowed: keys, cwds)"),
        ("- a\n", "a.yaml:1: expected a mapping with sections keys and cwds"),
        ("keys: [a, b]\n", "a.yaml:1: section 'keys' must be a mapping of name: project"),
        ("cwds:\n  relative/dir: p\n", "a.yaml:2: cwd alias 'relative/dir' must be an absolute path"),
        ("keys:\n  a: b\n  x: inbox\n", "a.yaml:3: alias 'x' maps to the reserved name 'inbox'"),
        ("keys:\n  a: b\n  A: c\n", "a.yaml:3: key alias 'A' is listed twice"),
        ("keys:\n  a: b\nkeys:\n  c: d\n", "a.yaml:3: section 'keys' is listed twice"),
        ("keys:\n  a: [x]\n", "a.yaml:2: the project must be a plain string"),
        ("keys:\n  a: ''\n", "a.yaml:2: alias 'a' maps to an empty project name"),
    ],
)
def test_errors_are_one_line_with_file_and_line(text: str, message: str) -> None:
    with pytest.raises(AliasError) as caught:
        parse_aliases(text, Path("a.yaml"))
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_register_keeps_comments_indentation_and_validity(tmp_path: Path) -> None:
    path = tmp_path / "aliases.yaml"
    path.write_text("# my aliases\nkeys:\n    old: new  # renamed in May\ncwds: # none yet\n")
    assert register_alias(path, "keys", "side-project", "main-proj") is True
    assert register_alias(path, "cwds", "/home/ana/scratch dir", "main-proj") is True
    text = path.read_text()
    assert text == (
        "# my aliases\nkeys:\n"
        '    "side-project": "main-proj"\n'
        "    old: new  # renamed in May\n"
        "cwds: # none yet\n"
        '  "/home/ana/scratch dir": "main-proj"\n'
    )
    assert yaml.safe_load(text) == {
        "keys": {"side-project": "main-proj", "old": "new"},
        "cwds": {"/home/ana/scratch dir": "main-proj"},
    }


def test_register_is_idempotent_and_refuses_a_contradiction(tmp_path: Path) -> None:
    path = tmp_path / "new" / "aliases.yaml"
    assert register_alias(path, "keys", "a", "b") is True
    assert register_alias(path, "keys", "A", "b") is False
    before = path.read_text()
    with pytest.raises(AliasError, match="key alias|keys alias 'a' already maps to 'b'"):
        register_alias(path, "keys", "a", "c")
    assert path.read_text() == before == 'keys:\n  "a": "b"\n'


def test_register_refuses_a_flow_section_it_cannot_extend(tmp_path: Path) -> None:
    path = tmp_path / "aliases.yaml"
    path.write_text("keys: {old: new}\n")
    with pytest.raises(AliasError):
        register_alias(path, "keys", "a", "b")
    assert path.read_text() == "keys: {old: new}\n"
