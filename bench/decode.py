"""Workload **Decode** (issue 58): the change-feed decode alone, over the same records in memory.

``Sizes.decode_records`` Debezium change events of two tables (the Postgres connector's JSON
envelope, in source transactions of 1-5 events with their BEGIN/END, deletes followed by
tombstones: the Events workload's stream), once without the JSON converter's schema wrapper
and once with it (``schemas.enable=true``, the connector's default). Each contender turns the
cached records into rows and writes them to Spark's ``noop`` sink (every row computed, nothing
stored); median of 3 runs each:

- *Spark*: ``inputs.changeevents.decode`` — one ``from_json`` a record, values by
  expressions (not used by the job yet: this workload is how it will earn its place);
- *rules* (ours): the Python rules (``feedevents.decoded``) in ``mapInArrow``, what the job
  runs;
- *typed from_json*: the plain pattern's parse, one ``from_json`` into the envelope typed from
  the tables' columns (what a hand-written job does; it reads no placeholders, no positions, no
  Connect types).

Reported: seconds, records/s, Spark / typed from_json (issue 58's target for the decode: <= 2x)
and rules / Spark.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.common import say
from bench.sizes import Sizes
from streaming.core.changefeed import Feed, Received, decode_json_value
from streaming.inputs.changeevents import decode
from streaming.inputs.changefeeds import DDL, rules_decoder
from tests.support.debezium import Topics, feed

TABLES = {"public.accounts": "ledger.Account", "public.payments": "ledger.Payment"}
RECORD = (
    "feed string, topic string, partition int, offset long, key binary, value binary, "
    "timestamp timestamp, received_at timestamp"
)
ROW = "struct<id: long, owner: string, balance: double, status: string>"
TYPED = (
    f"struct<before: {ROW}, after: {ROW}, op: string, "
    "source: struct<lsn: long, ts_ms: long>, transaction: struct<id: string>>"
)
COLUMNS = [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "owner", "type": "string", "optional": True},
    {"field": "balance", "type": "double", "optional": True},
    {"field": "status", "type": "string", "optional": True},
]
SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "struct", "field": part, "optional": True, "fields": COLUMNS}
        for part in ("before", "after")
    ],
}
RUNS = 3


def _records(count: int, *, wrapped: bool, seed: int = 7) -> list[Received]:
    """``count`` records (about) of change events in source transactions, as Events sends."""
    rng = random.Random(seed)
    topics = Topics(prefix="bank", wrapped=wrapped)
    out: list[Received] = []
    n = 0
    while len(out) < count:
        n += 1
        changes: list[tuple[str, str, Mapping[str, Any]]] = []
        for _ in range(rng.randint(1, 5)):
            table = rng.choice(sorted(TABLES))
            op = rng.choices(["u", "c", "d"], weights=[8, 1, 1])[0]
            row = {
                "id": rng.randint(1, 100_000),
                "owner": f"owner-{rng.randint(1, 999)}",
                "balance": round(rng.uniform(0, 10_000), 2),
                "status": rng.choice(["open", "closed", "frozen"]),
            }
            changes.append((table, op, row))
        topics.transaction(f"{1000 + n}:{n}", changes)
        out += topics.take()
    if wrapped:  # the converter's schema, as the connector sends it with schemas.enable=true
        out = [_with_schema(r) for r in out]
    return out[:count]


def _with_schema(record: Received) -> Received:
    if record.value is None:
        return record
    value = json.loads(record.value)
    if "payload" not in value:  # BEGIN/END
        return record
    value["schema"] = SCHEMA
    return Received(
        record.topic,
        record.partition,
        record.offset,
        record.key,
        json.dumps(value).encode(),
        record.timestamp,
        record.received_at,
    )


def _frame(spark: SparkSession, the_feed: Feed, records: list[Received]) -> DataFrame:
    rows = [
        (the_feed.name, r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.received_at)
        for r in records
    ]
    frame = spark.createDataFrame(rows, RECORD).repartition(2).cache()
    frame.count()
    return frame


def _timed(decoded: DataFrame) -> list[float]:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        decoded.write.format("noop").mode("overwrite").save()
        times.append(time.perf_counter() - started)
    return times


def decode_alone(spark: SparkSession, sizes: Sizes) -> dict[str, Any]:
    the_feed = feed(TABLES, prefix="bank")
    out: dict[str, Any] = {"records": sizes.decode_records}
    for shape, wrapped in (("plain JSON", False), ("with the converter's schema", True)):
        records = _records(sizes.decode_records, wrapped=wrapped)
        frame = _frame(spark, the_feed, records)
        python = rules_decoder({the_feed.name: the_feed}, decode_json_value)
        data = frame.where(F.col("topic").isin(list(the_feed.topics)))
        text = F.col("value").cast("string")
        typed = f"struct<payload: {TYPED}>" if wrapped else TYPED  # one parse either way
        contenders = {
            "spark": decode(frame, [the_feed]),
            "rules": frame.mapInArrow(python, DDL),
            "typed": data.select(F.from_json(text, typed).alias("e")),
        }
        entry: dict[str, Any] = {}
        for name, decoded in contenders.items():
            say(f"Decode ({shape}): {name}, {len(records):,} records, {RUNS} runs")
            runs = _timed(decoded)
            entry[name] = {"seconds": statistics.median(runs), "runs": runs}
        read = decode(frame, [the_feed]).where("decodable").count()
        entry["read_by_spark"] = read
        entry["spark_vs_typed"] = entry["spark"]["seconds"] / entry["typed"]["seconds"]
        entry["rules_vs_spark"] = entry["rules"]["seconds"] / entry["spark"]["seconds"]
        out[shape] = entry
        frame.unpersist()
    return out


def render_lines(result: dict[str, Any]) -> list[str]:
    records = result["records"]
    lines = [
        f"Decode: {records:,} Debezium records in memory (cached), decoded and written to the "
        "noop sink; median of 3",
        f"{'workload':<8} {'records':<28} {'contender':<24} {'seconds':>8} {'records/s':>11}",
    ]
    for shape in ("plain JSON", "with the converter's schema"):
        entry = result.get(shape)
        if entry is None:
            continue
        for name, label in (
            ("spark", "Spark expressions"),
            ("rules", "ours: the Python rules"),
            ("typed", "typed from_json"),
        ):
            seconds = entry[name]["seconds"]
            lines.append(
                f"{'Decode':<8} {shape:<28} {label:<24} {seconds:>8.2f} {records / seconds:>11,.0f}"
            )
        lines.append(
            f"Decode   {shape}: Spark expressions / typed from_json {entry['spark_vs_typed']:.2f}x "
            f"(target <= 2x); the rules / Spark expressions {entry['rules_vs_spark']:.2f}x; "
            f"read by Spark {entry['read_by_spark']:,} of {records:,}"
        )
    return lines
