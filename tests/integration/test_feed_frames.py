"""inputs.changefeeds: what Spark computes of a change feed's records — the decoded rows' summaries,
the decision, the staged events' counts, shapes and rows — equals what ``core.feedevents``
computes of the same records in Python (itself held to the reference model,
tests/support/assembly.py, by tests/unit/test_feedevents.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import DataFrame, SparkSession

from streaming.core.catalog import parse_dataset
from streaming.core.changefeed import Feed, Received, decode_json_value
from streaming.core.feedevents import (
    Ready,
    decide,
    decoded,
    part_counts,
    staged_events,
    summarize,
)
from streaming.core.layout import Layout
from streaming.inputs.changefeeds import ChangeFeeds
from streaming.storage.pending import Waiting
from tests.support.datasets import SHOP
from tests.support.debezium import T0, Topics, feed

pytestmark = pytest.mark.spark

CUST, ORD = "public.customers", "public.orders"


def scenario() -> list[Received]:
    """A snapshot, transactions complete and not, a truncate, events sent twice, a record that
    cannot be read, a Kafka tombstone, and a transaction without END (yet)."""
    topics = Topics()
    for n in range(5):
        marker = "last" if n == 4 else "true"
        topics.event(CUST if n % 2 else ORD, "r", {"id": n, "name": f"s{n}"}, snapshot=marker)
    topics.transaction("700:1", [(CUST, "u", {"id": 1, "name": "A"}), (ORD, "c", {"id": 9})])
    topics.transaction(
        "701:2",
        [
            (CUST, "c", {"id": 5, "name": "B"}),
            (CUST, "t", {"id": 0}),
            (CUST, "c", {"id": 6, "name": "C"}),
        ],
    )
    again = topics.records[-3]  # the event of id 6, sent again by a restarted connector
    topics._add(again.topic, json.loads(again.key or b"null"), json.loads(again.value or b"null"))
    topics.tombstone(CUST, 5)
    topics.records.append(Received("pg.public.customers", 0, 999, None, b"{nope", T0, T0))
    topics.begin("702:3")  # incomplete: its END counts 2, one came
    topics.event(CUST, "d", {"id": 1}, tx="702:3", order=1)
    topics.end("702:3", {CUST: 2})
    topics.transaction("703:4", [(ORD, "u", {"id": 9, "amount": 2.5})])  # held behind 702
    topics.begin("650:0")  # no END yet
    topics.event(CUST, "u", {"id": 3, "name": "old"}, tx="650:0", order=1)
    return topics.records


def _ready(items: list[Ready]) -> list[tuple[Any, ...]]:
    return [
        (
            i.item,
            i.source_id,
            i.anchor,
            i.received_at,
            (i.error.code, i.error.message) if i.error else None,
            i.snapshot_last,
        )
        for i in items
    ]


def test_spark_decides_and_stages_as_the_python_reference(
    spark: SparkSession, tmp_path: Path
) -> None:
    feed_: Feed = feed(max_wait=timedelta(minutes=10))
    records = scenario()
    at = T0 + timedelta(seconds=1)
    frame = spark.createDataFrame(
        [("changes", r.topic, r.partition, r.offset, r.timestamp, r.key, r.value) for r in records],
        "kind string, name string, partition int, offset long, mtime timestamp, key binary, "
        "payload binary",
    )
    layout = Layout(str(tmp_path), "c")
    feeds = ChangeFeeds(spark, [feed_], decode_json_value, layout, Waiting(count=0))
    batch = feeds.open(frame, 0, at, query="q", replay_possible=False, committed=lambda ids: ())
    try:
        rows = [
            decoded(
                feed_,
                Received(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, at),
                decode_json_value,
            )
            for r in records
        ]
        expected = decide(feed_, summarize(rows), at)
        got = batch.decisions[feed_.name]
        assert _ready(got.ready) == _ready(expected.ready)
        waits = ["702", "650", "703"]  # by their first record's place
        assert [t.tx for t in got.waiting] == [t.tx for t in expected.waiting] == waits
        assert [e.code for i in got.ready if (e := i.error)] == ["INVALID_CHANGE_EVENT"]
        assert batch.snapshots[1] == {feed_.name: 0}  # the snapshot's last read applies here

        counts = {c for cs in batch.counts.values() for c in cs}
        assert counts == set(part_counts(rows, expected.ready))
        assert len(counts) == 6  # a chunk per topic; 700 in 2 schemas; 701 in 2 segments

        datasets = {"shop": parse_dataset("shop", yaml.safe_load(SHOP))}
        planned = []
        ordinal = 3
        for _, item in batch.ready():
            if item.error is None:
                loads = batch.plan(item, ordinal, datasets, layout)
                ordinal += len(loads)
                planned.append((item, loads))
        batch.stage(planned)
        staged = staged_events(rows, expected.ready)
        for item, loads in planned:
            for load, piece in zip(loads, batch.pieces(item), strict=True):
                if piece.truncate:
                    continue
                found = (
                    batch.rows(piece.schema, [load.ordinal])
                    .orderBy("__row")
                    .select("__tx", "__values")
                    .collect()
                )
                assert {r["__tx"] for r in found} == {item.transaction_id}
                want = [e["row"] for e in staged[(item.item, piece.schema, piece.seg)]]
                assert [dict(r["__values"]) for r in found] == [w for w in want if w["Op"] != "T"]
        shapes = {(s.table, tuple(s.row)) for s in batch.shapes[feed_.name]}
        assert shapes == {(CUST, ("id", "name")), (ORD, ("id", "name")), (ORD, ("id",))}

        waiting = batch.waiting_frame()
        assert waiting is not None
        # 702's BEGIN, event and END; 703's BEGIN, event and END; 650's BEGIN and event
        assert waiting.count() == sum(t.records for t in expected.waiting) == 8
    finally:
        batch.release()


def test_a_release_the_stop_interrupts_leaves_the_rest_listed_for_later(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's stop interrupts a batch in its thread, possibly inside ``unpersist``
    (``InterruptedException``; seen in test_debezium_mariadb): what is not let go stays on the
    list it was cached in, and the job releases it once the query has ended."""
    records = scenario()
    frame = spark.createDataFrame(
        [("changes", r.topic, r.partition, r.offset, r.timestamp, r.key, r.value) for r in records],
        "kind string, name string, partition int, offset long, mtime timestamp, key binary, "
        "payload binary",
    )
    feeds = ChangeFeeds(
        spark, [feed()], decode_json_value, Layout(str(tmp_path), "c"), Waiting(count=0)
    )
    held: list[Any] = []
    batch = feeds.open(
        frame, 0, T0, query="q", replay_possible=False, committed=lambda ids: (), cached=held
    )
    assert len(held) == 2  # the decoded records and the staged events
    manager = spark._jsparkSession.sharedState().cacheManager()
    assert not manager.isEmpty()
    classic = type(held[0])  # Spark 4's classic DataFrame, not the API class
    real = classic.unpersist
    calls = []

    def interrupted(self: DataFrame, blocking: bool = False) -> DataFrame:
        calls.append(self)
        if len(calls) == 2:
            raise RuntimeError("java.lang.InterruptedException")
        return real(self, blocking)

    cached = list(held)
    monkeypatch.setattr(classic, "unpersist", interrupted)
    with pytest.raises(RuntimeError, match="InterruptedException"):
        batch.release()
    # Released last first: the staged events went, the decoded records stay.
    assert calls == cached[::-1] and held == cached[:1] and not manager.isEmpty()
    monkeypatch.setattr(classic, "unpersist", real)
    batch.release()
    assert held == [] and manager.isEmpty()
