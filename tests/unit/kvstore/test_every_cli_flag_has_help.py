"""Every option of every `kvstore` (sub)command says what it does in --help, and the options that set a
component's setting say it in the setting's own words (its doc line and variable), so they cannot drift."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kvstore import __version__, cli
from kvstore.config import IndexConfig, MasterConfig, NodeConfig
from kvstore.config.master import EVICTION_POLICIES


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("kvstore",)
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def _all_parsers() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    return list(_parsers(cli.build_parser()[0]))


def test_the_walk_reaches_every_command() -> None:
    commands = {" ".join(path) for path, _ in _all_parsers()}
    for expected in (
        "kvstore master",
        "kvstore node",
        "kvstore index",
        "kvstore bench trace",
        "kvstore config",
    ):
        assert expected in commands


@pytest.mark.parametrize(
    "path,parser", _all_parsers(), ids=lambda x: " ".join(x) if isinstance(x, tuple) else ""
)
def test_every_option_has_help(path: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
    missing = [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        and not (a.help or "").strip()
    ]
    assert not missing, f"{' '.join(path)}: options without help: {missing}"


@pytest.mark.parametrize(
    "command,config", [("master", MasterConfig), ("node", NodeConfig), ("index", IndexConfig)]
)
def test_a_setting_option_says_the_settings_doc(command: str, config: type) -> None:
    parser = dict(_all_parsers())[("kvstore", command)]
    settings = {s.name: s for s in config.field_settings()}
    checked = 0
    for action in parser._actions:
        info = settings.get(action.dest)
        if info is None:
            continue
        assert info.doc.rstrip(".") in action.help % {}, action.dest
        assert info.variable in action.help, action.dest
        checked += 1
    assert checked >= {"master": 19, "node": 7, "index": 4}[command]


def test_master_help_names_what_the_issue_found_bare() -> None:
    text = dict(_all_parsers())[("kvstore", "master")].format_help()
    for variable in ("EVICTION_POLICY", "CLIENT_TTL", "LEASE_TTL", "HIGH_WATERMARK", "LOW_WATERMARK"):
        assert f"KVSTORE_MASTER_{variable}" in text


def test_the_eviction_policies_offered_are_the_masters() -> None:
    from kvstore.master.planners.eviction import POLICIES

    assert set(EVICTION_POLICIES) == set(POLICIES)
    with pytest.raises(SystemExit):
        cli.build_parser()[0].parse_args(["master", "--eviction-policy", "fifo"])
    with pytest.raises(Exception, match="unknown eviction_policy 'fifo'"):
        MasterConfig.load({}, eviction_policy="fifo")


def test_version_is_the_packages() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"kvstore {__version__} (wire protocol ")
