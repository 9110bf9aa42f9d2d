"""The command line as users run it: help texts, the demo, a wrong config.

A ``cdc`` process of its own where a cold start is the point: a startup failure (no Spark), and
the demo, whose output must hold no Spark WARN line nor log4j2 banner — which depends on the
log4j2 configuration ``build_session`` gives a JVM it starts, and the demo stops its session.
``cdc maintain`` then runs in this process (``main``), on the session the tests share: its
``build_session`` returns that session and sets the same runtime settings a cold one would
(restored afterwards); the static ones, the JVM's, are the tests' (the same Delta extensions)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.cli.main import build_parser, main
from streaming.core.config import load_config
from streaming.runtime.session import session_conf
from tests.support.cdc import ROOT, run_cdc


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
    done = run_cdc("run", "--config", str(config), "--once", cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert "trigger.intervall: unknown key" in done.stderr


@contextmanager
def restored_settings(spark: SparkSession, config: Path) -> Iterator[None]:
    """The runtime settings ``build_session`` gives a session for ``config``, as they were
    before the block (``getOrCreate`` sets them on the running session)."""
    keys = [k for k in session_conf(load_config(config).spark) if spark.conf.isModifiable(k)]
    saved = {key: spark.conf.get(key, None) for key in keys}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@pytest.mark.spark
def test_demo_prints_the_seed_tables_and_outcomes(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = run_cdc("demo", "--workspace", str(tmp_path / "demo"), cwd=ROOT)
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

    # cdc maintain --cluster on the demo's tables, as a user's command line runs it (``main``):
    # every table listed, the current tables Z-ordered by id (Delta's history says so), their
    # rows unchanged.
    workspace = tmp_path / "demo"
    dog = workspace / "warehouse" / "petstore" / "petstore" / "Dog"
    rows_before = sorted(map(str, deltalake.DeltaTable(str(dog)).to_pyarrow_table().to_pylist()))
    config = workspace / "cdc.yaml"
    capsys.readouterr()
    with restored_settings(spark, config):
        assert main(["maintain", "--cluster", "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    listed = [line for line in printed.splitlines() if line.startswith("| ")]
    assert listed[0].split("|")[1].strip() == "table"  # the header, then a line per table
    assert len(listed) == 1 + len({line.split("|")[1] for line in listed[1:]}) > 5
    assert any("petstore/petstore/Dog " in line for line in listed), printed
    assert any("_system/transactions" in line for line in listed), printed
    last = deltalake.DeltaTable(str(dog)).history(1)[0]
    assert last["operation"] == "OPTIMIZE" and "zOrderBy" in str(last["operationParameters"])
    rows_after = sorted(map(str, deltalake.DeltaTable(str(dog)).to_pyarrow_table().to_pylist()))
    assert rows_after == rows_before

    # cdc show --limit: the first rows by id, and a line saying there are more.
    with restored_settings(spark, config):
        assert (
            main(["show", "petstore", "petstore.Dog", "--limit", "2", "--config", str(config)]) == 0
        )
    shown = capsys.readouterr()
    ids = [
        line.split("|")[1].strip() for line in shown.out.splitlines() if line.startswith("| dog")
    ]
    assert ids == ["dog1", "dog2"]
    assert "the first 2 rows by id, version; --limit N for more" in shown.err
    with restored_settings(spark, config):
        assert (
            main(["show", "petstore", "petstore.Dog", "--limit", "0", "--config", str(config)]) == 0
        )
    shown = capsys.readouterr()
    assert sum(line.startswith("| dog") for line in shown.out.splitlines()) == 3
    assert "--limit" not in shown.err
