"""Seed 003's extended write format: ``$change_type``, ``$value:col``, ``$flags:col``."""

from __future__ import annotations

from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from tests.support import Workspace, request

pytestmark = pytest.mark.spark

USERS = """\
users.User:
  properties:
    age: {type: integer}
    balance: {type: integer}
"""


def action(operation: str, location: str, fmt: str, **extra: Any) -> dict[str, Any]:
    return {"operation": operation, "locationUri": location, "format": fmt, **extra}


def rows(path: str) -> list[tuple[Any, ...]]:
    table = deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()
    return sorted((r["id"], r["version"], r["age"], r["balance"]) for r in table)


def setup(ws: Workspace) -> None:
    ws.dataset("users", USERS)
    ws.data(
        "init/users/User/part.json",
        {"user_name": "vasya", "age": 30, "balance": 10},
        {"user_name": "petya", "age": 41, "balance": 5},
    )


def test_seed_003_delete_vasya_and_balance_aggregate_with_age_kept_json(
    spark: SparkSession, ws: Workspace
) -> None:
    setup(ws)
    ws.data(
        "ext/users/User/part.json",
        # to delete the row: {"user_name"="vasya"; "$change_type"=1}
        {"user_name": "vasya", "$change_type": 1},
        # to update the balance and keep the age: age missing (1), balance aggregate (2)
        {
            "user_name": "petya",
            "$change_type": 0,
            "$flags:age": 1,
            "$value:balance": 100500,
            "$flags:balance": 2,
        },
    )
    mapping = {"columnMapping": {"id": "user_name"}}
    ws.requests(
        request("tx-init", action("UPSERT", "./data/init", "JSON", **mapping), dataset="users"),
        request("tx-ext", action("UPSERT", "./data/ext", "EXTENDED", **mapping), dataset="users"),
    )
    job = ws.run_once(spark)
    assert rows(job.layout.table("users", "users.User")) == [("petya", 2, 41, 100505)]


def test_extended_format_in_parquet_overwrites_unflagged_columns(
    spark: SparkSession, ws: Workspace
) -> None:
    setup(ws)
    folder = ws.root / "data" / "extpq" / "users" / "User"
    folder.mkdir(parents=True)
    table = pa.table(
        {
            "user_name": ["vasya"],
            "$change_type": pa.array([0], pa.int64()),
            "$value:age": pa.array([31], pa.int64()),
            "$value:balance": pa.array([None], pa.int64()),
        }
    )
    pq.write_table(table, folder / "part.parquet")
    mapping = {"columnMapping": {"id": "user_name"}}
    ws.requests(
        request("tx-init", action("UPSERT", "./data/init", "JSON", **mapping), dataset="users"),
        request("tx-ext", action("UPSERT", "./data/extpq", "EXTENDED", **mapping), dataset="users"),
    )
    job = ws.run_once(spark)
    # no flags: every column is overwritten, a missing value writes NULL (seed 003)
    assert rows(job.layout.table("users", "users.User")) == [
        ("petya", 1, 41, 5),
        ("vasya", 2, 31, None),
    ]
