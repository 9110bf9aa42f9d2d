"""core.sourceschema: columns a source table's change events carry that its schema lacks, their
types, and the type changes that stop the job (pure). The events are real ones: Debezium 3.6.1's
Postgres connector with the JSON converter's schemas (tests/unit/fixtures/)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from pyspark.sql import SparkSession

from streaming.core.catalog import Dataset, PropertyDef, parse_dataset
from streaming.core.changefeed import (
    DataEvent,
    Received,
    decode_json_value,
    feed_of,
    read_debezium,
)
from streaming.core.config import ChangeFeedConfig
from streaming.core.errors import ConfigError
from streaming.core.layout import Layout
from streaming.core.sourceschema import (
    ColumnType,
    EvolvedProperty,
    NewColumn,
    SchemaChanges,
    SourceSchemaChanged,
    column_type,
    definition_text,
    evolved,
    fits,
    ignored_warning,
    property_of,
    schema_changed,
    source_changes,
    type_changed,
    with_evolved,
)
from streaming.runtime.sourcecolumns import SourceColumns
from tests.support.assembly import assemble
from tests.support.datasets import SHOP
from tests.support.debezium import T0, Topics, feed

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = json.loads((FIXTURES / "debezium_postgres_examples.json").read_text())
ADDED = json.loads((FIXTURES / "debezium_postgres_column_added.json").read_text())
"""Debezium 3.6.1's events of ``docs`` (id int, title text) before and after ``ALTER TABLE docs
ADD COLUMN tag text`` (captured by tests/support/capture_column_added.py)."""

DOCS = """\
docs.Doc:
  properties:
    title: {type: string}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
