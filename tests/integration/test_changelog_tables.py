"""Seed 002: history tables are append-only changelogs; OPTIMIZE and VACUUM still work."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pytest
from delta.tables import DeltaTable
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from streaming.cli.main import main
from streaming.storage.maintain import vacuum
from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG

pytestmark = pytest.mark.spark


def test_history_refuses_update_and_delete_while_maintain_compacts_it(
    spark: SparkSession, ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    ws.dataset("petstore", DOG)
    cfg = ws.config()
    for n, name in enumerate(["Rex", "Rex II", "Rex III"]):
        ws.data(f"in{n}/petstore/Dog/part.json", {"id": "dog1", "name": name})
        ws.requests(request(f"tx-{n}", upsert(f"./data/in{n}")))
        job = ws.run_once(spark, cfg)
    paths = job.layout.object_table("petstore", "petstore.Dog")

    history = DeltaTable.forPath(spark, paths.history)
    with pytest.raises(PySparkException, match=r"(?i)append.?only"):
        history.update(set={"name": "'tampered'"})
    with pytest.raises(PySparkException, match=r"(?i)append.?only"):
        history.delete("id = 'dog1'")

    assert (
        deltalake.DeltaTable(paths.history).metadata().configuration["delta.appendOnly"] == "true"
    )
    current = deltalake.DeltaTable(paths.current).metadata().configuration
    assert current["delta.enableChangeDataFeed"] == "true"

    rows_before = sorted(
        (r["id"], r["version"], r["name"])
        for r in deltalake.DeltaTable(paths.history).to_pyarrow_table().to_pylist()
    )
    config_file = ws.root / "cdc.yaml"
    config_file.write_text(cfg.model_dump_json())
    capsys.readouterr()
    assert main(["maintain", "--optimize", "--vacuum", "1", "--config", str(config_file)]) == 0
    report = {
        cells[0]: (int(cells[1]), int(cells[2]))
        for line in capsys.readouterr().out.splitlines()
        if (cells := [c.strip() for c in line.strip("|").split("|")])[1:2] != ["files before"]
    }
    before, after = report[paths.history]
    assert before >= 3 and after == 1
    history_after = deltalake.DeltaTable(paths.history)
    assert (
        sorted(
            (r["id"], r["version"], r["name"]) for r in history_after.to_pyarrow_table().to_pylist()
        )
        == rows_before
        == [("dog1", 1, "Rex"), ("dog1", 2, "Rex II"), ("dog1", 3, "Rex III")]
    )
    # The command keeps an hour of time travel, as upkeep.retention does: the compacted-away
    # files are still on disk. VACUUM with no retention (the library call) removes them from the
    # append-only table too.
    files = Path(paths.history).glob("*.parquet")
    assert len(list(files)) >= 3
    vacuum(spark, paths.history, 0)
    assert len(list(Path(paths.history).glob("*.parquet"))) == 1
