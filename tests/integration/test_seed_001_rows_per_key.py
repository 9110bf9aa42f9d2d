"""Seed 001 (watermark and tombstone keys): several rows of one key in one load are changes,
resolved by the watermark — through JSON and Parquet UPSERTs from a location.

The seed's table: primary key ``order_id`` (our ``id``, mapped with ``columnMapping``), watermark
key ``ts`` (an integer here: the seed's values are 100 and 200), tombstone key ``deleted``
(boolean) — named ``is_deleted`` in most tests, and ``deleted`` exactly as the seed has it in
``test_the_seeds_own_column_name_deleted`` (a property may share a name with the sink's own
working columns, which are all ``__``-prefixed). Rows of a
key apply in file order (files by name, then rows) and count like DMS changes: a row older than
the key's state is ``stale``; NULL is the smallest watermark; on a tie the later row wins.
Without a watermark or tombstone key a key given twice is DUPLICATE_ID.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from streaming.core.outcomes import Outcome, Status
from streaming.storage.tables import read_table
from tests.support import Workspace, request, upsert

pytestmark = pytest.mark.spark

SEED = """\
seed.Order:
  properties:
    ts: {type: integer}
    is_deleted: {type: boolean}
    note: {type: string}
  watermark: [ts]
  tombstone: {column: is_deleted}
  columnMapping: {id: order_id}
seed.Plain:
  properties:
    note: {type: string}
