"""The pytest plugin: one item per *.scenario.yaml, located at its YAML line, tags as marks."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SCENARIO = """\
# a comment first, so the scenario's line is not 1

name: plugin
tags: [smoke, lanes]
cloud: {autosync: false}
steps:
  - enroll: my-app
expect:
  - tag: design
    sync_state_targets: {includes: ['cloud:inbox']}
"""


def test_each_scenario_is_one_item_at_its_yaml_line_with_its_tags_as_marks(pytester: pytest.Pytester) -> None:
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider")
    (item,) = items
    assert item.name == "plugin"
    assert item.location[1] == 2 and item.location[2] == "scenario: plugin"
    assert {mark.name for mark in item.iter_markers()} >= {"smoke", "lanes", "scenario", "engram"}


def test_an_invalid_scenario_is_a_failing_item_with_the_file_line_message(pytester: pytest.Pytester) -> None:
    pytester.makefile(".scenario.yaml", bad="name: x\nsteps:\n  - enroll: {colour: red}\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*bad.scenario.yaml:3: steps.0.enroll.colour: unknown key 'colour'; allowed:*"]
    )


@pytest.mark.engram
def test_a_scenario_item_runs_and_fails_on_design_only_when_asked(
    pytester: pytest.Pytester, engram_bin: object
) -> None:
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    # under baseline its one design expectation decides nothing: it passes only when that is accepted
    pytester.runpytest(
        "-p", "no:cacheprovider", f"--scenario-engram={engram_bin}", "--scenario-allow-unjudged"
    ).assert_outcomes(passed=1)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", f"--scenario-engram={engram_bin}", "--scenario-expect", "all"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*sync_state targets: missing 'cloud:inbox'*"])


@pytest.mark.engram
def test_items_played_side_by_side_keep_their_own_results(
    pytester: pytest.Pytester, engram_bin: object
) -> None:
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    failing = SCENARIO.replace("name: plugin", "name: other").replace(
        "tag: design", "tag: baseline\n    engram: '>=1.0.0'"
    )
    pytester.makefile(".scenario.yaml", other=failing)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", f"--scenario-engram={engram_bin}", "--scenario-jobs", "4",
        "--scenario-allow-unjudged",
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED *other.scenario.yaml::other"])


def test_tags_declare_themselves_and_strict_markers_still_refuses_a_misspelt_mark(
    pytester: pytest.Pytester,
) -> None:
    # Before: every tag (and the plugin's own `engram` mark) had to be declared again in the
    # consumer's ini, or the scenario was invalid under --strict-markers.
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    pytester.makeini("[pytest]\naddopts = --strict-markers\n")
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider", "-m", "lanes and engram")
    assert [item.name for item in items] == ["plugin"]
    pytester.makepyfile(test_typo="import pytest\n\n@pytest.mark.lanse\ndef test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--scenario-skip-without-engram", "test_typo.py")
    result.stdout.fnmatch_lines(["*'lanse' not found in `markers` configuration option*"])


def test_under_strict_markers_a_tag_that_nearly_matches_a_known_one_is_a_typo(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.delenv("ENGRAM_BIN", raising=False)
    monkeypatch.setenv("ENGRAM_KIT_CACHE", str(tmp_path_factory.mktemp("no-engram")))
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    for name in ("one", "two"):
        pytester.makefile(".scenario.yaml", **{name: SCENARIO.replace("name: plugin", f"name: {name}")})
    pytester.makefile(
        ".scenario.yaml", odd=SCENARIO.replace("name: plugin", "name: odd").replace("lanes", "lane")
    )
    pytester.makeini("[pytest]\nmarkers =\n    smoke: declared\n")
    pytester.makefile(
        ".scenario.yaml", smok=SCENARIO.replace("name: plugin", "name: smok").replace("smoke,", "smok,")
    )
    # tags that differ only in a number (upstream issue tags) are different tags, not typos
    pytester.makefile(
        ".scenario.yaml",
        issue=SCENARIO.replace("name: plugin", "name: issue").replace("smoke,", "engram-264,"),
    )
    pytester.makeini("[pytest]\nmarkers =\n    smoke: declared\n    engram-299: declared\n")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--strict-markers", "--scenario-skip-without-engram"
    )
    result.assert_outcomes(skipped=4, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*odd.scenario.yaml:3: tag 'lane': did you mean 'lanes'? *",
            "*smok.scenario.yaml:3: tag 'smok': did you mean 'smoke'? *",
        ]
    )


def test_no_engram_binary_fails_the_run_in_one_line_unless_skipping_is_asked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Before: every scenario was skipped and pytest exited 0, a green gate that tested nothing.
    monkeypatch.delenv("ENGRAM_BIN", raising=False)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("ENGRAM_KIT_CACHE", str(tmp_path_factory.mktemp("no-engram")))
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.stderr.lines if line] == [
        "ERROR: no engram binary for 1 scenario(s): give --scenario-engram=PATH or set ENGRAM_BIN=PATH (the "
        "build under test); --scenario-engram-installed plays the release `engram-harness engram install` "
        "built; --scenario-skip-without-engram skips them instead"
    ]
    pytester.runpytest("-p", "no:cacheprovider", "--scenario-skip-without-engram").assert_outcomes(skipped=1)
    assert pytester.runpytest("-p", "no:cacheprovider", "--collect-only").ret == pytest.ExitCode.OK
    # deselected scenarios need no binary
    pytester.makepyfile(test_plain="def test_x():\n    pass\n")
    pytester.runpytest("-p", "no:cacheprovider", "-m", "not scenario").assert_outcomes(passed=1)


@pytest.mark.parametrize("where", ["option", "env"])
def test_a_named_engram_that_is_not_executable_is_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    missing = pytester.path / "nowhere" / "engram"
    if where == "env":
        monkeypatch.setenv("ENGRAM_BIN", str(missing))
        result = pytester.runpytest("-p", "no:cacheprovider")
        assert [line for line in result.stderr.lines if line] == [
            f"ERROR: ENGRAM_BIN={missing}: not an executable file"
        ]
    else:
        result = pytester.runpytest("-p", "no:cacheprovider", f"--scenario-engram={missing}")
        assert [line for line in result.stderr.lines if line] == [
            f"ERROR: --scenario-engram {missing}: not an executable file"
        ]
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def _other_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A binary under another project whose pyproject.toml has a pytest section of its own."""
    other = tmp_path_factory.mktemp("other-project")
    (other / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = "--strict-markers -p no:terminalx"\ntestpaths = ["nowhere"]\n'
    )
    binary = other / "bin" / "engram"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    (other / "j.xml").write_text("")
    return other


