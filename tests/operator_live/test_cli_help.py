"""`kraft-operator --help` names both commands and says what every option does."""

from __future__ import annotations

import argparse

from kraft_operator.main import build_parser


def test_help_names_the_run_and_crd_commands() -> None:
    text = build_parser().format_help()
    assert "kraft-operator crd" in text
    assert "kraft-operator [run]" in text


def test_every_option_has_help_and_its_default() -> None:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{action.option_strings} has no help"
        if isinstance(action.default, (str, float)) and action.default:
            assert f"default: {action.default}" in action.help, action.option_strings


def test_log_level_names_are_checked() -> None:
    parser = build_parser()
    assert parser.parse_args(["--log-level", "debug"]).log_level == "DEBUG"
    try:
        parser.parse_args(["--log-level", "verbose"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("--log-level verbose was accepted")
