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
import pytest
from pyspark.sql import SparkSession

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
