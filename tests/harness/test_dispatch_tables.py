"""The step and check dispatch tables: mypy checks that each handler takes its entry's model (step_kind,
judge); these tests check that each entry's model is the one the scenario schema parses that name into,
and that no step or check kind is left without an entry."""

from __future__ import annotations

from engram_sync_kit.harness.scenario.checks import EVALUATORS
from engram_sync_kit.harness.scenario.schema import CHECK_KEYS, EXPECTATION_MODELS, NESTING_STEPS, STEP_MODELS
from engram_sync_kit.harness.scenario.steps import HANDLERS


def test_every_step_kind_has_a_handler_for_its_model() -> None:
    assert sorted([*HANDLERS, *NESTING_STEPS]) == sorted(STEP_MODELS)
    assert {name: kind.model for name, kind in HANDLERS.items()} == {
        name: STEP_MODELS[name] for name in HANDLERS
    }


def test_every_check_kind_has_a_judge_for_its_model() -> None:
    assert tuple(EVALUATORS) == CHECK_KEYS
    assert {kind: judge.model for kind, judge in EVALUATORS.items()} == {
        kind: EXPECTATION_MODELS[kind].model_fields[kind].annotation for kind in CHECK_KEYS
    }