def _consumer(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = --strict-markers\ntestpaths = scenarios\n")
    (pytester.path / "scenarios").mkdir()
    (pytester.path / "scenarios" / "plugin.scenario.yaml").write_text(SCENARIO)


@pytest.mark.parametrize("name", ["--scenario-engram", "--scenario-keep", "--scenario-junit"])
def test_the_equals_spelling_keeps_the_consumers_own_config(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    other = _other_project(tmp_path_factory)
    _consumer(pytester)
    binary = other / "bin" / "engram"
    value = {
        "--scenario-engram": binary,
        "--scenario-keep": other / "bin",
        "--scenario-junit": other / "j.xml",
    }
    option = [f"{name}={value[name]}"]
    if name != "--scenario-engram":
        option += [f"--scenario-engram={binary}"]
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", *option)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["scenarios/plugin.scenario.yaml::plugin"])
    config = pytester.parseconfigure(*option)
    assert (config.rootpath, config.inipath) == (pytester.path, pytester.path / "tox.ini")


@pytest.mark.parametrize("name", ["--scenario-engram", "--scenario-keep", "--scenario-junit"])
def test_two_tokens_naming_a_path_elsewhere_is_refused_in_one_line(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    # pytest had taken the value for a test path and read the other project's pyproject.toml (its addopts
    # and markers); the plugin had re-chosen through pytest's private internals. Now it says how to write it.
    other = _other_project(tmp_path_factory)
    _consumer(pytester)
    value = {"--scenario-engram": other / "bin" / "engram", "--scenario-keep": other / "bin"}.get(
        name, other / "j.xml"
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", name, str(value))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.stderr.lines if line] == [
        f"ERROR: {name} {value}: a path outside {pytester.path} can make pytest read another project's "
        f"configuration; write {name}={value}"
    ]


def test_two_tokens_naming_a_path_inside_the_project_work(pytester: pytest.Pytester) -> None:
    _consumer(pytester)
    binary = pytester.path / "bin" / "engram"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--collect-only", "-q", "--scenario-engram", "bin/engram",
        "--scenario-junit", "reports/design.xml",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["scenarios/plugin.scenario.yaml::plugin"])


@pytest.mark.engram
def test_scenario_keep_keeps_a_passing_scenarios_directory_in_dir(
    pytester: pytest.Pytester, engram_bin: object
) -> None:
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", f"--scenario-engram={engram_bin}", "--scenario-keep", "kept",
        "--scenario-allow-unjudged",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    (kept,) = (pytester.path / "kept").iterdir()
    assert kept.name.startswith("plugin-") and (kept / "logs").is_dir()


@pytest.mark.engram
def test_the_plugins_junit_is_grouped_by_design_section(
    pytester: pytest.Pytester, engram_bin: object
) -> None:
    # Before: pytest's JUnit held one testcase per scenario and nothing of the design sections.
    import xml.etree.ElementTree as ElementTree

    pytester.makefile(
        ".scenario.yaml",
        plugin=SCENARIO.replace("  - tag: design\n", "  - tag: design\n    design_section: '§1'\n"),
    )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", f"--scenario-engram={engram_bin}", "--scenario-junit", "design.xml",
        "--junitxml", "pytest.xml", "--scenario-allow-unjudged",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    suites = {
        s.get("name"): s for s in ElementTree.parse(pytester.path / "design.xml").getroot().iter("testsuite")
    }
    assert list(suites) == ["engram-harness", "design §1 (engram 1.20.0)"]
    assert (suites["design §1 (engram 1.20.0)"].get("skipped"), suites["engram-harness"].get("failures")) == (
        "1",
        "0",
    )
    properties = ElementTree.parse(pytester.path / "pytest.xml").getroot().findall(".//property")
    assert [(p.get("name"), (p.get("value") or "")[:5]) for p in properties] == [
        ("engram", str(engram_bin)[:5]),
        ("engram version", "1.20."),
        ("design §1", "fail:"),
    ]
