"""A DMS landing zone for tests: the sales dataset, change files (AWS DMS-style Parquet with an
``Op`` column) dropped with increasing modification times, and what the job made of them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from streaming.core.config import AppConfig
from streaming.core.outcomes import Outcome
from streaming.storage.tables import read_table
from tests.support import Workspace

SALES = """\
sales.Order:
  properties:
    status: {type: string}
    amount: {type: integer}
    ts: {type: integer}
  watermark: [ts]
sales.Shipment:
  properties:
    state: {type: string}
    day: {type: integer}
    seq: {type: integer}
    gone: {type: string}
  watermark: [day, seq]
  tombstone: {column: gone, value: "Y"}
"""
ORDER = {"ID": pa.string(), "STATUS": pa.string(), "AMOUNT": pa.int64(), "TS": pa.int64()}


def parquet_bytes(rows: list[dict[str, Any]], types: dict[str, Any]) -> bytes:
    """A DMS file's content: ``types``' columns, plus ``Op`` (string) if a row has one."""
    fields = dict(types)
    if any("Op" in r for r in rows):
        fields["Op"] = pa.string()
    table = pa.table({c: [r.get(c) for r in rows] for c in fields}, schema=pa.schema(fields))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


class Zone:
    """The DMS landing zone of a workspace: files get increasing modification times."""

    def __init__(self, ws: Workspace) -> None:
        self.root = ws.root / "landing" / "dms"
        self.count = 0

    def folder(self, schema: str) -> Path:
        folder = self.root / "sales" / Path(*schema.split("."))
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def put(self, schema: str, name: str, content: bytes) -> Path:
        """A file of any ``content`` (broken ones too) in ``schema``'s folder."""
        path = self.folder(schema) / name
        path.write_bytes(content)
        self.count += 1
        stamp = 1_700_000_000 + 60 * self.count
        os.utime(path, (stamp, stamp))
        return path

    def drop(
        self, schema: str, name: str, rows: list[dict[str, Any]], types: dict[str, Any]
    ) -> Path:
        return self.put(schema, name, parquet_bytes(rows, types))


def order(
    id_: str, ts: int | None, status: str, op: str | None = None, amount: int = 10
) -> dict[str, Any]:
    row = {"ID": id_, "STATUS": status, "AMOUNT": amount, "TS": ts}
    return {**row, "Op": op} if op else row


def current(path: str, *columns: str) -> list[tuple[Any, ...]]:
    rows = deltalake.DeltaTable(path).to_pyarrow_table(columns=list(columns)).to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in rows)


def outcomes(spark: SparkSession, ws: Workspace) -> list[Outcome]:
    rows = read_table(spark, str(ws.root / "warehouse" / "_system" / "outcomes")).collect()
    return sorted(
        (Outcome.from_json(r["outcome"]) for r in rows), key=lambda o: (o.batch_id, o.source)
    )


def dms_workspace(ws: Workspace) -> Zone:
    ws.dataset("sales", SALES)
    return Zone(ws)


def config(ws: Workspace) -> AppConfig:
    return ws.config(landing={"dms": "./landing/dms"})
