"""Schema evolution at startup (docs/interface.md, "Schema evolution"): a dataset definition
changes between two runs, with a transaction already waiting in the landing folder.

Additive changes are applied to every table of the schema before the query starts (and recorded
in the commit metadata); anything else stops Job.create before anything is consumed, and the
waiting transaction is applied once the definition is fixed. delta-rs reads every table after.
"""

from __future__ import annotations

import json
from typing import Any

import deltalake
import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from streaming.core.layout import Layout
from streaming.core.outcomes import Outcome, Status
from streaming.runtime.job import Job
from streaming.storage.evolution import (
    COMMIT_KEY,
    TOMBSTONE_PROPERTY,
    WATERMARK_PROPERTY,
    IncompatibleSchemaChange,
)
from streaming.storage.maintain import all_tables
from streaming.storage.tables import read_table
from tests.support import Workspace, request, upsert

pytestmark = pytest.mark.spark

V1 = """\
shop.Order:
  properties:
    status: {type: string}
    amount: {type: integer}
    owner: {type: object, properties: {name: {type: string}}}
    ts: {type: integer}
  watermark: [ts]
"""
V2 = """\
shop.Order:
  properties:
    status: {type: string}
    color: {type: string}
    amount: {type: integer}
    owner: {type: object, properties: {name: {type: string}, phone: {type: string}}}
    ts: {type: integer}
  watermark: [ts]
"""
O1 = {"id": "o1", "status": "new", "amount": 5, "owner": {"name": "Ann"}, "ts": 1}
O2 = {"id": "o2", "status": "new", "amount": 7, "owner": {"name": "Bob"}, "ts": 1}
O3 = {"id": "o3", "status": "paid", "amount": 9, "owner": {"name": "Cy"}, "ts": 1}


def rows(path: str) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()}


def outcomes(spark: SparkSession, layout: Layout) -> dict[str, Outcome]:
    found = read_table(spark, layout.outcomes).collect()
    return {r["transaction_id"]: Outcome.from_json(r["outcome"]) for r in found}


def versions(layout: Layout, job: Job) -> dict[str, int]:
    return {p: deltalake.DeltaTable(p).version() for p in all_tables(layout, job.datasets)}


def first_run(spark: SparkSession, ws: Workspace, definition: str = V1) -> Job:
    ws.dataset("shop", definition)
    ws.data("v1/shop/Order/part.json", O1, O2, O3)
    ws.requests(request("tx-1", upsert("./data/v1"), dataset="shop"))
    return ws.run_once(spark)


def test_added_property_and_nested_field_reach_every_table_with_a_batch_waiting(
    spark: SparkSession, ws: Workspace
) -> None:
    job = first_run(spark, ws)
    paths = job.layout.object_table("shop", "shop.Order")
    before = rows(paths.current)

    # The definition changes while a transaction that writes the new columns is queued.
    ws.dataset("shop", V2)
    changed = {**O1, "color": "red", "owner": {"name": "Ann", "phone": "555"}, "ts": 2}
    ws.data("v2/shop/Order/part.json", changed, O2)  # o2 again, as it was
    ws.requests(request("tx-2", upsert("./data/v2"), dataset="shop"))
    job = ws.run_once(spark)

    outcome = outcomes(spark, job.layout)["tx-2"]
    assert outcome.status is Status.COMMITTED, outcome.error
    (action,) = outcome.actions
    assert (action.updated, action.unchanged) == (1, 1)
    after = rows(paths.current)
    assert list(after["o1"]) == [
        "id", "version", "created", "updated", "hash",
        "status", "color", "amount", "owner", "ts",
    ]  # fmt: skip
    assert (after["o1"]["version"], after["o1"]["color"]) == (2, "red")
    assert after["o1"]["owner"] == {"name": "Ann", "phone": "555"}
    # rows the batch did not change read NULL in the new columns and keep their hash
    assert (after["o3"]["color"], after["o3"]["owner"]) == (None, {"name": "Cy", "phone": None})
    for key in ("o2", "o3"):
        assert (after[key]["version"], after[key]["hash"]) == (1, before[key]["hash"])
    history = deltalake.DeltaTable(paths.history).to_pyarrow_table().to_pylist()
    assert sorted((h["id"], h["version"], h["color"]) for h in history) == [
        ("o1", 1, None),
        ("o1", 2, "red"),
        ("o2", 1, None),
        ("o3", 1, None),
    ]
    # every change is a commit of its own, with what it added in the commit metadata
    for path in (paths.current, paths.history):
        commits = DeltaTable.forPath(spark, path).history().collect()
        (alter,) = [c for c in commits if c["operation"] == "ADD COLUMNS"]
        meta = json.loads(alter["userMetadata"])[COMMIT_KEY]
        assert meta == {
            "dataset": "shop",
            "schema": "shop.Order",
            "added": [
                {"column": "color", "type": "string"},
                {"column": "owner.phone", "type": "string"},
            ],
        }
    config = deltalake.DeltaTable(paths.current).metadata().configuration
    assert (config[WATERMARK_PROPERTY], config[TOMBSTONE_PROPERTY]) == ('["ts"]', "null")
    for path in all_tables(job.layout, job.datasets):
        deltalake.DeltaTable(path).to_pyarrow_table()

    # a restart with the same definition changes nothing
    unchanged = versions(job.layout, job)
    job = Job.create(spark, ws.config())
    assert versions(job.layout, job) == unchanged


