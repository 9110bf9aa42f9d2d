"""Builders of Debezium change events (the Postgres connector's JSON envelope) and of a feed's
records, for tests that need exact events rather than a running connector (those are in
tests/integration/test_debezium_pipeline.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from streaming.core.changefeed import Feed, Received

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TS_MS_BASE = 1_700_000_000_000
"""An event's ``source.ts_ms`` is this plus its LSN: commit times in the LSNs' order."""


def feed(
    tables: Mapping[str, str] | None = None,
    *,
    prefix: str = "pg",
    metadata: bool = True,
    max_wait: timedelta = timedelta(minutes=10),
    max_pending_events: int = 100_000,
    time_property: str | None = None,
) -> Feed:
    """A Debezium feed of dataset ``shop``: source table → schema (``time_property``: the
    property its events fill with the source's commit time)."""
    tables = dict(tables or {"public.customers": "shop.Customer", "public.orders": "shop.Order"})
    return Feed(
        "pg",
        "shop",
        "debezium",
        tables,
        {f"{prefix}.{t}": t for t in tables},
        f"{prefix}.transaction" if metadata else None,
        "sourcePosition",
        max_wait,
        max_pending_events,
        time_property=time_property,
    )


def wrap(payload: Any, schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON converter's envelope with ``schemas.enable=true``."""
    return {"schema": dict(schema or {"type": "struct", "fields": []}), "payload": payload}


@dataclass
class Topics:
    """Records of a feed's topics, offsets counted per topic, as a connector would write them."""

    prefix: str = "pg"
    at: datetime = T0
    offsets: dict[str, int] = field(default_factory=dict)
    records: list[Received] = field(default_factory=list)
    lsn: int = 1000
    wrapped: bool = False

    def _add(self, topic: str, key: Any, value: Any) -> Received:
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        record = Received(
            topic,
            0,
            offset,
            None if key is None else json.dumps(key).encode(),
            None if value is None else json.dumps(value).encode(),
            self.at,
            self.at,
        )
        self.records.append(record)
        return record

    def event(
        self,
        table: str,
        op: str,
        row: Mapping[str, Any],
        *,
        tx: str | None = None,
        order: int = 1,
        table_order: int | None = None,
        lsn: int | None = None,
        snapshot: str | None = None,
    ) -> Received:
        """A data event of ``table`` (``public.customers``): ``row`` is ``after`` (c, u, r)
        or ``before`` (d); its key is the row's ``id``. ``snapshot``: its ``source.snapshot``
        (``true``, ``first``, ``last``, …; absent when None)."""
        self.lsn += 10
        source: dict[str, Any] = {"connector": "postgresql"}
        source["lsn"] = self.lsn if lsn is None else lsn
        source["ts_ms"] = TS_MS_BASE + source["lsn"]  # the source's commit time
        if snapshot is not None:
            source["snapshot"] = snapshot
        value: dict[str, Any] = {
            "before": dict(row) if op == "d" else None,
            "after": None if op == "d" else dict(row),
            "source": source,
            "op": op,
            "ts_ms": 0,
            "transaction": (
                None
                if tx is None
                else {
                    "id": tx,
                    "total_order": order,
                    "data_collection_order": order if table_order is None else table_order,
                }
            ),
        }
        key = {"id": row["id"]}
        if self.wrapped:
            return self._add(f"{self.prefix}.{table}", wrap(key), wrap(value))
        return self._add(f"{self.prefix}.{table}", key, value)

    def tombstone(self, table: str, id_: Any) -> Received:
        return self._add(f"{self.prefix}.{table}", {"id": id_}, None)

    def begin(self, tx: str) -> Received:
        value = {"status": "BEGIN", "id": tx, "event_count": None, "data_collections": None}
        return self._add(f"{self.prefix}.transaction", {"id": tx}, value)

    def end(self, tx: str, counts: Mapping[str, int], *, end_id: str | None = None) -> Received:
        value = {
            "status": "END",
            "id": end_id or tx,
            "event_count": sum(counts.values()),
            "data_collections": [
                {"data_collection": t, "event_count": n} for t, n in counts.items()
            ],
        }
        return self._add(f"{self.prefix}.transaction", {"id": tx}, value)

    def transaction(self, tx: str, changes: list[tuple[str, str, Mapping[str, Any]]]) -> None:
        """BEGIN, the changes (table, op, row) in order, END with the counts."""
        self.begin(tx)
        counts: dict[str, int] = {}
        for order, (table, op, row) in enumerate(changes, start=1):
            counts[table] = counts.get(table, 0) + 1
            self.event(table, op, row, tx=tx, order=order, table_order=counts[table])
        self.end(tx, counts)

    def take(self) -> list[Received]:
        """The records written since the last take."""
        taken, self.records = self.records, []
        return taken


def send(bootstrap: str, records: list[Received]) -> None:
    """Produce the records to the broker (a None value: a tombstone), in order, acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failed: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failed.append(str(error))

    for r in records:
        while True:
            try:
                producer.produce(
                    r.topic, value=r.value, key=r.key, partition=0, on_delivery=delivered
                )
                break
            except BufferError:  # the client's queue is full: let deliveries drain it
                producer.poll(0.5)
    assert producer.flush(120) == 0 and not failed, failed
