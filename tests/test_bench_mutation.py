"""bench.mutation: the recorded score, from one mutmut run or from runs split by module."""

from __future__ import annotations

from bench.mutation import combined, score


def test_runs_split_by_module_add_up_to_one_runs_score() -> None:
    contract = {"killed": 700, "survived": 200, "no_tests": 50, "total": 960, "timeout": 10, "suspicious": 0}
    canary = {"killed": 300, "survived": 100, "no_tests": 40, "total": 442, "suspicious": 2}
    assert combined([contract, canary]) == {
        "killed": 1000,
        "survived": 300,
        "no_tests": 90,
        "total": 1402,
        "timeout": 10,
        "suspicious": 2,
    }
    assert score(combined([contract, canary])) == {
        "killed": 1010,
        "survived": 302,
        "no_tests": 90,
        "total": 1402,
        "score_of_tested": 0.7698,
    }


def test_a_run_with_nothing_tested_has_no_score() -> None:
    assert (
        score(combined([{"killed": 0, "survived": 0, "no_tests": 5, "total": 5}]))["score_of_tested"] is None
    )