"""
SHOP_TABLES = {"public.customers": "shop.Customer", "public.orders": "shop.Order"}


def dataset(name: str, text: str) -> Dataset:
    return parse_dataset(name, yaml.safe_load(text))


def received(example: dict[str, Any], offset: int) -> Received:
    value = example["value"]
    return Received(
        example["topic"],
        0,
        offset,
        json.dumps(example["key"]).encode(),
        None if value is None else json.dumps(value).encode(),
        T0,
        T0,
    )


def shop_events(*names: str) -> list[DataEvent]:
    shop = feed(prefix="shop")
    out = []
    for i, name in enumerate(names):
        event = read_debezium(shop, received(EXAMPLES[name], i), decode_json_value)
        assert isinstance(event, DataEvent)
        out.append(event)
    return out


def docs_events(*names: str) -> list[DataEvent]:
    prefix = ADDED["topic_prefix"]
    docs = feed({"public.docs": "docs.Doc"}, prefix=prefix)
    out = []
    for i, name in enumerate(names):
        event = read_debezium(docs, received(ADDED[name], i), decode_json_value)
        assert isinstance(event, DataEvent)
        out.append(event)
    return out


def with_field(event: DataEvent, column: str, schema: dict[str, Any]) -> DataEvent:
    """The event with the Connect schema of one column replaced."""
    fields = dict(event.fields or {})
    fields[column] = {**schema, "field": column}
    return dataclasses.replace(event, fields=fields)


# -- the column added in Postgres, as Debezium sends it ------------------------------------------


def test_the_added_column_is_new_typed_from_the_converters_schema() -> None:
    before, after = docs_events("insert_before_alter", "insert_after_alter")
    assert "tag" not in (before.fields or {}) and (after.fields or {})["tag"]["type"] == "string"
    docs = dataset("docs", DOCS)
    tables = {"public.docs": "docs.Doc"}
    assert source_changes("docs", docs, tables, [before]).new == []
    changes = source_changes("docs", docs, tables, [before, after])
    assert changes.conflicts == []
    [new] = changes.new
    assert (new.schema, new.source_table, new.column) == ("docs.Doc", "public.docs", "tag")
    assert new.type == ColumnType("string", "text", "string")
    assert new.usable and new.property == PropertyDef(type="string")
    assert new.where == after.record.where


def test_an_update_after_the_alter_carries_it_too_and_it_is_named_once() -> None:
    events = docs_events("insert_after_alter", "update_after_alter")
    assert events[1].op == "U" and events[1].row is not None and events[1].row["tag"] == "blue"
    changes = source_changes("docs", dataset("docs", DOCS), {"public.docs": "docs.Doc"}, events)
    assert [c.column for c in changes.new] == ["tag"]


def test_the_real_shop_events_columns_the_schema_lacks_are_timestamps() -> None:
    """customers has created_at (MicroTimestamp), orders placed_at (ZonedTimestamp), which
    SHOP lacks; balance comes as text (decimal.handling.mode=string) into a number property: it
    fits (checked value by value); orders' customer_id feeds customerId (any case, with or
    without underscores)."""
    events = shop_events("snapshot_customers", "insert_customers", "insert_orders")
    changes = source_changes("shop", dataset("shop", SHOP), SHOP_TABLES, events)
    assert changes.conflicts == []
    assert [(c.schema, c.column, c.type.type, c.type.connect) for c in changes.new] == [
        ("shop.Customer", "created_at", "timestamp", "io.debezium.time.MicroTimestamp (int64)"),
        ("shop.Order", "placed_at", "timestamp", "io.debezium.time.ZonedTimestamp (string)"),
    ]


def test_a_delete_reads_before_and_an_unmapped_table_is_not_looked_at() -> None:
    [delete] = shop_events("delete_orders")
    assert delete.op == "D"
    only_customers = {"public.customers": "shop.Customer"}
    changes = source_changes("shop", dataset("shop", SHOP), only_customers, [delete])
    assert changes.new == [] and changes.conflicts == []


def test_without_the_converters_schema_a_new_key_is_a_string_column() -> None:
    topics = Topics()
    topics.event("public.customers", "c", {"id": 1, "name": "Ann", "score": 4.5})
    [record] = topics.take()
    event = read_debezium(feed(), record, decode_json_value)
    assert isinstance(event, DataEvent) and event.fields is None
    changes = source_changes("pg", dataset("shop", SHOP), SHOP_TABLES, [event])
    assert [(c.column, c.type.type, c.type.connect) for c in changes.new] == [
        ("score", "string", "no schema")
    ]
    assert changes.conflicts == []


def test_a_column_mapped_by_the_schema_is_not_new() -> None:
    mapped = SHOP.replace(
        "shop.Customer:\n", "shop.Customer:\n  columnMapping: {name: created_at}\n"
    )
    events = shop_events("snapshot_customers")
    changes = source_changes("shop", dataset("shop", mapped), SHOP_TABLES, events)
    assert changes.new == []


# -- types ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "int16"}, "integer"),
        ({"type": "int32"}, "integer"),
        ({"type": "int64"}, "integer"),
        ({"type": "float"}, "number"),
        ({"type": "double"}, "number"),
        ({"type": "boolean"}, "boolean"),
        ({"type": "string"}, "string"),
        ({"type": "int32", "name": "io.debezium.time.Date"}, "date"),
        ({"type": "int64", "name": "io.debezium.time.Timestamp"}, "timestamp"),
        ({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, "timestamp"),
        ({"type": "int64", "name": "io.debezium.time.NanoTimestamp"}, "timestamp"),
        ({"type": "string", "name": "io.debezium.time.ZonedTimestamp"}, "timestamp"),
        # Times of day land as text (HH:MM:SS.ffffff), whatever unit Debezium counts them in.
        ({"type": "int64", "name": "io.debezium.time.MicroTime"}, "string"),
        ({"type": "int32", "name": "io.debezium.time.Time"}, "string"),
        ({"type": "int64", "name": "io.debezium.time.NanoTime"}, "string"),
        ({"type": "int32", "name": "org.apache.kafka.connect.data.Time"}, "string"),
        ({"type": "string", "name": "io.debezium.data.Json"}, "string"),
        ({"type": "string", "name": "io.debezium.data.Uuid"}, "string"),
        (
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "2", "connect.decimal.precision": "10"},
            },
            "decimal(10,2)",
        ),
        (
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "12"},
            },
            "decimal(38,12)",
        ),
        ({"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}, "string"),
        ({"type": "bytes"}, "binary"),
        ({"type": "array", "items": {"type": "int32"}}, "array<integer>"),
        ({"type": "array", "items": {"type": "string"}}, "array<string>"),
        (  # an array of dates: Debezium's numbers, not dates: the JSON text
            {"type": "array", "items": {"type": "int32", "name": "io.debezium.time.Date"}},
            "string",
        ),
        ({"type": "map", "keys": {"type": "string"}, "values": {"type": "string"}}, "string"),
        (None, "string"),
    ],
)
def test_column_types(schema: dict[str, Any] | None, expected: str) -> None:
    assert column_type(schema).type == expected


def test_every_type_a_new_column_gets_is_a_property_type_and_fits_its_own_property() -> None:
    for schema in (
        {"type": "int16"},
        {"type": "double"},
        {"type": "boolean"},
        {"type": "int32", "name": "io.debezium.time.Date"},
        {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {}},
        {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"},
        {"type": "int64", "name": "io.debezium.time.MicroTime"},
        {"type": "map"},
    ):
        kind = column_type(schema)
        assert fits(kind, property_of(kind.type)), schema


@pytest.mark.parametrize(
    ("schema", "prop", "ok"),
    [
        ({"type": "int64"}, "integer", True),
        ({"type": "int32"}, "number", True),
        ({"type": "double"}, "integer", False),  # the fraction would be cut
        ({"type": "boolean"}, "integer", False),
        # MariaDB's BOOLEAN is a TINYINT(1) (Debezium: int16): 0 and 1 cast, others mistyped.
        ({"type": "int16"}, "boolean", True),
        # A time into an integer property declared (or evolved) before times landed as text:
        # it keeps Debezium's count (``Feed.integer_columns``).
        ({"type": "int64", "name": "io.debezium.time.MicroTime"}, "integer", True),
        ({"type": "int64", "name": "io.debezium.time.MicroTime"}, "date", False),
        ({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, "date", False),
        ({"type": "int32", "name": "io.debezium.time.Date"}, "timestamp", True),
        ({"type": "string"}, "integer", True),  # text: checked value by value
        ({"type": "int32"}, "string", True),
        (
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "12"},
            },
            "decimal",
            False,
        ),
        (
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "2"},
            },
            "number",
            True,
        ),
        ({"type": "double"}, "boolean", False),
        ({"type": "int64"}, "decimal(10,2)", False),  # 19 digits do not fit in 8
        ({"type": "int32"}, "decimal(12,2)", True),
        (
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "2", "connect.decimal.precision": "12"},
            },
            "decimal(10,2)",
            False,
        ),
        ({"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}, "decimal", True),
        ({"type": "bytes"}, "binary", True),
        ({"type": "array", "items": {"type": "int32"}}, "array<integer>", True),
        ({"type": "int32"}, "array<integer>", False),
    ],
)
def test_what_fits_a_property(schema: dict[str, Any], prop: str, ok: bool) -> None:
    assert fits(column_type(schema), property_of(prop)) is ok


def test_a_column_whose_type_no_longer_fits_is_a_conflict_naming_table_and_column() -> None:
    [after] = docs_events("insert_after_alter")
    typed = DOCS.replace("title: {type: string}", "title: {type: string}\n    tag: {type: date}")
    docs = dataset("docs", typed)
    fine = source_changes("docs", docs, {"public.docs": "docs.Doc"}, [after])
    assert fine.conflicts == [] and fine.new == []  # text into a date: value by value
    micro = {"type": "int64", "name": "io.debezium.time.MicroTimestamp"}
    changed = with_field(after, "tag", micro)
    changes = source_changes("docs", docs, {"public.docs": "docs.Doc"}, [changed])
    [conflict] = changes.conflicts
    assert (conflict.source_table, conflict.column, conflict.property) == (
        "public.docs",
        "tag",
        "tag",
    )
    error = type_changed(changes.conflicts)
    assert error.code == "SOURCE_TYPE_CHANGED"
    assert "'tag'" in error.message and "public.docs" in error.message
    assert "docs.Doc" in error.message and "To fix" in error.message


def test_a_type_change_later_in_the_batch_is_seen_too() -> None:
    first, second = docs_events("insert_after_alter", "update_after_alter")
    typed = DOCS.replace("title: {type: string}", "title: {type: string}\n    tag: {type: integer}")
    later = with_field(second, "tag", {"type": "double"})
    tables = {"public.docs": "docs.Doc"}
    changes = source_changes("docs", dataset("docs", typed), tables, [first, later])
    assert [(c.column, c.type.connect, c.where) for c in changes.conflicts] == [
        ("tag", "double", later.record.where)
    ]


# -- evolving the definitions -------------------------------------------------------------------


def test_types_as_recorded_and_as_the_dataset_file_writes_them() -> None:
    for text, definition in [
        ("string", "{type: string}"),
        ("decimal(10,2)", "{type: decimal, precision: 10, scale: 2}"),
        ("array<integer>", "{type: array, items: {type: integer}}"),
    ]:
        prop = property_of(text)
        assert definition_text(prop) == definition
        assert prop == PropertyDef.model_validate(yaml.safe_load(definition))


def test_evolved_adds_the_property_after_the_others_and_leaves_the_rest() -> None:
    docs = dataset("docs", DOCS)
    [after] = docs_events("insert_after_alter")
    new = source_changes("docs", docs, {"public.docs": "docs.Doc"}, [after]).new
    grown = evolved({"docs": docs}, new)
    assert list(grown["docs"].schemas["docs.Doc"].properties) == ["title", "sourcePosition", "tag"]
    assert docs.schemas["docs.Doc"].properties.keys() == {"title", "sourcePosition"}
    assert evolved(grown, new) == grown  # already there: nothing more


def test_a_meta_column_name_or_a_name_with_double_underscore_is_not_usable() -> None:
    kind = column_type({"type": "int32"})

    def column(name: str) -> NewColumn:
        return NewColumn("f", "docs", "docs.Doc", "public.docs", name, kind, "kafka:t[0]@0")

    assert [column(n).usable for n in ("version", "Updated", "__op", "a-b", "tag_2")] == [
        False,
        False,
        False,
        False,
        True,
    ]
    docs = dataset("docs", DOCS)
    assert evolved({"docs": docs}, [column("version")]) == {"docs": docs}
    assert "cannot be a property" in ignored_warning(column("version"), "evolve")


def test_at_startup_the_file_and_then_the_evolved_properties_the_file_lacks() -> None:
    docs = dataset("docs", DOCS)
    added = [
        EvolvedProperty("docs", "docs.Doc", "tag", "string"),
        EvolvedProperty("docs", "docs.Doc", "score", "integer"),
        EvolvedProperty("docs", "docs.Gone", "x", "string"),  # a schema no longer defined
        EvolvedProperty("other", "o.O", "x", "string"),
    ]
    out = with_evolved({"docs": docs}, added)
    props = out["docs"].schemas["docs.Doc"].properties
    assert list(props) == ["title", "sourcePosition", "tag", "score"]
    assert props["score"].type == "integer" and set(out) == {"docs"}
    # Added to the file later (in another spelling and type): the file's wins.
    later = dataset("docs", DOCS.replace("title: {type: string}", "Tag: {type: string}"))
    props = with_evolved({"docs": later}, added)["docs"].schemas["docs.Doc"].properties
    assert list(props) == ["Tag", "sourcePosition", "score"]


def test_fail_names_feed_table_schema_column_and_what_to_do() -> None:
    [after] = docs_events("insert_after_alter")
    new = source_changes("docs", dataset("docs", DOCS), {"public.docs": "docs.Doc"}, [after]).new
    error = schema_changed(new)
    assert error.code == "SOURCE_SCHEMA_CHANGED"
    for part in ("'docs'", "public.docs", "docs.Doc", "'tag'", "tag: {type: string}"):
        assert part in error.message, part
    assert "schema_changes" in error.message and "To fix" in error.message


# -- the policy ---------------------------------------------------------------------------------


def test_the_policy_is_a_feed_setting_evolve_by_default() -> None:
    datasets = {"shop": dataset("shop", SHOP)}
    cfg = ChangeFeedConfig(name="pg", dataset="shop", topic_prefix="pg")
    assert cfg.schema_changes == "evolve" and feed_of(cfg, 0, datasets).schema_changes == "evolve"
    for policy in ("fail", "ignore"):
        cfg = ChangeFeedConfig(name="pg", dataset="shop", topic_prefix="pg", schema_changes=policy)
        assert feed_of(cfg, 0, datasets).schema_changes == policy
    with pytest.raises(ValueError, match="schema_changes"):
        ChangeFeedConfig(name="pg", dataset="shop", topic_prefix="pg", schema_changes="merge")


def test_an_unknown_policy_in_the_config_file_is_refused_naming_the_key() -> None:
    from streaming.core.config import parse_config

    with pytest.raises(ConfigError, match=r"change_feeds.*schema_changes"):
        parse_config(
            {
                "warehouse": "w",
                "checkpoints": "c",
                "datasets": {},
                "kafka": {
                    "bootstrap": "k:9092",
                    "change_feeds": [
                        {
                            "name": "pg",
                            "dataset": "shop",
                            "topic_prefix": "pg",
                            "schema_changes": "x",
                        }
                    ],
                },
            },
            base=Path("."),
            environ={},
        )


def _ready(policy: SchemaChanges) -> tuple[Any, list[Any]]:
    prefix = ADDED["topic_prefix"]
    docs = feed({"public.docs": "docs.Doc"}, prefix=prefix, metadata=False)
    docs = dataclasses.replace(docs, dataset="docs", schema_changes=policy)
    records = [received(ADDED[n], i) for i, n in enumerate(["insert_after_alter"])]
    ready = assemble(docs, records, decode_json_value, T0).ready
    return docs, [event for item in ready if item.error is None for event in item.events]


def test_ignore_leaves_the_column_out_with_one_warning_per_column(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without Spark: ``ignore`` writes nothing (the session is never used)."""
    docs_feed, ready = _ready("ignore")
    columns = SourceColumns(cast(SparkSession, None), Layout("w", "c", "q"))
    datasets = {"docs": dataset("docs", DOCS)}
    with caplog.at_level(logging.WARNING):
        for batch in range(3):
            assert columns.follow(docs_feed, datasets, ready, batch) is datasets
    warnings = [r.getMessage() for r in caplog.records if "'tag'" in r.getMessage()]
    assert len(warnings) == 1
    assert "left out" in warnings[0] and "schema_changes is ignore" in warnings[0]


