"""Schema evolution: an old table schema against a new dataset definition, without Spark."""

from __future__ import annotations

import json

import pytest
import yaml
from pyspark.sql.types import (
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from streaming.core.catalog import SchemaDef, parse_dataset
from streaming.core.layout import Layout
from streaming.storage.evolution import (
    DELETION_VECTORS_PROPERTY,
    TOMBSTONE_PROPERTY,
    WATERMARK_PROPERTY,
    Found,
    SchemaPlan,
    compare,
    delta_widens,
    key_properties,
    plan_schema,
    refusal,
    schema_tables,
    type_name,
)
from streaming.storage.schemas import current_schema, history_schema, tombstones_schema

LAYOUT = Layout("/wh", "/cp")
ORDER = """\
sales.Order:
  properties:
    status: {type: string}
    amount: {type: integer}
    owner: {type: object, properties: {name: {type: string}}}
    lines: {type: array, items: {type: object, properties: {sku: {type: string}}}}
    prices: {type: map, values: {type: object, properties: {net: {type: integer}}}}
    ts: {type: integer}
    deleted: {type: boolean}
  watermark: [ts]
  tombstone: {column: deleted}
"""


def order(edit: str = "") -> SchemaDef:
    """sales.Order, with ``edit`` (YAML) merged into its definition."""
    body = yaml.safe_load(ORDER)
    for key, value in (yaml.safe_load(edit) or {}).items():
        if key == "properties":
            for prop, definition in value.items():
                if definition is None:
                    del body["sales.Order"]["properties"][prop]
                else:
                    body["sales.Order"]["properties"][prop] = definition
        else:
            body["sales.Order"][key] = value
    return parse_dataset("sales", body).schemas["sales.Order"]


def existing(schema: SchemaDef) -> dict[str, Found]:
    """The tables the job made for ``schema`` (keys recorded), by path."""
    return {
        t.path: Found(t.schema, dict(t.properties)) for t in schema_tables(LAYOUT, "sales", schema)
    }


def plan(old: SchemaDef, new: SchemaDef, found: dict[str, Found] | None = None) -> SchemaPlan:
    tables = schema_tables(LAYOUT, "sales", new)
    return plan_schema("sales", new, tables, found if found is not None else existing(old))


def test_nothing_changed_is_nothing_to_do() -> None:
    p = plan(order(), order())
    assert p.problems == [] and p.create == [] and p.record == {}
    assert all(not c.added and not c.unwritten for c in p.changes.values())


@pytest.mark.parametrize(
    ("had", "wanted", "recorded"),
    [
        (None, False, None),  # a table of an older version: off, as the session default is
        (None, True, "true"),
        ("false", True, "true"),
        ("true", False, "false"),
        ("true", True, None),
    ],
)
def test_the_current_tables_deletion_vectors_follow_the_config(
    had: str | None, wanted: bool, recorded: str | None
) -> None:
    schema = order()
    found = existing(schema)
    current = "/wh/sales/sales/Order"
    properties = {
        k: v for k, v in found[current].properties.items() if k != DELETION_VECTORS_PROPERTY
    }
    found[current] = Found(
        found[current].schema, {**properties, **({DELETION_VECTORS_PROPERTY: had} if had else {})}
    )
    tables = schema_tables(LAYOUT, "sales", schema, deletion_vectors=wanted)
    p = plan_schema("sales", schema, tables, found)
    assert p.problems == [] and p.create == []
    assert p.record == ({current: {DELETION_VECTORS_PROPERTY: recorded}} if recorded else {})
    created = {t.role: dict(t.properties) for t in tables}
    assert created["current"][DELETION_VECTORS_PROPERTY] == str(wanted).lower()
    assert DELETION_VECTORS_PROPERTY not in created["history"]  # append-only: nothing to mark


def test_an_added_property_goes_to_every_table_at_its_place() -> None:
    p = plan(order(), order("properties: {color: {type: string}}"))
    assert p.problems == []
    ddl = {path.split("/wh/")[1]: [c.ddl() for c in ch.added] for path, ch in p.changes.items()}
    assert ddl == {
        "sales/sales/Order": ["`color` string AFTER `deleted`"],
        "sales/_history/sales/Order": ["`color` string AFTER `deleted`"],  # before __deleted
        "sales/_tombstones/sales/Order": [],
    }


def test_fields_added_inside_objects_arrays_and_maps_are_nested_columns() -> None:
    new = order(
        """
        properties:
          owner: {type: object, properties: {phone: {type: string}, name: {type: string}}}
          lines: {type: array, items: {type: object,
                  properties: {sku: {type: string}, qty: {type: integer}}}}
          prices: {type: map, values: {type: object,
                   properties: {net: {type: integer}, tax: {type: integer}}}}
        """
    )
    changes = compare(current_schema(order()), current_schema(new))
    assert [c.ddl() for c in changes.added] == [
        "`owner`.`phone` string FIRST",
        "`lines`.`element`.`qty` bigint AFTER `sku`",
        "`prices`.`value`.`tax` bigint AFTER `net`",
    ]
    assert changes.mismatches == [] and changes.unwritten == []


def test_a_removed_property_keeps_its_column_unwritten() -> None:
    p = plan(order(), order("properties: {status: null}"))
    assert p.problems == []
    assert {path: ch.unwritten for path, ch in p.changes.items() if ch.unwritten} == {
        f"/wh/sales/{t}sales/Order": ["status"] for t in ("", "_history/")
    }


def test_a_property_back_with_its_old_type_is_written_again() -> None:
    p = plan(order("properties: {status: null}"), order(), existing(order()))
    assert p.problems == []


@pytest.mark.parametrize(
    ("edit", "old", "new"),
    [
        ("properties: {amount: {type: boolean}}", "integer", "boolean"),
        ("properties: {amount: {type: number}}", "integer", "number"),
        ("properties: {status: {type: integer}}", "string", "integer"),
        ("properties: {amount: {type: decimal}}", "integer", "decimal"),
        ("properties: {amount: {type: array, items: {type: integer}}}", "integer", "array"),
    ],
)
def test_a_changed_type_refuses_the_start_naming_everything(edit: str, old: str, new: str) -> None:
    p = plan(order(), order(edit))
    prop = "amount" if "amount" in edit else "status"
    (problem,) = p.problems  # once, though current and history both have the column
    assert problem.startswith(f"dataset sales, schema sales.Order, {prop}: type changed from {old}")
    assert f"to {new}" in problem and "(tables: current, history)" in problem
    assert f"To fix: put back the type {old} for '{prop}'" in problem
    error = refusal([p])
    assert error is not None and error.code == "INCOMPATIBLE_SCHEMA_CHANGE"
    assert "consumed no input" in error.message and problem in error.message


def test_why_a_widening_is_refused_names_delta_rs() -> None:
    (problem,) = plan(order(), order("properties: {amount: {type: decimal}}")).problems
    assert "only with the typeWidening table feature, which delta-rs (1.6.6)" in problem
    (problem,) = plan(order(), order("properties: {amount: {type: number}}")).problems
    assert "Delta cannot change a bigint column to double in place" in problem


def test_nested_type_change_and_nested_removal_are_refused() -> None:
    new = order(
        """
        properties:
          owner: {type: object, properties: {name: {type: integer}}}
          lines: {type: array, items: {type: object, properties: {other: {type: string}}}}
        """
    )
    problems = plan(order(), new).problems
    assert any("owner.name: type changed from string to integer" in p for p in problems)
    assert any("lines.items.sku: removed from inside an object property" in p for p in problems)


def test_a_name_differing_only_in_case_is_refused() -> None:
    (problem,) = plan(order(), order("properties: {status: null, Status: {type: string}}")).problems
    assert "renamed from 'status' to 'Status'" in problem


def test_watermark_and_tombstone_changes_are_refused() -> None:
    problems = plan(order(), order("watermark: [amount]")).problems
    assert any("watermark: changed from ['ts'] to ['amount']" in p for p in problems)
    problems = plan(order(), order("tombstone: {column: status, value: 'X'}")).problems
    assert any(
        'tombstone: changed from {"column": "deleted", "value": null} to '
        '{"column": "status", "value": "X"}' in p
        for p in problems
    )


def test_keys_of_tables_from_an_older_version_are_read_from_the_tombstones_and_recorded() -> None:
    old = order()
    found = existing(old)
    for path, table in found.items():  # an older version recorded no keys
        found[path] = Found(table.schema, {})
    p = plan(old, old, found)
    assert p.problems == []
    assert p.record == {"/wh/sales/sales/Order": key_properties(old)}
    assert json.loads(p.record["/wh/sales/sales/Order"][WATERMARK_PROPERTY]) == ["ts"]
    assert json.loads(p.record["/wh/sales/sales/Order"][TOMBSTONE_PROPERTY]) == {
        "column": "deleted",
        "value": None,
    }
    # ... and a watermark other than the tombstones' is refused even then
    assert any(
        "watermark" in problem for problem in plan(old, order("watermark: []"), found).problems
    )


def test_an_object_turned_into_a_record_is_refused() -> None:
    old = order()
    record = parse_dataset(
        "sales", {"sales.Order": {"type": "record", "properties": {"status": {"type": "string"}}}}
    ).schemas["sales.Order"]
    problems = plan(old, record).problems
    assert any("id: a NOT NULL column is no longer written" in p for p in problems)


def test_missing_tables_are_created() -> None:
    new = order()
    found = existing(new)
    history = LAYOUT.history("sales", "sales.Order")
    del found[history]
    p = plan(new, new, found)
    assert [t.path for t in p.create] == [history]
    assert p.create[0].schema == history_schema(new)


def test_tombstones_table_has_the_watermark_types() -> None:
    assert tombstones_schema(order())["watermark"].dataType.simpleString() == "struct<ts:bigint>"


def test_type_names_are_the_definitions() -> None:
    assert [type_name(t) for t in (LongType(), DoubleType(), TimestampType(), StringType())] == [
        "integer",
        "number",
        "timestamp",
        "string",
    ]


W: list[tuple[DataType, DataType, bool]] = [
    (IntegerType(), LongType(), True),
    (LongType(), IntegerType(), False),
    (ByteType(), DoubleType(), True),
    (LongType(), DoubleType(), False),
    (LongType(), DecimalType(38, 9), True),
    (LongType(), DecimalType(19, 0), False),
    (IntegerType(), DecimalType(10, 0), True),
    (FloatType(), DoubleType(), True),
    (DecimalType(10, 1), DecimalType(12, 3), True),
    (DecimalType(10, 1), DecimalType(11, 3), False),
    (DateType(), TimestampNTZType(), True),
    (DateType(), TimestampType(), False),
    (StringType(), LongType(), False),
]


@pytest.mark.parametrize(("old", "new", "widens"), W)
def test_delta_type_widening_rules(old: DataType, new: DataType, widens: bool) -> None:
    assert delta_widens(old, new) is widens
