"""DMS rows are numbered by (file name, row in file) where the files are read, on several tasks.

The number is the low bits of ``__seq``: it orders several changes of one key within a load. It
used to come from a window over the whole load (``Window.orderBy(file, row)``), which Spark runs
on one task after moving every row there ("No Partition Defined for Window operation").
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming.core.columns import ColumnFormat
from streaming.core.outcomes import Status
from streaming.core.plan import Files, Location
from streaming.core.requests import DataFormat
from streaming.inputs.loads import ROW, _read_files
from streaming.storage.tables import read_table
from tests.support import Workspace, request
from tests.support.datasets import DOG

pytestmark = pytest.mark.spark


def write_dms(folder: Path, name: str, rows: list[tuple[str, str, str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    ids, names, ops = zip(*rows, strict=True)
    table = pa.table({"ID": list(ids), "NAME": list(names), "Op": list(ops)})
    pq.write_table(table, folder / name)


def test_rows_of_several_files_are_numbered_in_file_order_on_several_tasks(
    spark: SparkSession, tmp_path: Path
) -> None:
    folder = tmp_path / "dms"
    # Written out of name order: the numbering follows the names, not the listing.
    write_dms(folder, "20240101-000003.parquet", [("d5", "e", "I"), ("d6", "f", "I")])
    write_dms(folder, "20240101-000001.parquet", [("d1", "a", "I"), ("d2", "b", "U")])
    write_dms(folder, "20240101-000002.parquet", [("d3", "c", "I"), ("d4", "d", "D")])
    files = Files(Location(str(folder), True), DataFormat.DMS, ColumnFormat.UPPER, {})

    df = _read_files(spark, files)
    rows = df.select(ROW, "ID", F.spark_partition_id().alias("part")).collect()

    by_number = sorted(rows, key=lambda r: r[ROW])
    assert [r[ROW] for r in by_number] == list(range(6))
    assert [r["ID"] for r in by_number] == ["d1", "d2", "d3", "d4", "d5", "d6"]
    # Numbered where the files are read, on the scan's tasks (one for all rows before).
    assert len({r["part"] for r in rows}) > 1
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "Window" not in plan and "SinglePartition" not in plan


def test_one_file_is_numbered_by_its_row_index(spark: SparkSession, tmp_path: Path) -> None:
    folder = tmp_path / "one"
    write_dms(folder, "only.parquet", [("x", "1", "I"), ("y", "2", "I"), ("x", "3", "U")])
    files = Files(Location(str(folder), True), DataFormat.DMS, ColumnFormat.UPPER, {})
    df = _read_files(spark, files)
    assert [(r["ID"], r[ROW]) for r in df.orderBy(ROW).collect()] == [
        ("x", 0),
        ("y", 1),
        ("x", 2),
    ]
    assert "Join" not in df._jdf.queryExecution().executedPlan().toString()


def test_changes_of_one_key_across_the_files_of_one_load_apply_in_file_order(
    spark: SparkSession, ws: Workspace
) -> None:
    ws.dataset("petstore", DOG)
    folder = ws.root / "data" / "dms1" / "petstore" / "Dog"
    write_dms(folder, "b.parquet", [("dog1", "second", "U"), ("dog2", "gone", "D")])
    write_dms(folder, "a.parquet", [("dog1", "first", "I"), ("dog2", "Lassie", "I")])
    write_dms(folder, "c.parquet", [("dog1", "third", "U"), ("dog3", "Rex", "I")])
    action = {"operation": "UPSERT", "locationUri": "./data/dms1", "format": "DMS"}
    ws.requests(request("tx-dms-folder", action))

    job = ws.run_once(spark)

    statuses = read_table(spark, job.layout.outcomes).select("transaction_id", "status").collect()
    assert [(r["transaction_id"], r["status"]) for r in statuses] == [
        ("tx-dms-folder", Status.COMMITTED.value)
    ]
    dogs = read_table(spark, job.layout.table("petstore", "petstore.Dog"))
    assert sorted((r["id"], r["name"]) for r in dogs.collect()) == [
        ("dog1", "third"),
        ("dog3", "Rex"),
    ]
