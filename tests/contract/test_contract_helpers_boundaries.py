"""engram_contract's small helpers at their boundaries: Go's JSON limits and kinds, the one-line CLI errors,
YAML lines, server URLs, the ledger's count, the preflight's codes (found by mutation testing)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from engram_sync_kit.engram_contract.errors import ContractError
from engram_sync_kit.engram_contract.files import overwrite_problem
from engram_sync_kit.engram_contract.generations import RETIRED_BY_DISPOSITION, identify_generation
from engram_sync_kit.engram_contract.gojson import DEPTH_ERROR, go_kind, go_loads
from engram_sync_kit.engram_contract.journal_match import field_text, matches, mismatched_fields
from engram_sync_kit.engram_contract.ledger import Ledger
from engram_sync_kit.engram_contract.local_api import observation_path
from engram_sync_kit.engram_contract.one_line_cli import USAGE_EXIT, OneLineErrorGroup
from engram_sync_kit.engram_contract.prompt_preflight import (
    KeyedPrompt,
    LocalOrigin,
    confirmed,
    keyed_prompt,
    local_denial,
    provenance_error_code,
    remote_failure_reason,
)
from engram_sync_kit.engram_contract.remotes import normalize_server_url
from engram_sync_kit.engram_contract.worker_liveness import WorkerRecord
from engram_sync_kit.engram_contract.yaml_source import YamlSyntaxError, load_yaml


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (None, "null"),
        (True, "bool"),
        (0, "number"),
        (1.5, "number"),
        ("", "string"),
        ([], "array"),
        ({}, "object"),
    ],
)
def test_go_kind(value: object, kind: str) -> None:
    assert go_kind(value) == kind


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("1e999", "number 1e999 is out of range for float64"),
        ("-1e999", "number -1e999 is out of range for float64"),
        (
            "1234567890" * 5 + "e999",
            "number 1234567890123456789012345678901234567890 is out of range for float64",
        ),
        ("9" * 4001, f"number {'9' * 40}... is out of range (4001 digits)"),
        ("[" * 501 + "]" * 501, DEPTH_ERROR),
        ('[{"a":' * 250 + "[1]" + "}]" * 250, DEPTH_ERROR),  # 501 levels of both kinds
    ],
)
def test_go_loads_refuses_what_go_cannot_hold(text: str, error: str) -> None:
    with pytest.raises(ContractError) as caught:
        go_loads(text)
    assert str(caught.value) == error


def test_go_loads_holds_up_to_its_limits() -> None:
    assert len(str(go_loads("9" * 4000))) == 4000
    assert go_loads("[" * 500 + "]" * 500) is not None
    assert go_loads('["' + "[" * 600 + '"]') == ["[" * 600]  # brackets inside a string are no depth
    assert len(go_loads("[" + "[]," * 600 + "[]]")) == 601  # many siblings, depth 2


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg,unused-ignore]
    except TypeError:  # click 8.2 and later keep stderr apart always
        return CliRunner()


def test_the_one_line_cli_group() -> None:
    class Demo(OneLineErrorGroup):
        program = "demo"
        package_error = ContractError

    @click.group(cls=Demo)
    def cli() -> None:
        pass

    @cli.command()
    def usage() -> None:
        raise click.UsageError("bad option")

    @cli.command()
    def failure() -> None:
        raise click.ClickException("it broke")

    @cli.command()
    def abort() -> None:
        raise click.Abort()

    @cli.command()
    def contract() -> None:
        raise ContractError("engram says no")

    runner = _runner()
    cases = {
        "usage": (USAGE_EXIT, "Error: bad option (see demo usage --help)\n"),
        "failure": (1, "Error: it broke\n"),
        "abort": (1, "Aborted!\n"),
        "contract": (1, "Error: engram says no\n"),
        "nosuch": (USAGE_EXIT, "Error: No such command 'nosuch'. (see demo --help)\n"),
    }
    for command, (code, stderr) in cases.items():
        result = runner.invoke(cli, [command], prog_name="demo")
        assert (result.exit_code, result.stderr, result.stdout) == (code, stderr, ""), command
    assert USAGE_EXIT == 3

    class Fixed(Demo):
        error_exit = 9

    fixed = Fixed("demo", commands=cli.commands)
    assert runner.invoke(fixed, ["abort"], prog_name="demo").exit_code == 9
    assert runner.invoke(fixed, ["usage"], prog_name="demo").exit_code == 9


def test_a_usage_error_without_a_context_names_the_program() -> None:
    class Demo(OneLineErrorGroup):
        program = "demo-tool"

        def make_context(self, *_args: object, **_kwargs: object) -> click.Context:
            raise click.UsageError("no context")

    result = _runner().invoke(Demo("x"), [], prog_name="x")
    assert (result.exit_code, result.stderr) == (USAGE_EXIT, "Error: no context (see demo-tool --help)\n")


def test_yaml_errors_carry_the_line_and_the_problem() -> None:
    with pytest.raises(YamlSyntaxError) as caught:
        load_yaml("a: 1\nb: c: d\n")
    assert (caught.value.line, caught.value.problem) == (2, "mapping values are not allowed here")
    assert str(caught.value) == "line 2: mapping values are not allowed here"
    with pytest.raises(YamlSyntaxError) as caught:
        load_yaml("a: !!binary xx\n")
    assert str(caught.value) == "line 1: failed to decode base64 data: Incorrect padding"


def test_yaml_line_of_the_deepest_known_part() -> None:
    source = load_yaml("top: 0\na:\n  - x: 1\n    y: 2\n  - 3\nb: 4\n")
    assert [source.line(loc) for loc in [("a", 1, "y"), ("a", 0, "y"), ("a", 0, "z"), ("zz",), ()]] == [
        5,
        4,
        3,
        1,
        1,
    ]
    assert [source.line(loc, keys_only=True) for loc in [("a", 1, "y"), ("a", 0, "y"), ("a", 0, "z")]] == [
        2,
        4,
        2,
    ]
    assert source.line(("b",)) == 6
    assert load_yaml("").line(("a",)) == 1


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("HTTPS://User@Host.EXAMPLE/Path/?q=1#F/", "https://User@host.example/Path/?q=1#F"),
        ("https://user:pw@HOST/", "https://user:pw@host"),
        ("//Host.X/p/", "//host.x/p"),
        ("https://h/a?Q=B", "https://h/a?Q=B"),
        ("https://h/a#Frag", "https://h/a#Frag"),
        ("no-scheme//", "no-scheme"),
        ("/path//", "/path"),
        ("http://[::1//", "http://[::1"),  # urlsplit refuses it: trimmed as text
        ("mailto:X@Y", "mailto:X@Y"),
    ],
)
def test_normalize_server_url(url: str, normalized: str) -> None:
    assert normalize_server_url(f"  {url} ") == normalized


def test_the_ledger_counts_every_waiting_row_and_removes_by_identity() -> None:
    ledger: Ledger[str, tuple[int, int]] = Ledger(rank=lambda row: row)
    first, second, third = (0, 1), (0, 2), (1, 3)
    for row in (first, second, third):
        ledger.add("k", row)
    ledger.add("other", (2, 4))
    assert len(ledger) == 4
    copies = ["c1"]
    assert ledger.take_fitting(lambda _row: "k", copies, lambda row, _copy: row == second) == [(second, "c1")]
    assert len(ledger) == 3
    copies = ["c2"]
    assert ledger.take_fitting(lambda _row: "k", copies, lambda row, _copy: row == third) == [(third, "c2")]
    assert ledger.take("k") == first  # the one left is held bare, and still the right row
    assert ledger.take("k") is None
    assert ledger.remaining() == [(2, 4)]


def test_journal_match_reads_an_enum_by_value_and_a_missing_attribute_as_null() -> None:
    class Lifecycle(Enum):
        PENDING = "pending"

    class Row:
        lifecycle = Lifecycle.PENDING

    assert field_text(Lifecycle.PENDING) == "pending"
    assert matches(Row(), {"lifecycle": "pending", "absent": ""})
    assert mismatched_fields(Row(), {"lifecycle": "pending", "absent": "x"}) == ["absent"]
    assert mismatched_fields(Row(), {"absent": ""}) == []


def test_observation_path_quotes_every_reserved_character() -> None:
    assert observation_path(3, "a/b c") == "/observations/3?expected_project=a%2Fb%20c"


PROMPT = KeyedPrompt(sync_id="p1", session_id="s1", source_inbox_id="i1", project="proj")


@pytest.mark.parametrize(
    ("payload", "prompt"),
    [
        ('{"sync_id":"p1","session_id":"s1","source_inbox_id":"i1","project":"proj"}', PROMPT),
        ('{"sync_id":"p1","session_id":"s1","source_inbox_id":"i1"}', KeyedPrompt("p1", "s1", "i1", "")),
        ('{"sync_id":"p1","session_id":"s1","source_inbox_id":"","project":"proj"}', None),
        ('{"sync_id":"p1","session_id":"s1","project":"proj"}', None),
        ('{"sync_id":1,"session_id":"s1","source_inbox_id":"i1"}', None),
        ("[1]", None),
        ("{bad", None),
    ],
)
def test_keyed_prompt(payload: str, prompt: KeyedPrompt | None) -> None:
    assert keyed_prompt("prompt", payload) == prompt


def test_local_denial_checks_identity_then_origin_then_owner() -> None:
    origin = LocalOrigin(creation=PROMPT, session_owner="proj")
    identity = "unverified keyed prompt mutation identity"
    assert local_denial(PROMPT, "p1", "proj", origin) is None
    assert local_denial(PROMPT, "other", "proj", origin) == identity
    assert local_denial(PROMPT, "p1", "other", origin) == identity
    blank = KeyedPrompt("p1", "s1", "i1", "")
    assert local_denial(blank, "p1", "", LocalOrigin(creation=blank, session_owner="x")) == identity
    assert local_denial(PROMPT, "p1", "proj", LocalOrigin(None, "proj")) == "unverified keyed prompt origin"
    assert local_denial(PROMPT, "p1", "proj", LocalOrigin(PROMPT, "")) == "unverified local session owner"


def test_provenance_answers() -> None:
    claims = "/sync/prompt-pair-claims"
    assert provenance_error_code(claims, 404, b'{"error_code":"pair_taken"}') == "pair_taken"
    assert provenance_error_code(claims, 404, b'{"error_code":""}') == "server_unsupported"
    assert provenance_error_code(claims, 404, b'{"error_code":7}') == "server_unsupported"
    assert provenance_error_code(claims, 404, b"[1]") == "server_unsupported"
    assert provenance_error_code(claims, 404, b"404 page not found") == "server_unsupported"
    assert (
        provenance_error_code("/sync/session-authorities", 404, b'{"error_code":"x"}') == "server_unsupported"
    )
    assert provenance_error_code(claims, 500, b'{"error_code":"x"}') == ""
    assert confirmed(200, b'{"status":"ok"}')
    assert not confirmed(200, b"[1]")
    assert not confirmed(200, b"<html>login</html>")
    assert not confirmed(201, b'{"status":"ok"}')
    assert [remote_failure_reason(status) for status in (400, 401, 402, 403, 500)] == [
        "transport_failed",
        "auth_required",
        "transport_failed",
        "policy_forbidden",
        "transport_failed",
    ]


def test_a_backoff_ending_now_is_over_by_zero_seconds() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    record = WorkerRecord("degraded", 1, now, None, None)
    assert record.backoff_over_for(now) == 0.0


class _Facts:
    def __init__(self, user_version: int) -> None:
        self.user_version = user_version

    def has_table(self, table: str) -> bool:
        return False

    def has_column(self, table: str, column: str) -> bool:
        return column == "project"


def test_an_unplaced_file_is_unknown_in_every_behaviour() -> None:
    generation = identify_generation(_Facts(7))
    assert generation.name == "unknown (v1.20 columns, user_version 7)"
    assert (generation.source, generation.observed, generation.user_version) == ("not read", False, 7)
    assert (generation.retired_by, generation.pull_tables, generation.seeds_inbox) == (
        RETIRED_BY_DISPOSITION,
        (),
        False,
    )


def test_go_white_space_over_raw_bytes() -> None:
    from engram_sync_kit.engram_contract.go_strings import fields, trim_space

    # a byte that is not UTF-8 is never space; U+0085 encoded is
    assert fields(b"a\xffb c\x85d\xc2\x85e") == [b"a\xffb", b"c\x85d", b"e"]
    assert trim_space(b"\x85x\xa0") == b"\x85x\xa0"
    assert trim_space(b"\x1cx\x1c") == b"\x1cx\x1c"  # Python's str.strip() would drop U+001C
    assert trim_space(" \u3000x\u2028".encode()) == b"x"


def test_atomic_write_makes_its_temporary_beside_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from engram_sync_kit.engram_contract.files import atomic_write

    sources: list[Path] = []
    real_replace = os.replace

    def replace(source: str, target: Path) -> None:
        sources.append(Path(source))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "one" / "two" / "file.yaml"
    atomic_write(target, "ñ\n")
    assert target.read_bytes() == "ñ\n".encode()
    [source] = sources
    assert source.parent == target.parent and source.name.startswith(".file.yaml.")


@pytest.mark.parametrize(
    ("suffix", "what"),
    [("-wal", "write-ahead log"), ("-shm", "shared-memory index"), ("-journal", "rollback journal")],
)
def test_an_output_on_a_side_file_names_the_side_file_and_its_database_apart(
    tmp_path: Path, suffix: str, what: str
) -> None:
    db = tmp_path / "engram.db"
    side = tmp_path / f"engram.db{suffix}"
    assert overwrite_problem(side, [db], []) == f"would overwrite {side}, the {what} of the database {db}"
    assert overwrite_problem(db, [db], []) == f"would overwrite the database {db}"