def test_a_removed_property_stays_and_is_no_longer_written(
    spark: SparkSession, ws: Workspace
) -> None:
    job = first_run(spark, ws)
    paths = job.layout.object_table("shop", "shop.Order")
    ws.dataset("shop", V1.replace("    status: {type: string}\n", ""))
    ws.data(
        "v2/shop/Order/part.json",
        {**O1, "amount": 6, "ts": 2},
        {"id": "o4", "amount": 1, "ts": 1, "status": "ignored"},
    )
    ws.requests(request("tx-2", upsert("./data/v2"), dataset="shop"))
    job = ws.run_once(spark)
    assert outcomes(spark, job.layout)["tx-2"].status is Status.COMMITTED
    after = rows(paths.current)
    assert (after["o1"]["amount"], after["o1"]["status"]) == (6, "new")  # kept, not written
    assert (after["o4"]["amount"], after["o4"]["status"]) == (1, None)
    history = rows_of(paths.history)
    assert ("o1", 2, None) in history and ("o4", 1, None) in history
    for path in all_tables(job.layout, job.datasets):
        deltalake.DeltaTable(path).to_pyarrow_table()


def rows_of(path: str) -> list[tuple[Any, ...]]:
    table = deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()
    return sorted((r["id"], r["version"], r["status"]) for r in table)


def test_an_incompatible_change_refuses_to_start_and_the_waiting_batch_runs_once_fixed(
    spark: SparkSession, ws: Workspace
) -> None:
    job = first_run(spark, ws)
    layout = job.layout
    tables = versions(layout, job)
    ws.data("v2/shop/Order/part.json", {**O1, "amount": 8, "ts": 2})
    waiting = ws.requests(request("tx-2", upsert("./data/v2"), dataset="shop"))

    ws.dataset("shop", V1.replace("amount: {type: integer}", "amount: {type: boolean}"))
    with pytest.raises(IncompatibleSchemaChange) as refused:
        Job.create(spark, ws.config())
    message = refused.value.message
    assert refused.value.code == "INCOMPATIBLE_SCHEMA_CHANGE"
    assert (
        "dataset shop, schema shop.Order, amount: type changed from integer to boolean "
        "(tables: current, history)"
    ) in message
    assert "Delta cannot change a bigint column to boolean in place" in message
    assert "To fix: put back the type integer for 'amount'" in message
    assert "consumed no input" in message

    ws.dataset("shop", V1.replace("watermark: [ts]", "watermark: [amount]"))
    with pytest.raises(IncompatibleSchemaChange, match=r"watermark: changed from \['ts'\]"):
        Job.create(spark, ws.config())
    # integer → decimal: Delta could widen it, delta-rs could not read the table after
    ws.dataset("shop", V1.replace("amount: {type: integer}", "amount: {type: decimal}"))
    with pytest.raises(IncompatibleSchemaChange, match="typeWidening table feature"):
        Job.create(spark, ws.config())

    # nothing was altered, nothing consumed: no outcome for tx-2 yet
    assert versions(layout, job) == tables
    assert "tx-2" not in outcomes(spark, layout)
    assert waiting.exists()

    ws.dataset("shop", V1)  # fixed: the waiting transaction is applied
    job = ws.run_once(spark)
    assert outcomes(spark, job.layout)["tx-2"].status is Status.COMMITTED
    assert rows(layout.table("shop", "shop.Order"))["o1"]["amount"] == 8


def test_delta_rs_cannot_read_a_type_widened_table(spark: SparkSession, tmp_path: Any) -> None:
    """Why no type is widened (``evolution.DELTA_RS_READS_TYPE_WIDENING``): Delta widens bigint to
    decimal(38,9) with the typeWidening table feature, and delta-rs refuses such a table. If
    this test fails, delta-rs reads them now: widening can be allowed."""
    path = str(tmp_path / "widened")
    spark.sql(f"CREATE TABLE delta.`{path}` (id string, amount bigint) USING delta")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES ('a', 1)")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN amount TYPE decimal(38,9)")
    assert read_table(spark, path).schema["amount"].dataType.simpleString() == "decimal(38,9)"
    with pytest.raises(Exception, match="typeWidening"):
        deltalake.DeltaTable(path).to_pyarrow_table()