"""
TYPES = {"order_id": pa.string(), "ts": pa.int64(), "is_deleted": pa.bool_(), "note": pa.string()}
FORMATS = ["JSON", "PARQUET"]


def row(
    order_id: str, ts: int | None, note: str = "", deleted: bool | None = None
) -> dict[str, Any]:
    return {"order_id": order_id, "ts": ts, "is_deleted": deleted, "note": note}


def write(ws: Workspace, folder: str, fmt: str, *rows: dict[str, Any], name: str = "part") -> None:
    """Rows into ``data/<folder>/seed/Order/<name>.json|parquet``."""
    if fmt == "JSON":
        ws.data(f"{folder}/seed/Order/{name}.json", *rows)
        return
    path = Path(ws.root / "data" / folder / "seed" / "Order" / f"{name}.parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = {c: [r.get(c) for r in rows] for c in TYPES}
    pq.write_table(pa.table(columns, schema=pa.schema(TYPES)), path)


def current(path: str) -> dict[str, tuple[Any, ...]]:
    table = deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()
    return {r["id"]: (r["version"], r["ts"], r["note"]) for r in table}


def outcome(spark: SparkSession, ws: Workspace, tid: str) -> Outcome:
    found = read_table(spark, str(ws.root / "warehouse" / "_system" / "outcomes"))
    (only,) = found.where(f"transaction_id = '{tid}'").collect()
    return Outcome.from_json(only["outcome"])


def counts(result: Outcome) -> dict[str, int]:
    (action,) = result.actions
    counted = json.loads(action.model_dump_json())
    return {k: counted[k] for k in ("inserted", "updated", "deleted", "stale") if counted[k]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_seed_001_example_1_the_row_with_the_larger_watermark_is_read(
    spark: SparkSession, ws: Workspace, fmt: str
) -> None:
    """(order_id=1, ts=100) and (order_id=1, ts=200): the reader returns ts=200."""
    ws.dataset("seed", SEED)
    write(ws, "in", fmt, row("1", 100, "first"), row("1", 200, "second"))
    ws.requests(request("tx-1", upsert("./data/in", format=fmt), dataset="seed"))
    job = ws.run_once(spark)
    result = outcome(spark, ws, "tx-1")
    assert result.status is Status.COMMITTED, result.error
    paths = job.layout.object_table("seed", "seed.Order")
    assert current(paths.current) == {"1": (2, 200, "second")}
    assert counts(result) == {"inserted": 1, "updated": 1}  # two changes, as DMS counts them
    history = deltalake.DeltaTable(paths.history).to_pyarrow_table().to_pylist()
    assert sorted((h["version"], h["ts"], h["__op"]) for h in history) == [
        (1, 100, "i"),
        (2, 200, "u"),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_seed_001_example_2_the_later_tombstone_deletes_the_key(
    spark: SparkSession, ws: Workspace, fmt: str
) -> None:
    """(order_id=2, ts=100) and (order_id=2, ts=200, deleted=true): order 2 is deleted."""
    ws.dataset("seed", SEED)
    write(ws, "in", fmt, row("2", 100, "placed"), row("2", 200, deleted=True))
    ws.requests(request("tx-2", upsert("./data/in", format=fmt), dataset="seed"))
    job = ws.run_once(spark)
    result = outcome(spark, ws, "tx-2")
    assert result.status is Status.COMMITTED, result.error
    paths = job.layout.object_table("seed", "seed.Order")
    assert current(paths.current) == {}
    assert counts(result) == {"inserted": 1, "deleted": 1}
    tombstones = deltalake.DeltaTable(paths.tombstones).to_pyarrow_table().to_pylist()
    assert [(t["id"], t["version"], t["watermark"]) for t in tombstones] == [("2", 2, {"ts": 200})]

    # a late change older than the delete cannot resurrect it
    write(ws, "late", fmt, row("2", 150, "late"))
    ws.requests(request("tx-3", upsert("./data/late", format=fmt), dataset="seed"))
    ws.run_once(spark)
    assert counts(outcome(spark, ws, "tx-3")) == {"stale": 1}
    assert current(paths.current) == {}


@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_of_one_key_older_null_or_tied_and_without_a_watermark(
    spark: SparkSession, ws: Workspace, fmt: str
) -> None:
    ws.dataset("seed", SEED)
    write(
        ws,
        "in",
        fmt,
        row("3", 200, "newer first"),
        row("3", 100, "older"),  # stale
        row("4", 150, "tie one"),
        row("4", 150, "tie two"),  # the later row of a tie wins
        row("5", 100, "set"),
        row("5", None, "null ts"),  # NULL is the smallest watermark: stale
        name="a",
    )
    write(ws, "in", fmt, row("4", 150, "tie in the next file"), name="b")
    ws.data("plain/seed/Plain/part.json", {"id": "p", "note": "a"}, {"id": "p", "note": "b"})
    ws.requests(
        request("tx-4", upsert("./data/in", format=fmt), dataset="seed"),
        request("tx-5", upsert("./data/plain"), dataset="seed"),
    )
    job = ws.run_once(spark)
    result = outcome(spark, ws, "tx-4")
    assert result.status is Status.COMMITTED, result.error
    assert current(job.layout.table("seed", "seed.Order")) == {
        "3": (1, 200, "newer first"),
        "4": (3, 150, "tie in the next file"),
        "5": (1, 100, "set"),
    }
    assert counts(result) == {"inserted": 3, "updated": 2, "stale": 2}
    plain = outcome(spark, ws, "tx-5")  # no watermark, no tombstone key: a duplicate
    assert plain.status is Status.REJECTED
    assert plain.error is not None and plain.error.code == "DUPLICATE_ID"


def test_the_seeds_own_column_name_deleted(spark: SparkSession, ws: Workspace) -> None:
    """Seed 001's example 2 exactly as the seed names the tombstone key: ``deleted``."""
    ws.dataset("seed", SEED.replace("is_deleted", "deleted"))
    ws.data(
        "in/seed/Order/part.json",
        {"order_id": "2", "ts": 100},
        {"order_id": "2", "ts": 200, "deleted": True},
    )
    ws.requests(request("tx-2", upsert("./data/in"), dataset="seed"))
    job = ws.run_once(spark)
    result = outcome(spark, ws, "tx-2")
    assert result.status is Status.COMMITTED, result.error
    assert current(job.layout.table("seed", "seed.Order")) == {}


def test_rows_of_a_key_in_more_files_than_spark_reads_in_one_partition(
    spark: SparkSession, ws: Workspace
) -> None:
    """120 files of one JSON load, one row each of one key, all with the same watermark: the
    last file by name wins (seed 001: on a tie the later row wins). Spark reads ~32 small files
    to a partition and the sink then coalesces the records into as many partitions as cores
    (``jsonfiles._few_partitions``): the files' order must not depend on where they were read."""
    ws.dataset("seed", SEED)
    for n in range(120):
        write(ws, "many", "JSON", row("o-1", 100, f"file {n:03d}"), name=f"part-{n:03d}")
    write(ws, "many", "JSON", row("o-2", 100, "first"), row("o-2", 100, "second"), name="part-z")
    ws.requests(request("t-many", upsert("./data/many"), dataset="seed"))
    job = ws.run_once(spark)
    result = outcome(spark, ws, "t-many")
    assert result.status is Status.COMMITTED, result.error
    rows = current(job.layout.object_table("seed", "seed.Order").current)
    # Every row of a tie applies in turn: o-1 changed 120 times, o-2 twice.
    assert rows == {"o-1": (120, 100, "file 119"), "o-2": (2, 100, "second")}
    assert counts(result) == {"inserted": 2, "updated": 120}
