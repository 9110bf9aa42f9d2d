"""Upgrading: this release started on the checkpoint and tables an earlier release left
(tests/fixtures/upgrade/<release>/, made by tests/support/upgrade.py with that release checked
out) goes on from them — the checkpoint's Kafka offsets, the ledger, a source transaction
waiting in ``_system/pending``, the tables' versions — applying each source transaction once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import deltalake
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from streaming.storage.maintain import maintain
from tests.support import Workspace
from tests.support.debezium import send
from tests.support.upgrade import PREFIX, config, halves, topics_to_create

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

FIXTURES = Path(__file__).parents[1] / "fixtures" / "upgrade"
RELEASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def _table(ws: Workspace, *parts: str) -> list[dict[str, Any]]:
    table = deltalake.DeltaTable(str(ws.root.joinpath("warehouse", *parts)))
    return list(table.to_pyarrow_table().to_pylist())


@pytest.mark.parametrize("release", RELEASES)
def test_a_release_goes_on_from_what_an_earlier_one_left(
    spark: SparkSession, tmp_path: Path, kafka_broker: Any, release: str
) -> None:
    assert RELEASES, f"no fixture in {FIXTURES}"
    ws = Workspace(tmp_path)
    for part in ("warehouse", "checkpoints"):
        shutil.copytree(FIXTURES / release / part, tmp_path / part)
    before = {json.loads(r["outcome"])["transactionId"] for r in _table(ws, "_system", "outcomes")}
    assert before == {f"debezium:pg:{PREFIX}.public.customers[0]@0-1", "debezium:pg:700:1"}
    assert len(_table(ws, "_system", "pending")) == 6  # 701 and 702 wait for 701's order
    versions = {
        t: deltalake.DeltaTable(str(tmp_path / "warehouse" / "shop" / "shop" / t)).version()
        for t in ("Customer", "Order")
    }

    # The broker the earlier release read: the same records at the same offsets, then the rest.
    kafka_broker.create_topics(topics_to_create())
    first, second = halves()
    send(kafka_broker.bootstrap, first.take())
    send(kafka_broker.bootstrap, second.take())
    ws.run_once(spark, config(ws, kafka_broker.bootstrap)).close()

    found = [json.loads(r["outcome"]) for r in _table(ws, "_system", "outcomes")]
    fresh = sorted((o["transactionId"], o["status"]) for o in found if o["batchId"] > 0)
    # 701 (completed by its order, read from the earlier release's pending table), 702 and 703,
    # each once; nothing the earlier release applied comes again (the checkpoint's offsets).
    assert fresh == [
        ("debezium:pg:701:20", "COMMITTED"),
        ("debezium:pg:702:30", "COMMITTED"),
        ("debezium:pg:703:40", "COMMITTED"),
    ]
    assert len(found) == len(before) + 3
    ledger = [r["transaction_id"] for r in _table(ws, "_system", "transactions")]
    assert sorted(ledger) == sorted(set(ledger)) and len(ledger) == 5
    customers = {r["id"]: r for r in _table(ws, "shop", "shop", "Customer")}
    assert {k: (r["balance"], r["version"]) for k, r in customers.items()} == {
        "2": (0.5, 2),
        "3": (1.0, 1),
    }
    assert sorted(r["id"] for r in _table(ws, "shop", "shop", "Order")) == ["10", "11"]
    for table, version in versions.items():
        path = tmp_path / "warehouse" / "shop" / "shop" / table
        assert deltalake.DeltaTable(str(path)).version() > version  # written on, not anew
    assert _table(ws, "_system", "pending") == []

    # Timestamps (issue 57): the earlier release wrote them as INT96, this one as INT64
    # microseconds; `cdc maintain --cluster` rewrites every file of a current table as micros.
    customer = tmp_path / "warehouse" / "shop" / "shop" / "Customer"
    kinds = _timestamp_kinds(customer)
    assert "INT96" in kinds.values() and "INT64" in kinds.values(), kinds
    old = {f for f, kind in kinds.items() if kind == "INT96"}
    assert old <= _files_of_versions(customer, max(versions["Customer"], 0))
    maintain(
        spark,
        [str(customer)],
        optimize=True,
        vacuum_hours=None,
        current=[str(customer)],
        cluster=True,
    )
    live = deltalake.DeltaTable(str(customer)).file_uris()
    assert {_timestamp_kinds(customer)[Path(f).name] for f in live} == {"INT64"}


def _timestamp_kinds(table: Path) -> dict[str, str]:
    """Every Parquet file of ``table``'s folder → the physical type of its ``created`` column."""
    kinds = {}
    for f in table.glob("*.parquet"):
        schema = pq.ParquetFile(f).schema
        kinds[f.name] = schema.column(schema.names.index("created")).physical_type
    return kinds


def _files_of_versions(table: Path, version: int) -> set[str]:
    """The data files the table's log added up to ``version``."""
    added: set[str] = set()
    for commit in sorted((table / "_delta_log").glob("*.json")):
        if int(commit.stem) > version:
            break
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                added.add(Path(action["add"]["path"]).name)
    return added
