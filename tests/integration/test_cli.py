"""The command line as users run it: help texts, the demo, a wrong config."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import deltalake
import pytest

from streaming.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
CDC = [sys.executable, "-m", "streaming.cli.main"]


@pytest.mark.parametrize("command", ["run", "demo", "publish", "results", "show"])
def test_every_subcommand_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert "usage: cdc " + command in capsys.readouterr().out


def test_parser_lists_the_design_commands() -> None:
    help_text = build_parser().format_help()
    for command in ("run", "demo", "publish", "results", "show"):
        assert command in help_text


def test_wrong_config_key_fails_at_startup_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "cdc.yaml"
    config.write_text("warehouse: ./w\ncheckpoints: ./c\ntrigger: {intervall: 5 seconds}\n")
    done = subprocess.run(
        [*CDC, "run", "--config", str(config), "--once"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 2
    assert "trigger.intervall: unknown key" in done.stderr


@pytest.mark.spark
def test_demo_prints_the_seed_tables_and_outcomes(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CDC, "demo", "--workspace", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Only the product's lines and its answer: no Spark WARN line (fixed at its cause or
    # filtered by streaming/resources/log4j2.properties), no log4j2 banner.
    spark_lines = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if re.search(r"\bWARN\b", line) or "log4j" in line
    ]
    assert spark_lines == []
    out = done.stdout
    table = out[out.index("petstore.Dog\n") : out.index("petstore.Dog after the DMS file")]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("| dog")
    ]
    assert rows == [["dog1", "2", "Scooby"], ["dog2", "1", "Lassie"], ["dog3", "1", "Clifford"]]
    after = out[out.index("petstore.Dog after the DMS file") : out.index("petstore.Dog history")]
    assert [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in after.splitlines()
        if line.startswith("| dog")
    ] == [["dog1", "2", "Scooby"], ["dog2", "2", "Lassie Come Home"], ["dog4", "1", "Rex"]]
    outcomes = out[out.index("outcomes") :]
    assert "dms:petstore/petstore/Dog/20240101-000001.parquet" in outcomes
    assert "tx-0001" in outcomes and "COMMITTED" in outcomes
    assert "INVALID_JSON" in outcomes and "DUPLICATE" in outcomes

    # cdc maintain --cluster on the demo's tables, as a user runs it: every table listed, the
    # current tables Z-ordered by id (Delta's history says so), their rows unchanged.
    workspace = tmp_path / "demo"
    dog = workspace / "warehouse" / "petstore" / "petstore" / "Dog"
    rows_before = sorted(map(str, deltalake.DeltaTable(str(dog)).to_pyarrow_table().to_pylist()))
    maintained = subprocess.run(
        [*CDC, "maintain", "--cluster", "--config", str(workspace / "cdc.yaml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert maintained.returncode == 0, maintained.stderr[-3000:]
    listed = [line for line in maintained.stdout.splitlines() if line.startswith("| ")]
    assert any("petstore/petstore/Dog " in line for line in listed), maintained.stdout
    assert any("_system/transactions" in line for line in listed), maintained.stdout
    last = deltalake.DeltaTable(str(dog)).history(1)[0]
    assert last["operation"] == "OPTIMIZE" and "zOrderBy" in str(last["operationParameters"])
    rows_after = sorted(map(str, deltalake.DeltaTable(str(dog)).to_pyarrow_table().to_pylist()))
    assert rows_after == rows_before
