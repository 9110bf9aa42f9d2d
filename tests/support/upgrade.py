"""The upgrade scenario: what an earlier release leaves — a change feed's tables, its ledger, a
source transaction waiting in ``_system/pending``, the checkpoint's Kafka offsets — and what this
release must do with it when it starts on them.

The first half (``first_half``) is run once by the earlier release and kept in the tree
(``tests/fixtures/upgrade/<release>/``: its warehouse and checkpoints); the test
(tests/integration/test_upgrade.py) copies it, produces the same first-half records to the
test's broker (a fresh topic numbers them alike, so the checkpoint's offsets point where they
did), then the second half, and runs this release on them.

To make a fixture with an earlier release (this file only needs ``tests.support`` helpers that
release had)::

    git worktree add /tmp/prev <commit>
    cp tests/support/upgrade.py /tmp/prev/tests/support/
    cd /tmp/prev && PYTHONPATH=. <venv>/bin/python -m tests.support.upgrade <out dir>

then copy ``<out dir>/warehouse`` and ``<out dir>/checkpoints`` to the fixture folder.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.support import Workspace
from tests.support.datasets import SHOP
from tests.support.debezium import Topics

PREFIX = "upgrade01"
"""The feed's topic prefix: the checkpoint names its topics."""
CUST, ORD = "public.customers", "public.orders"


def config(ws: Workspace, bootstrap: str) -> Any:
    """The job's config (the same for both releases; paths relative to the workspace). The
    fixture's waiting transaction is older than any ``max_wait`` by the time a test reads it: the
    feed waits ten years."""
    ws.dataset("shop", SHOP)
    return ws.config(
        landing={},
        kafka={
            "bootstrap": bootstrap,
            "transactions_topic": f"{PREFIX}.requests",
            "outcomes_topic": f"{PREFIX}.outcomes",
            "change_feeds": [
                {
                    "name": "pg",
                    "dataset": "shop",
                    "topic_prefix": PREFIX,
                    "tables": {"shop.Customer": CUST, "shop.Order": ORD},
                    "max_wait": "5256000 minutes",
                }
            ],
        },
    )


def topics_to_create() -> list[str]:
    return [f"{PREFIX}.requests", f"{PREFIX}.outcomes"]


def halves() -> tuple[Topics, Topics]:
    """The records of the first half (a snapshot of two customers; 700 applied; 701's END and
    its customer's event, its order's event not yet; 702 after it) and of the second (701's
    order, then 703)."""
    first = Topics(prefix=PREFIX)
    first.event(CUST, "r", {"id": 1, "name": "Ada", "balance": "100.00"})
    first.event(CUST, "r", {"id": 2, "name": "Bob", "balance": "5.50"})
    first.transaction(
        "700:1",
        [
            (CUST, "u", {"id": 1, "name": "Ada", "balance": "80.00"}),
            (ORD, "c", {"id": 10, "customer_id": 1, "amount": "20.00"}),
        ],
    )
    first.begin("701:5")
    first.event(CUST, "u", {"id": 2, "name": "Bob", "balance": "0.50"}, tx="701:5", order=1)
    second = Topics(prefix=PREFIX, offsets=dict(first.offsets), lsn=first.lsn)
    second.event(
        ORD, "c", {"id": 11, "customer_id": 2, "amount": "5.00"}, tx="701:9", order=2, table_order=1
    )
    first.end("701", {CUST: 1, ORD: 1}, end_id="701:20")
    first.transaction("702:30", [(CUST, "d", {"id": 1, "name": "Ada", "balance": "80.00"})])
    second.lsn = first.lsn  # after 702, whose records the broker has before 703's
    for topic, offset in first.offsets.items():
        second.offsets[topic] = max(second.offsets.get(topic, 0), offset)
    second.transaction("703:40", [(CUST, "c", {"id": 3, "name": "Cy", "balance": "1.00"})])
    return first, second


def first_half(out: Path) -> None:
    """Run the first half with the release checked out here, into ``out`` (a broker and a
    Spark session of its own)."""
    from streaming.core.config import SparkConfig
    from streaming.runtime.session import build_session
    from tests.support.debezium import send
    from tests.support.kafka_broker import LocalKafkaBroker

    out.mkdir(parents=True)
    broker = LocalKafkaBroker(out / ".kafka")
    broker.start()
    spark = build_session(SparkConfig(app_name="cdc-upgrade-fixture", shuffle_partitions=2))
    try:
        ws = Workspace(out)
        broker.create_topics(topics_to_create())
        cfg = config(ws, broker.bootstrap)
        first, _ = halves()
        send(broker.bootstrap, first.take())
        ws.run_once(spark, cfg).close()
    finally:
        spark.stop()
        broker.stop()


if __name__ == "__main__":
    first_half(Path(sys.argv[1]))
