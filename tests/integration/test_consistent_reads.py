"""Consistent multi-table reads (docs/architecture.md, "Consistent reads"): every table at the
version the ledger recorded for the last completed batch, not at its latest version
(`streaming.storage.consistent`, ``cdc show --consistent``)."""

from __future__ import annotations

import json
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.cli.main import main
from streaming.core.outcomes import Outcome
from streaming.storage.consistent import consistent_versions, read_consistent
from streaming.storage.schemas import current_schema
from streaming.storage.tables import read_table
from tests.support import Workspace, request, upsert

pytestmark = pytest.mark.spark

PETSTORE = """\
petstore.Dog:
  properties:
    name: {type: string}
petstore.Cat:
  properties:
    name: {type: string}
petstore.Bird:
  properties:
    name: {type: string}
"""


def test_consistent_read_ignores_commits_the_ledger_does_not_hold(
    spark: SparkSession, ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    ws.dataset("petstore", PETSTORE)
    ws.data("in1/petstore/Dog/part.json", {"id": "dog1", "name": "Rex"})
    ws.data("in1/petstore/Cat/part.json", {"id": "cat1", "name": "Tom"})
    ws.data("in2/petstore/Dog/part.json", {"id": "dog2", "name": "Fido"})
    cfg = ws.config()
    ws.requests(request("tx-1", upsert("./data/in1")))
    ws.run_once(spark, cfg)
    ws.requests(request("tx-2", upsert("./data/in2")))
    job = ws.run_once(spark, cfg)
    layout = job.layout
    dog, cat = layout.table("petstore", "petstore.Dog"), layout.table("petstore", "petstore.Cat")
    found = {
        r["transaction_id"]: Outcome.from_json(r["outcome"])
        for r in read_table(spark, layout.outcomes).collect()
    }
    ledger_dog = found["tx-2"].table_versions["petstore.Dog"]
    ledger_cat = found["tx-1"].table_versions["petstore.Cat"]
    assert found["tx-2"].table_versions == {"petstore.Dog": ledger_dog}

    # Someone else commits to Dog after the job's last batch: the ledger does not know it.
    definition = job.datasets["petstore"].schemas["petstore.Dog"]
    intruder: dict[str, Any] = {
        "id": "intruder",
        "version": 1,
        "created": found["tx-2"].committed_at,
        "updated": found["tx-2"].committed_at,
        "hash": "x",
        "name": "Not in the ledger",
    }
    spark.createDataFrame([intruder], current_schema(definition)).write.format("delta").mode(
        "append"
    ).save(dog)
    assert deltalake.DeltaTable(dog).version() == ledger_dog + 1

    versions = consistent_versions(spark, layout)
    assert versions == {dog: ledger_dog, cat: ledger_cat}  # Bird: never written
    ids = sorted(
        r["id"] for r in read_consistent(spark, layout, "petstore", "petstore.Dog").collect()
    )
    assert ids == ["dog1", "dog2"]
    latest = sorted(r["id"] for r in read_table(spark, dog).collect())
    assert latest == ["dog1", "dog2", "intruder"]
    cats = read_consistent(spark, layout, "petstore", "petstore.Cat", versions).collect()
    assert [r["name"] for r in cats] == ["Tom"]
    assert read_consistent(spark, layout, "petstore", "petstore.Bird", versions).count() == 0

    config_file = ws.root / "cdc.yaml"
    config_file.write_text(cfg.model_dump_json())
    capsys.readouterr()
    show = ["show", "petstore", "petstore.Dog", "--config", str(config_file), "--json"]
    assert main([*show, "--consistent"]) == 0
    printed = capsys.readouterr()
    assert [json.loads(line)["id"] for line in printed.out.splitlines()] == ["dog1", "dog2"]
    assert f"version {ledger_dog}" in printed.err
    assert main(show) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == [
        "dog1",
        "dog2",
        "intruder",
    ]
    assert main([*show, "--consistent", "--version", "1"]) == 2
    assert "USAGE_ERROR" in capsys.readouterr().err
