"""A Debezium PostgreSQL connector's initial snapshot, on Kafka, fast: the records of
``Topics.event(table, "r", row, lsn=..., snapshot=...)`` (tests/support/debezium.py; the JSON
converter without the schema wrapper), byte for byte, for millions of rows, and a producer that
sends them (and any other records) batched and compressed.

Shared by the CatchUp benchmark (``bench/catchup.py``) and the driver-memory test
(``tests/integration/test_feed_driver_memory.py``): one generator for both.

The snapshot: table after table, ``rows`` ``op: r`` reads each (keys ``<prefix><n:09d>``, ``n`` in
``0..rows-1``, values ``snapshot_row(n)``), no ``transaction`` block, every read at the one LSN
the snapshot began at (``SNAPSHOT_LSN``: before every change a fresh ``Topics`` numbers after
it). ``source.snapshot`` is ``first`` on the very first read, ``last`` on the very last of the
whole snapshot and ``true`` on the others (Debezium 3.x also writes ``first_in_data_collection``
and ``last_in_data_collection``; ``true`` stands for them here).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from tests.support.debezium import TS_MS_BASE, Topics

SNAPSHOT_LSN = Topics().lsn
"""The LSN of every snapshot read: a fresh ``Topics``' starting LSN (1000), so every change it
writes after (1010, 1020, ...) comes after the snapshot."""
KEY_PREFIX = "a"
"""Keys ``a000000000``, ``a000000001``, ...: those of ``bench.data.key(W2_PREFIX, n)``, which the
Events workload's transactions update and delete."""
STATUSES = ("new", "active", "paused", "closed", "review")
PROPS = ("owner", "balance", "status")

Record = tuple[str, bytes | None, bytes | None]
"""(topic, key, value) as produced; a None value is a Kafka tombstone."""


def key(number: int, prefix: str = KEY_PREFIX) -> str:
    return f"{prefix}{number:09d}"


def snapshot_row(number: int, prefix: str = KEY_PREFIX) -> dict[str, Any]:
    """The snapshot's row of key ``number`` (the same in every table): id and ``PROPS``."""
    return {
        "id": key(number, prefix),
        "owner": f"owner-{number * 7919 % 50_000}",
        "balance": number * 104_729 % 1_000_000,
        "status": STATUSES[number % len(STATUSES)],
    }


def snapshot_values(number: int) -> tuple[Any, ...]:
    """``PROPS`` of ``snapshot_row(number)``."""
    row = snapshot_row(number)
    return tuple(row[p] for p in PROPS)


def snapshot_mark(index: int, total: int) -> str:
    """``source.snapshot`` of the snapshot's ``index``-th read of ``total``."""
    if index == 0:
        return "first"
    return "last" if index == total - 1 else "true"


def snapshot_records(
    prefix: str,
    tables: Sequence[str],
    rows: int,
    *,
    lsn: int = SNAPSHOT_LSN,
    key_prefix: str = KEY_PREFIX,
) -> Iterator[Record]:
    """The snapshot's records of ``tables`` (``public.accounts``, ...), ``rows`` each, in the
    connector's order (table after table, keys ascending), on ``<prefix>.<table>``. What
    ``Topics.event(table, "r", snapshot_row(n), lsn=lsn, snapshot=mark)`` writes, built from a
    template (about 1 µs a record instead of 10)."""
    total = rows * len(tables)
    index = 0
    for table in tables:
        topic = f"{prefix}.{table}"
        head = '{"before": null, "after": {"id": "'
        for n in range(rows):
            ident = f"{key_prefix}{n:09d}"
            mark = "first" if index == 0 else "last" if index == total - 1 else "true"
            value = (
                f'{head}{ident}", "owner": "owner-{n * 7919 % 50_000}", "balance": '
                f'{n * 104_729 % 1_000_000}, "status": "{STATUSES[n % 5]}"}}, "source": '
                f'{{"connector": "postgresql", "lsn": {lsn}, "ts_ms": {TS_MS_BASE + lsn}, '
                f'"snapshot": "{mark}"}}, '
                '"op": "r", "ts_ms": 0, "transaction": null}'
            )
            yield topic, f'{{"id": "{ident}"}}'.encode(), value.encode()
            index += 1


def expected_count(rows: int, touched: Mapping[str, tuple[Any, ...] | None]) -> int:
    """Rows of a table after its snapshot of ``rows`` rows and changes that leave the keys of
    ``touched`` (id → values, None: deleted) as they say."""
    inside = sum(1 for k in touched if snapshot_number(k, rows) is not None)
    return rows - inside + sum(1 for v in touched.values() if v is not None)


def snapshot_number(ident: str, rows: int, prefix: str = KEY_PREFIX) -> int | None:
    """The number of a snapshot key (``a000000042`` → 42), or None when the snapshot of
    ``rows`` rows has no such key."""
    digits = ident[len(prefix) :]
    if not ident.startswith(prefix) or len(digits) != 9 or not digits.isdigit():
        return None
    number = int(digits)
    return number if number < rows else None


def compare_rows(
    ids: Sequence[str],
    values: Sequence[tuple[Any, ...]],
    rows: int,
    touched: Mapping[str, tuple[Any, ...] | None],
) -> dict[str, Any]:
    """A table's live rows (``ids`` and their ``PROPS`` values, one id once) against the state
    after the snapshot of ``rows`` rows and the changes ``touched`` (id → values or None)."""
    expected = expected_count(rows, touched)
    seen = differ = extra = 0
    examples: list[str] = []
    for ident, got in zip(ids, values, strict=True):
        if ident in touched:
            want = touched[ident]
        else:
            number = snapshot_number(ident, rows)
            want = None if number is None else snapshot_values(number)
        if want is None:
            extra += 1
        else:
            seen += 1
            if tuple(got) != want:
                differ += 1
        if (want is None or tuple(got) != want) and len(examples) < 5:
            examples.append(ident)
    missing = expected - seen
    return {
        "expected": expected,
        "actual": len(ids),
        "missing": missing,
        "extra": extra,
        "differ": differ,
        "examples": examples,
        "ok": not (missing or extra or differ),
    }


PRODUCER = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 50,
    "batch.num.messages": 10_000,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 512 * 1024,
}
"""The producer's settings: large lz4 batches, a deep queue (2M records in ~10 s)."""
POLL_EVERY = 20_000
"""Records produced between two ``poll(0)`` (delivery reports served)."""


def produce(bootstrap: str, records: Iterable[Record], *, partition: int = 0) -> tuple[int, float]:
    """Send ``records`` in order (one partition each topic), batched; wait until every one is
    acknowledged. (records sent, seconds)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    failed: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failed.append(str(error))

    started = time.perf_counter()
    count = 0
    send = producer.produce
    for topic, key_, value in records:
        while True:
            try:
                send(topic, value=value, key=key_, partition=partition, on_delivery=delivered)
                break
            except BufferError:  # the queue is full: let deliveries drain it
                producer.poll(0.1)
        count += 1
        if count % POLL_EVERY == 0:
            producer.poll(0)
            if failed:
                break
    left = producer.flush(600)
    if left or failed:
        raise RuntimeError(f"produce: {left} records not delivered, errors {failed[:3]}")
    return count, time.perf_counter() - started


def triples(records: Iterable[Any]) -> Iterator[Record]:
    """``Received`` records (``Topics.records``) as ``(topic, key, value)``."""
    for r in records:
        yield r.topic, r.key, r.value


def as_json(record: Record) -> tuple[str, Any, Any]:
    """A record decoded (for tests)."""
    topic, k, v = record
    return topic, None if k is None else json.loads(k), None if v is None else json.loads(v)
