"""inputs.changeevents — Debezium records decoded by Spark — against the reference, the Python
rules (``core.feedevents.decoded``): every record Spark says it read (``decodable``) decodes to
the rules' row, over the records real connectors wrote (PostgreSQL and MariaDB, every type of
the type test) and generated records of every shape the connectors send, malformed ones among
them; and the records real connectors wrote are all read by Spark."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from streaming.core.changefeed import (
    DataEvent,
    Feed,
    Received,
    decode_json_value,
    read_debezium,
)
from streaming.core.feedevents import DECODED_FIELDS, decoded
from streaming.inputs.changeevents import DECODABLE, decode
from tests.support.debezium import T0, Topics, wrap

pytestmark = pytest.mark.spark

FIXTURES = Path(__file__).parents[1] / "unit" / "fixtures"
RECORD = (
    "feed string, topic string, partition int, offset long, key binary, value binary, "
    "timestamp timestamp, received_at timestamp"
)
WHAT = [name for name, _ in DECODED_FIELDS][8:]  # what a record is (the record's own before)
NUMBER = re.compile(r"-?[0-9.]+([eE][-+]?[0-9]+)?")


def the_feed(*, metadata: bool = True, time_property: str | None = "sourceTime") -> Feed:
    tables = {
        "public.t": "shop.Customer",
        "inventory.t": "shop.Order",
        "public.customers": "shop.Customer",
        "public.orders": "shop.Order",
        "cdc.customers": "shop.Customer",
        "cdc.orders": "shop.Order",
    }
    topics = {f"{p}.{t}": t for p in ("pg", "shop", "mdb38f64a") for t in tables}
    return Feed(
        "pg",
        "shop",
        "debezium",
        tables,
        topics,
        "pg.transaction" if metadata else None,
        "sourcePosition",
        timedelta(minutes=10),
        100_000,
        time_property=time_property,
        integer_columns={"public.t": frozenset({"tcount"})},
    )


def _same_value(ours: str | None, theirs: str | None, typed: Any) -> bool:
    """A value's text: equal; or, where the rules' value (``typed``) is a float, the same
    double written otherwise; or, nested, the same JSON (its floats the same doubles)."""
    if ours == theirs:
        return True
    if ours is None or theirs is None:
        return False
    if isinstance(typed, float) and NUMBER.fullmatch(ours):
        return float(ours) == typed
    if isinstance(typed, dict | list):
        return bool(json.loads(ours) == json.loads(theirs))
    return False


def compare(
    spark: SparkSession, feed: Feed, records: Sequence[Received]
) -> tuple[int, list[bytes | None]]:
    """Each record through both decoders: Spark's row, where it says it read the record, equals
    the rules'. Returns (the records Spark read, the values of those it left to the rules)."""
    rows = [
        (feed.name, r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.received_at)
        for r in records
    ]
    frame = spark.createDataFrame(rows, RECORD)
    got = {(r["topic"], r["offset"]): r.asDict() for r in decode(frame, [feed]).collect()}
    read, left = 0, []
    for record in records:
        ours = got[(record.topic, record.offset)]
        if not ours[DECODABLE]:
            left.append(record.value)
            continue
        read += 1
        theirs = decoded(feed, record, decode_json_value)
        event = read_debezium(feed, record, decode_json_value)
        typed = dict(event.row or {}) if isinstance(event, DataEvent) else {}
        where = f"{record.value!r}\nkey {record.key!r}"
        for name in WHAT:
            mine, ref = ours[name], theirs.get(name)
            if name == "row" and mine is not None:
                mine = dict(mine)  # collected through a Java map: its order is ``columns``'s
                assert ref is not None and set(mine) == set(ref), (name, mine, ref, where)
                bad = {
                    k: (mine[k], ref[k])
                    for k in ref
                    if not _same_value(mine[k], ref[k], typed.get(k))
                }
                assert not bad, (bad, where)
            elif name in ("counts", "fields") and mine is not None:
                assert ref is not None and json.loads(mine) == json.loads(ref), (name, where)
            elif name in ("snapshot_last", "incremental"):
                assert bool(mine) == bool(ref), (name, mine, ref, where)
            elif name == "unavailable":
                assert mine == (ref or 0), (name, mine, ref, where)
            else:
                assert mine == ref, (name, mine, ref, where)
    return read, left


def _record(topic: str, offset: int, key: Any, value: Any) -> Received:
    def raw(x: Any) -> bytes | None:
        if x is None or isinstance(x, bytes):
            return x
        return json.dumps(x).encode()

    return Received(topic, 0, offset, raw(key), raw(value), T0, T0)


