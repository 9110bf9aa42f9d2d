"""Change feeds through the job (issue 35): Debezium events on the test broker, built exactly
(tests/support/debezium.py) → ``cdc run --once`` → Delta tables, outcomes, ``_system/pending``.
The real Postgres → Debezium pipeline is tests/integration/test_debezium_end_to_end.py."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core.config import AppConfig
from streaming.core.faults import CRASH_ENV
from tests.support import Workspace
from tests.support.cdc import cdc_env, run_cdc
from tests.support.datasets import SHOP
from tests.support.debezium import Topics, send
from tests.support.side_by_side import side_by_side, taken

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

CUST, ORD = "public.customers", "public.orders"


def config(ws: Workspace, broker: Any, prefix: str, **feed: object) -> AppConfig:
    """The job's config; its requests and outcomes topics made (the feed's come with their
    first record)."""
    broker.create_topics([f"{prefix}.requests", f"{prefix}.outcomes"])
    bootstrap = broker.bootstrap
    ws.dataset("shop", SHOP)
    return ws.config(
        landing={},
        kafka={
            "bootstrap": bootstrap,
            "transactions_topic": f"{prefix}.requests",
            "outcomes_topic": f"{prefix}.outcomes",
            "change_feeds": [
                {
                    "name": "pg",
                    "dataset": "shop",
                    "topic_prefix": prefix,
                    "tables": {"shop.Customer": CUST, "shop.Order": ORD},
                    **feed,
                }
            ],
        },
    )


def rows(ws: Workspace, table: str) -> dict[str, dict[str, object]]:
    """The current rows of ``shop.<table>`` by id, read by delta-rs."""
    path = ws.root / "warehouse" / "shop" / "shop" / table
    found = deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return {r["id"]: r for r in found}


def outcomes(ws: Workspace) -> list[dict[str, Any]]:
    table = deltalake.DeltaTable(str(ws.root / "warehouse" / "_system" / "outcomes"))
    return [json.loads(r["outcome"]) for r in table.to_pyarrow_table().to_pylist()]


def pending(ws: Workspace) -> int:
    path = ws.root / "warehouse" / "_system" / "pending"
    return deltalake.DeltaTable(str(path)).to_pyarrow_table().num_rows


@pytest.fixture
def prefix() -> str:
    return f"db{uuid.uuid4().hex[:8]}"


def test_snapshot_then_source_transactions_apply_whole_and_in_commit_order(
    spark: SparkSession, ws: Workspace, kafka_broker: object, prefix: str
) -> None:
    bootstrap: str = kafka_broker.bootstrap  # type: ignore[attr-defined]
    cfg = config(ws, kafka_broker, prefix)
    topics = Topics(prefix=prefix)
    topics.event(CUST, "r", {"id": 1, "name": "Ada", "balance": "100.00"})
    topics.event(CUST, "r", {"id": 2, "name": "Bob", "balance": "5.50"})
    topics.transaction(
        "700:1",
        [
            (CUST, "u", {"id": 1, "name": "Ada", "balance": "80.00"}),
            (ORD, "c", {"id": 10, "customer_id": 1, "amount": "20.00"}),
        ],
    )
    # The next transaction's END arrives, its order's event not yet.
    topics.begin("701:5")
    topics.event(CUST, "u", {"id": 2, "name": "Bob", "balance": "0.50"}, tx="701:5", order=1)
    late = Topics(prefix=prefix, offsets=dict(topics.offsets), lsn=topics.lsn)
    late.event(
        ORD, "c", {"id": 11, "customer_id": 2, "amount": "5.00"}, tx="701:9", order=2, table_order=1
    )
    topics.end("701", {CUST: 1, ORD: 1}, end_id="701:20")
    topics.transaction("702:30", [(CUST, "d", {"id": 1, "name": "Ada", "balance": "80.00"})])
    send(bootstrap, topics.take())
    ws.run_once(spark, cfg)

    customers = rows(ws, "Customer")
    # The snapshot and 700 are in; 701 waits for its order, and 702, committed after it, too.
    assert {k: r["balance"] for k, r in customers.items()} == {"1": 80.0, "2": 5.5}
    assert customers["1"]["version"] == 2
    assert set(rows(ws, "Order")) == {"10"}
    assert {o["transactionId"]: o["batchId"] for o in outcomes(ws)} == {
        f"debezium:pg:{prefix}.public.customers[0]@0-1": 0,
        "debezium:pg:700:1": 0,
    }
    assert all(o["status"] == "COMMITTED" for o in outcomes(ws))
    assert pending(ws) == 6  # 701: BEGIN, its event, END; 702: BEGIN, its event, END

    send(bootstrap, late.take())
    ws.run_once(spark, cfg)
    customers = rows(ws, "Customer")
    assert {k: r["balance"] for k, r in customers.items()} == {"2": 0.5}
    assert set(rows(ws, "Order")) == {"10", "11"}
    last = {o["transactionId"]: o for o in outcomes(ws) if o["batchId"] == 1}
    assert sorted(last) == ["debezium:pg:701:20", "debezium:pg:702:30"]
    assert {o["status"] for o in last.values()} == {"COMMITTED"}
    assert [a["target"] for a in last["debezium:pg:701:20"]["actions"]] == [
        "shop.Customer",
        "shop.Order",
    ]
    # 702 deleted customer 1 after 701 (commit order): its tombstone is the key's third version.
    history = deltalake.DeltaTable(
        str(ws.root / "warehouse" / "shop" / "_history" / "shop" / "Customer")
    )
    one = sorted(
        (r["version"], r["__deleted"])
        for r in history.to_pyarrow_table().to_pylist()
        if r["id"] == "1"
    )
    assert one == [(1, False), (2, False), (3, True)]
    assert pending(ws) == 0


def test_an_incomplete_transaction_is_rejected_after_max_wait_and_kept_in_quarantine(
    spark: SparkSession, ws: Workspace, kafka_broker: object, prefix: str
) -> None:
    bootstrap: str = kafka_broker.bootstrap  # type: ignore[attr-defined]
    cfg = config(ws, kafka_broker, prefix, max_wait="0 seconds")
    topics = Topics(prefix=prefix)
    topics.begin("800:1")
    topics.event(CUST, "c", {"id": 1, "name": "Ada", "balance": "1.00"}, tx="800:1")
    topics.end("800", {CUST: 1, ORD: 1}, end_id="800:9")  # the order's event never comes
    send(bootstrap, topics.take())
    ws.run_once(spark, cfg)
    assert outcomes(ws) == [] and pending(ws) == 3
    topics.transaction("801:20", [(CUST, "c", {"id": 2, "name": "Bob", "balance": "2.00"})])
    send(bootstrap, topics.take())
    ws.run_once(spark, cfg)
    got = {o["transactionId"]: o for o in outcomes(ws)}
    assert got["debezium:pg:800:9"]["status"] == "REJECTED"
    assert got["debezium:pg:800:9"]["error"]["code"] == "SOURCE_TRANSACTION_INCOMPLETE"
    assert got["debezium:pg:801:20"]["status"] == "COMMITTED"
    assert set(rows(ws, "Customer")) == {"2"}
    quarantine = deltalake.DeltaTable(str(ws.root / "warehouse" / "_system" / "quarantine"))
    (kept,) = quarantine.to_pyarrow_table().to_pylist()
    events = json.loads(kept["payload"])["sourceEvents"]
    assert [e["offset"] for e in events if e["topic"] == f"{prefix}.transaction"] == [0, 1]
    assert pending(ws) == 0


CRASH_POINTS = ("between_commits", "after_ledger")


@dataclass
class Crashed:
    """A ``cdc run --once`` killed at a crash point in a batch holding a complete source
    transaction and half of the next: its workspace, config, topic prefix, the topics' state
    (for the rest of the half-read transaction) and the killed process."""

    ws: Workspace
    cfg: AppConfig
    prefix: str
    topics: Topics
    run: subprocess.CompletedProcess[str]


def _crash(ws: Workspace, broker: Any, point: str) -> Crashed:
    prefix = f"db{uuid.uuid4().hex[:8]}"
    cfg = config(ws, broker, prefix)
    (ws.root / "cdc.json").write_text(cfg.model_dump_json())
    topics = Topics(prefix=prefix)
    topics.event(CUST, "r", {"id": 1, "name": "Ada", "balance": "100.00"})
    topics.event(CUST, "r", {"id": 2, "name": "Bob", "balance": "5.50"})
    topics.transaction(
        "900:1",
        [
            (CUST, "u", {"id": 1, "name": "Ada", "balance": "90.00"}),
            (ORD, "c", {"id": 10, "customer_id": 1, "amount": "10.00"}),
        ],
    )
    topics.begin("901:5")
    topics.event(CUST, "u", {"id": 2, "name": "Bob", "balance": "0.50"}, tx="901:5", order=1)
    send(broker.bootstrap, topics.take())
    env = cdc_env({CRASH_ENV: point}, drop=(CRASH_ENV, "CDC_"))
    crashed = run_cdc("run", "--once", "--config", "cdc.json", cwd=ws.root, env=env)
    return Crashed(ws, cfg, prefix, topics, crashed)


@pytest.fixture(scope="module")
def crashes(
    tmp_path_factory: pytest.TempPathFactory, kafka_broker: object
) -> dict[str, Crashed | BaseException]:
    """Each crash point's killed ``cdc run --once``, side by side in threads of their own
    (``tests.support.side_by_side``), each a cold process on a workspace and topics of its own.
    On 2 cores this saves nothing measurable (each cold run is CPU to its crash point: 130 s
    for the module one after another, 139 s side by side, one clean-clone run each); it takes
    less where there are cores to spare. A run's failure is raised by its own test."""
    return side_by_side(
        {
            point: partial(_crash, Workspace(tmp_path_factory.mktemp(point)), kafka_broker, point)
            for point in CRASH_POINTS
        }
    )


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_with_a_source_transaction_half_read_applies_each_once(
    spark: SparkSession,
    kafka_broker: object,
    crashes: dict[str, Crashed | BaseException],
    point: str,
) -> None:
    """``cdc run`` killed in a batch that holds a complete transaction and half of the next
    (its END and an event still to come): after the restart, the replayed batch and the next
    one apply each source transaction once, whole. The restart runs in this process, on the
    shared session, as tests/integration/test_crash_points.py's do: a new job on the same config,
    checkpoint and warehouse, nothing of the killed process left but what it wrote."""
    found = taken(crashes, point)
    ws, cfg, prefix, topics, crashed = found.ws, found.cfg, found.prefix, found.topics, found.run
    bootstrap: str = kafka_broker.bootstrap  # type: ignore[attr-defined]
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert f"{CRASH_ENV}={point}: killing the driver" in crashed.stderr, crashed.stderr[-3000:]
    rest = Topics(prefix=prefix, offsets=dict(topics.offsets), lsn=topics.lsn)
    rest.event(
        ORD, "c", {"id": 11, "customer_id": 2, "amount": "5.00"}, tx="901:9", order=2, table_order=1
    )
    rest.end("901", {CUST: 1, ORD: 1}, end_id="901:20")
    send(bootstrap, rest.take())
    ws.run_once(spark, cfg)

    got = outcomes(ws)
    assert sorted((o["transactionId"], o["status"]) for o in got) == sorted(
        [
            (f"debezium:pg:{prefix}.public.customers[0]@0-1", "COMMITTED"),
            ("debezium:pg:900:1", "COMMITTED"),
            ("debezium:pg:901:20", "COMMITTED"),
        ]
    )
    ledger = deltalake.DeltaTable(str(ws.root / "warehouse" / "_system" / "transactions"))
    ids = [r["transaction_id"] for r in ledger.to_pyarrow_table().to_pylist()]
    assert sorted(ids) == sorted(o["transactionId"] for o in got)  # each once
    customers = rows(ws, "Customer")
    assert {k: (r["balance"], r["version"]) for k, r in customers.items()} == {
        "1": (90.0, 2),
        "2": (0.5, 2),
    }
    assert set(rows(ws, "Order")) == {"10", "11"}
    assert pending(ws) == 0