def test_fail_raises_before_anything_is_written() -> None:
    docs_feed, ready = _ready("fail")
    columns = SourceColumns(cast(SparkSession, None), Layout("w", "c", "q"))
    with pytest.raises(SourceSchemaChanged, match="'tag'") as raised:
        columns.follow(docs_feed, {"docs": dataset("docs", DOCS)}, ready, 0)
    assert raised.value.code == "SOURCE_SCHEMA_CHANGED"


def test_a_property_no_column_feeds_is_absent_and_named_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A property whose column the events' converter schema does not list (Debezium leaves
    out a column of a type it does not capture, e.g. PostgreSQL's ``box``, and a dropped
    column): named once per run, never silently NULL; the position the job fills is not."""
    before, after = docs_events("insert_before_alter", "insert_after_alter")
    typed = DOCS.replace("title: {type: string}", "title: {type: string}\n    tag: {type: string}")
    docs = dataset("docs", typed)
    tables = {"public.docs": "docs.Doc"}
    [absent] = source_changes("docs", docs, tables, [before], ["sourcePosition"]).absent
    assert (absent.schema, absent.source_table, absent.property) == (
        "docs.Doc",
        "public.docs",
        "tag",
    )
    assert source_changes("docs", docs, tables, [after], ["sourcePosition"]).absent == []
    docs_feed = dataclasses.replace(feed(tables, prefix=ADDED["topic_prefix"]), dataset="docs")
    columns = SourceColumns(cast(SparkSession, None), Layout("w", "c", "q"))
    with caplog.at_level(logging.WARNING):
        for batch in range(3):
            columns.follow(docs_feed, {"docs": docs}, [before], batch)
    [warning] = [r.getMessage() for r in caplog.records if "'tag'" in r.getMessage()]
    assert "public.docs" in warning and "NULL" in warning and "box" in warning
    assert "sourcePosition" not in warning