# -- what real connectors wrote ------------------------------------------------------------------


def _captured() -> list[Received]:
    out: list[Received] = []
    for name in ("debezium_postgres_examples.json", "debezium_mariadb_examples.json"):
        for example in json.loads((FIXTURES / name).read_text()).values():
            if not isinstance(example, dict) or "topic" not in example:
                continue
            topic = example["topic"]
            if topic.endswith("transaction"):
                topic = "pg.transaction"
            out.append(_record(topic, len(out), example["key"], example["value"]))
    types = json.loads((FIXTURES / "debezium_types.json").read_text())
    for db, table, connector in (
        ("postgresql", "public.t", {"connector": "postgresql", "lsn": 77}),
        ("mariadb", "inventory.t", {"connector": "mariadb", "file": "mysql-bin.000003", "pos": 9}),
    ):
        schema = {
            "type": "struct",
            "fields": [
                {**types[db]["after_schema"], "field": "before", "optional": True},
                {**types[db]["after_schema"], "field": "after", "optional": True},
            ],
        }
        for n, (row_id, row) in enumerate(types[db]["rows"].items()):
            op = "u" if n % 2 else "c"
            value = {
                "before": row if op == "u" else None,
                "after": row,
                "source": {**connector, "ts_ms": 1_700_000_000_000 + n},
                "op": op,
                "transaction": {"id": f"{500 + n}:{n}", "data_collection_order": 1},
            }
            out.append(
                _record(f"pg.{table}", len(out), wrap({"id": int(row_id)}), wrap(value, schema))
            )
    return out


def test_the_records_real_connectors_wrote_decode_as_the_rules_decode_them(
    spark: SparkSession,
) -> None:
    records = _captured()
    feed = the_feed()
    read, left = compare(spark, feed, records)
    # Every record a real connector wrote that the rules read is read by Spark but for a
    # decimal wider than 16 bytes (MariaDB's DECIMAL(65)); the others it leaves to the rules are
    # their rejections (PostgreSQL's infinities and interval, MariaDB's BOOLEAN 5).
    readable = [
        r
        for r in records
        if decoded(feed, r, decode_json_value).get("code") is None and not _wide_decimal(r)
    ]
    assert read == len(readable), (read, len(readable), left)


def _wide_decimal(record: Received) -> bool:
    """Whether a record holds a decimal of more than 16 bytes (Spark's decimals hold 38 digits)."""
    value = json.loads(record.value or b"null")
    if not isinstance(value, dict) or "schema" not in value:
        return False
    names = {
        f["field"]: f.get("name")
        for part in value["schema"]["fields"]
        for f in part.get("fields") or []
    }
    after = value["payload"].get("after") or {}
    return any(
        names.get(k) == "org.apache.kafka.connect.data.Decimal"
        and isinstance(v, str)
        and len(base64.b64decode(v)) > 16
        for k, v in after.items()
    )


def test_a_feeds_events_of_every_kind_are_read_by_spark_as_the_rules_read_them(
    spark: SparkSession,
) -> None:
    """BEGIN/END, snapshot reads (``last`` among them), inserts, updates with TOAST
    placeholders in every form (taken from ``before`` where it has them), deletes, truncates,
    tombstones, keys of several fields, with and without the converter's wrapper."""
    records: list[Received] = []
    for wrapped in (False, True):
        topics = Topics(prefix="pg", wrapped=wrapped)
        topics.offsets = {t: 100 * wrapped for t in ("pg.public.t", "pg.transaction")}
        topics.event("public.t", "r", {"id": 1, "s": "a"}, snapshot="true")
        topics.event("public.t", "r", {"id": 2, "s": "b"}, snapshot="last")
        topics.transaction(
            "700:1",
            [
                ("public.t", "c", {"id": 3, "s": "c", "raw": "AAE=", "tags": ["x"]}),
                ("public.t", "u", {"id": 3, "s": PLACEHOLDER, "raw": B64_PLACEHOLDER}),
                (
                    "public.t",
                    "u",
                    {"id": 3, "tags": [PLACEHOLDER], "m": {PLACEHOLDER: PLACEHOLDER}},
                ),
                ("public.t", "t", {"id": 0}),
                ("public.t", "d", {"id": 3}),
            ],
        )
        topics.tombstone("public.t", 3)
        records += topics.take()
    # An update whose old row (REPLICA IDENTITY FULL) has the value the placeholder stands for,
    # and a key of two fields.
    value = {
        "before": {"id": 4, "s": "old", "n": 1},
        "after": {"id": 4, "s": PLACEHOLDER, "n": 2},
        "source": {"connector": "postgresql", "lsn": 5, "sequence": '["3","5"]', "ts_ms": 9},
        "op": "u",
        "transaction": None,
    }
    records.append(_record("pg.public.t", 500, {"id": 4, "part": "x"}, value))
    read, left = compare(spark, the_feed(), records)
    assert read == len(records) and not left, left


