"""``cdc --help`` and every subcommand's ``--help`` exit 0 and list every option they take.

The subcommands are read from the parser, so a new one is covered without editing this test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streaming.cli.main import build_parser, main
from streaming.core.layout import CURRENT_FILE_MIB


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def option_names(parser: argparse.ArgumentParser) -> list[str]:
    """What the help must show: every option string and every positional's name."""
    names: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            names.extend(action.choices)
        elif action.option_strings:
            names.extend(action.option_strings)
        else:
            metavar = action.metavar
            names.append(metavar if isinstance(metavar, str) and metavar else action.dest)
    return names


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_lists_every_subcommand_and_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = help_of([], capsys)
    assert text.startswith("usage: cdc ")
    for name in option_names(build_parser()):
        assert name in text, name
    for name in ("run", "demo", "publish", "results", "show", "maintain", "status"):
        assert name in subcommands()


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_subcommand_help_lists_its_options(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_of([command], capsys)
    assert text.startswith(f"usage: cdc {command}")
    parser = subcommands()[command]
    for name in option_names(parser):
        assert name in text, f"cdc {command} --help does not show {name}"
    for action in parser._actions:
        assert action.help, f"cdc {command}: {action.dest} has no help text"


def test_the_installed_entry_point_prints_help() -> None:
    cdc = Path(sys.executable).parent / "cdc"
    assert cdc.exists(), f"no cdc entry point beside {sys.executable}: `make setup` installs it"
    done = subprocess.run([str(cdc), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage: cdc" in done.stdout and "status" in done.stdout


@pytest.mark.parametrize("size", ["0", "-64", "big"])
def test_maintain_refuses_a_file_size_that_is_not_a_positive_integer(
    size: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["maintain", "--cluster", "--file-mib", size])
    assert done.value.code == 2
    assert "--file-mib" in capsys.readouterr().err


def test_maintain_takes_cluster_and_a_file_size() -> None:
    args = build_parser().parse_args(["maintain", "--cluster", "--file-mib", "32"])
    assert (args.cluster, args.file_mib, args.optimize) == (True, 32, False)
    assert build_parser().parse_args(["maintain"]).file_mib == CURRENT_FILE_MIB == 32


def test_without_a_config_file_the_error_says_none_was_found_and_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("CDC_")]:
        monkeypatch.delenv(name)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert f"no cdc.yaml found (looked in {tmp_path / 'cdc.yaml'})" in err
    assert "--config FILE" in err and "warehouse" in err  # and what the environment lacks


@pytest.mark.parametrize("hours", ["0", "0.5", "-1"])
def test_maintain_refuses_a_vacuum_shorter_than_the_configs_retention_floor(
    hours: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["maintain", "--vacuum", hours])
    assert done.value.code == 2
    assert "at least 1 hour" in capsys.readouterr().err
