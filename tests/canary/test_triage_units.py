"""Pure parts of triage: the --seq parser against hostile input, and the near-miss name suggestion."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from canary.triage import TriageError, near_enrolled_name, parse_seqs


def test_a_pasted_list_of_100k_seqs_parses_quickly_in_order_without_duplicates() -> None:
    text = ",".join(str(seq) for seq in [*range(1, 100_001), 5, 7])
    began = time.perf_counter()
    seqs = parse_seqs(text)
    assert time.perf_counter() - began < 2.0
    assert seqs[:3] == (1, 2, 3) and len(seqs) == 100_000


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("9" * 100_000, "'" + "9" * 40 + "...'"),
        ("1,-2", "'-2'"),
        ("1, ,2", "' '"),
        ("١٢", "'١٢'"),  # Arabic-Indic digits are digits to str.isdigit, not to SQLite
        ("0x10", "'0x10'"),
        ("1e3", "'1e3'"),
    ],
    ids=["huge-number", "negative", "blank", "non-ascii-digits", "hex", "exponent"],
)
def test_bad_seq_lists_get_one_line(text: str, shown: str) -> None:
    with pytest.raises(TriageError) as raised:
        parse_seqs(text)
    assert (
        str(raised.value) == f"--seq expects positive row numbers separated by commas (N[,N...]), got {shown}"
    )


@given(st.text(max_size=200))
def test_any_text_parses_or_is_refused_in_one_line(text: str) -> None:
    try:
        seqs = parse_seqs(text)
    except TriageError as error:
        assert "\n" not in str(error)
    else:
        assert seqs and all(seq >= 1 for seq in seqs)


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("client-portal", "client_portal"),
        ("Client_Portal", "client_portal"),
        ("main-prj", "main-proj"),
        ("zzz", None),
    ],
)
def test_near_miss_names(typed: str, expected: str | None) -> None:
    assert near_enrolled_name(typed, frozenset({"client_portal", "main-proj"})) == expected