def _edges() -> dict[str, list[Any]]:
    """Values at the edges of each column's conversion, every one a value the rules read."""
    decimals = [0, 1, -1]
    for n in range(1, 17):
        top = 2 ** (8 * n - 1)
        decimals += [v for v in (top - 1, -top, -top + 1, top // 3) if abs(v) < 10**38]
    day = 86_400
    first, last = -62_135_596_800, 253_402_300_799  # 0001-01-01, 9999-12-31T23:59:59 (s)
    return {
        "dec": [_b64_int(v) for v in decimals],
        "dec0": [_b64_int(v) for v in (0, -1, 12345, -(2**63))],
        "var": [{"scale": sc, "value": _b64_int(v)} for sc in (0, 2, 20) for v in (0, -5, 10**30)],
        "day": [-719_162, 2_932_896, 0, -1, 19_000],
        "ms": [first * 1000, last * 1000 + 999, 0, -1, 1],
        "us": [first * 10**6, last * 10**6 + 999_999, -1, 1_700_000_000_123_456],
        "ns": [-1, 1, 2**63 - 1, -(2**63)],  # int64: 1677-09-21 .. 2262-04-11
        "t3": [0, day * 1000 - 1, day * 1000, -3_020_399_000, 3_020_399_000, 1],
        "t6": [0, day * 10**6, -1, 45_296_789_000, 500],
        "t9": [0, 1, day * 10**9, 123_456_789_012],
        "tcount": [0, 3_600_000_000],
        "year": [1900, 1901, 2155],
        "f": [1e20, 1.5, -0.0, 1e-7, 123456789.125, 5e-324],
        "r": [1.1, 3.4e38, -1.5, 0.1],
        "u": [0, 2**63 - 1],
        "big": [-(2**63), 2**63 - 1],
        "s": ["", "é ü 漢", 'a "quoted" \\ back\\slash', "line\nbreak", "1.0", "[1]"],
        "raw": ["", "AAE=", "/w=="],
        "b": [True, False],
        "zoned": ["2024-01-01T10:00:00Z"],
        "dur": [0, -1, 86_400_000_000],
        "tags": [[], ["x", "y"], ["é"]],
        "point": [{"x": 1.5, "y": -2}],
    }


def test_values_at_the_edges_of_every_conversion_are_read_by_spark_as_the_rules_read_them(
    spark: SparkSession,
) -> None:
    """One event a value, with the converter's schema: decimals of every width (the signs at
    each byte's edge), dates and timestamps at 0001-01-01 and 9999-12-31, times of day past 24 h
    and below zero, floats, text, bytes, arrays."""
    records: list[Received] = []
    for name, values in _edges().items():
        fields = [{"field": "id", "type": "int32"}, {"field": name, **COLUMNS[name][0]}]
        schema = {
            "type": "struct",
            "fields": [
                {"type": "struct", "field": p, "fields": fields} for p in ("before", "after")
            ],
        }
        for value in values:
            event = {
                "before": None,
                "after": {"id": len(records), name: value},
                "source": {"connector": "postgresql", "lsn": 10 + len(records)},
                "op": "c",
            }
            records.append(
                _record("pg.public.t", len(records), wrap({"id": 1}), wrap(event, schema))
            )
    read, left = compare(spark, the_feed(), records)
    assert read == len(records) and not left, left


# -- generated records -----------------------------------------------------------------------

PLACEHOLDER = "__debezium_unavailable_value"
B64_PLACEHOLDER = base64.b64encode(PLACEHOLDER.encode()).decode()


def _b64_int(n: int, size: int | None = None) -> str:
    size = size or max(1, (n.bit_length() + 8) // 8)
    return base64.b64encode(n.to_bytes(size, "big", signed=True)).decode()


INT64 = st.integers(-(2**63), 2**63 - 1)
COLUMNS: dict[str, tuple[dict[str, Any], st.SearchStrategy[Any]]] = {
    "i": ({"type": "int32"}, st.integers(-(2**31), 2**31 - 1)),
    "big": ({"type": "int64"}, INT64),
    "u": (
        {"type": "int64", "parameters": {"__debezium.source.column.type": "BIGINT UNSIGNED"}},
        INT64,
    ),
    "s": ({"type": "string"}, st.text(max_size=8)),
    "f": ({"type": "double"}, st.floats(allow_nan=False, allow_infinity=False)),
    "r": ({"type": "float"}, st.floats(width=32, allow_nan=False, allow_infinity=False)),
    "b": ({"type": "boolean"}, st.booleans()),
    "raw": ({"type": "bytes"}, st.binary(max_size=6).map(lambda b: base64.b64encode(b).decode())),
    "day": (
        {"type": "int32", "name": "io.debezium.time.Date"},
        st.one_of(st.integers(-800_000, 3_000_000), st.just(-2147472692)),
    ),
    "ms": ({"type": "int64", "name": "io.debezium.time.Timestamp"}, st.integers(-(10**15), 10**15)),
    "us": ({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, INT64),
    "ns": ({"type": "int64", "name": "io.debezium.time.NanoTimestamp"}, INT64),
    "t3": ({"type": "int32", "name": "io.debezium.time.Time"}, st.integers(-(10**9), 10**9)),
    "t6": ({"type": "int64", "name": "io.debezium.time.MicroTime"}, st.integers(-(10**12), 10**12)),
    "t9": ({"type": "int64", "name": "io.debezium.time.NanoTime"}, st.integers(0, 10**14)),
    "tcount": ({"type": "int64", "name": "io.debezium.time.MicroTime"}, st.integers(0, 10**11)),
    "dec": (
        {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "3", "connect.decimal.precision": "38"},
        },
        st.one_of(
            st.integers(-(10**38) + 1, 10**38 - 1).map(_b64_int),
            st.integers(-(2**63), 2**63 - 1).map(_b64_int),
            st.integers(1, 16)
            .flatmap(lambda n: st.integers(-(2 ** (8 * n - 1)), -1))
            .map(_b64_int),
            st.integers(-(2**70), 2**70).map(lambda n: _b64_int(n, 17)),
            st.just(""),
            st.just("not base64!"),
        ),
    ),
    "dec0": (
        {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "-2"},
        },
        st.integers(-(10**20), 10**20).map(_b64_int),
    ),
    "var": (
        {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"},
        st.fixed_dictionaries(
            {"scale": st.integers(0, 20), "value": st.integers(-(10**30), 10**30).map(_b64_int)}
        ),
    ),
    "zoned": (
        {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        st.sampled_from(["2024-01-01T10:00:00Z", "infinity", "-infinity"]),
    ),
    "dur": (
        {"type": "int64", "name": "io.debezium.time.MicroDuration"},
        st.one_of(INT64, st.sampled_from([-(2**63), 2**63 - 1])),
    ),
    "year": (
        {"type": "int32", "name": "io.debezium.time.Year"},
        st.sampled_from([1900, 1901, 2024]),
    ),
    "tags": (
        {"type": "array", "items": {"type": "string"}},
        st.lists(st.text(max_size=3), max_size=3),
    ),
    "point": (
        {"type": "struct", "name": "io.debezium.data.geometry.Point"},
        st.fixed_dictionaries({"x": st.floats(-9, 9), "y": st.integers(-9, 9)}),
    ),
}
PLACEHOLDERS = st.sampled_from(
    [PLACEHOLDER, B64_PLACEHOLDER, [PLACEHOLDER], [B64_PLACEHOLDER], {PLACEHOLDER: PLACEHOLDER}]
)


@st.composite
def rows(draw: st.DrawFn, names: Sequence[str]) -> dict[str, Any]:
    out = {"id": draw(st.integers(0, 99))}
    for name in names:
        strategy = COLUMNS[name][1]
        # Mostly a value of the column's kind; now and then null or a placeholder.
        odd = draw(st.integers(0, 7)) == 0
        out[name] = draw(st.one_of(st.none(), PLACEHOLDERS) if odd else strategy)
    return out


SOURCES = st.one_of(
    st.builds(
        lambda lsn, seq, snap: {
            "connector": "postgresql",
            "lsn": lsn,
            **({"sequence": seq} if seq is not None else {}),
            **({"snapshot": snap} if snap else {}),
            "ts_ms": 1_700_000_000_000,
        },
        st.one_of(st.none(), st.integers(0, 2**40)),
        st.one_of(
            st.none(),
            st.builds(
                lambda a, b: json.dumps([a, b]),
                st.one_of(st.none(), st.integers(0, 2**40).map(str), st.integers(-5, 2**40)),
                st.one_of(st.none(), st.integers(0, 2**40).map(str)),
            ),
            st.just("not json"),
        ),
        st.sampled_from([None, "true", "last", "incremental", "false"]),
    ),
    st.builds(
        lambda file, pos, row, ts: {
            "connector": "mariadb",
            "file": file,
            "pos": pos,
            "row": row,
            "ts_ms": ts,
        },
        st.sampled_from(["mysql-bin.000003", "binlog.999999", "plain", None]),
        st.integers(0, 2**40),
        st.integers(0, 9),
        st.one_of(st.none(), st.integers(-(10**13), 10**13)),
    ),
    st.builds(
        lambda file, pos: {"connector": "mysql", "file": file, "pos": pos, "row": 1},
        st.sampled_from(["mysql-bin.000003", None]),
        st.integers(0, 2**40),
    ),
    st.builds(
        lambda commit, change: {
            "connector": "sqlserver",
            "commit_lsn": commit,
            "change_lsn": change,
            "ts_ms": 5,
        },
        st.sampled_from([None, "0000002a:00000c80:0003"]),
        st.sampled_from([None, "", "0000002a:00000c80:0002"]),
    ),
    st.builds(lambda ts: {"connector": "oracle", "ts_ms": ts}, st.integers(0, 2**41)),
)
KEYS = st.one_of(
    st.builds(lambda i: {"id": i}, st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda s: {"id": s}, st.text(max_size=6)),
    st.builds(lambda a, b: {"a": a, "b": b}, st.integers(0, 9), st.text(max_size=4)),
    st.builds(lambda a: {"a": a, "b": None, "c": True}, st.integers(0, 9)),
    st.just({"id": 1.5}),
    st.just({"id": {"nested": 1}}),
    st.just({}),
    st.just(7),
    st.none(),
)


@st.composite
def records(draw: st.DrawFn) -> list[Received]:
    out: list[Received] = []
    for offset in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["event"] * 6 + ["boundary", "tombstone", "junk"]))
        if kind == "tombstone":
            out.append(_record("pg.public.t", offset, {"id": 1}, None))
            continue
        if kind == "junk":
            junk = draw(
                st.sampled_from(
                    [b"{nope", b"\xff\xfe", b"[1,2]", b"5", b'{"op": "c"}', b'[{"op": "c"}]', b"{}"]
                )
            )
            out.append(_record("pg.public.t", offset, {"id": 1}, junk))
            continue
        if kind == "boundary":
            status = draw(st.sampled_from(["BEGIN", "END", "OTHER"]))
            counts = draw(st.dictionaries(st.sampled_from(["public.t", "x.y"]), st.integers(0, 5)))
            boundary = {
                "status": status,
                "id": draw(st.sampled_from(["571:23577912", "0-1-22", "file=b.1,pos=4"])),
                "event_count": sum(counts.values()),
                "data_collections": [
                    {"data_collection": t, "event_count": n} for t, n in counts.items()
                ],
            }
            out.append(_record("pg.transaction", offset, {"id": "x"}, boundary))
            continue
        names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), max_size=6, unique=True))
        op = draw(st.sampled_from(["c", "u", "d", "r", "t", "x"]))
        after = draw(rows(names))
        before = draw(st.one_of(st.none(), rows(names)))
        value: dict[str, Any] = {
            "before": after if op == "d" else before,
            "after": None if op in ("d", "t") else after,
            "source": draw(SOURCES),
            "op": op,
            "transaction": draw(
                st.one_of(
                    st.none(),
                    st.builds(
                        lambda tx, order: {
                            "id": tx,
                            "total_order": 1,
                            "data_collection_order": order,
                        },
                        st.sampled_from(["571:23577912", "0-1-22", "abc"]),
                        st.integers(1, 5),
                    ),
                )
            ),
        }
        key = draw(KEYS)
        if draw(st.booleans()):
            fields = [{"field": n, "optional": True, **COLUMNS[n][0]} for n in names]
            fields.insert(0, {"field": "id", "type": "int32", "optional": False})
            schema = {
                "type": "struct",
                "fields": [
                    {"type": "struct", "field": "before", "fields": fields},
                    {"type": "struct", "field": "after", "fields": fields},
                ],
            }
            value = wrap(value, schema)
            if isinstance(key, dict) and draw(st.booleans()):
                key = wrap(key)
        topic = draw(st.sampled_from(["pg.public.t", "pg.public.orders", "pg.unknown"]))
        out.append(_record(topic, offset, key, value))
    return out


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(batch=records(), metadata=st.booleans())
def test_generated_records_spark_reads_decode_as_the_rules_decode_them(
    spark: SparkSession, batch: list[Received], metadata: bool
) -> None:
    compare(spark, the_feed(metadata=metadata), batch)
