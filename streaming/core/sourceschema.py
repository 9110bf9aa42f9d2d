"""A source table's columns as its change events carry them, against the schema's properties
(docs/interface.md, "Columns added in the source"). Pure: no Spark, no Kafka client.

A column of a change event that the schema has no property for is *new*; what happens to it is
the feed's ``schema_changes`` policy (``kafka.change_feeds[].schema_changes``):

- ``evolve`` (the default): it becomes a nullable property of the schema — named as the column
  (the name the job matches columns by: any case, with or without underscores), typed from the
  JSON converter's Connect schema (``column_type``), or ``string`` without one (a value of any
  JSON type keeps as text; a type guessed from the first values could be refused by later
  ones) — its column is added to the schema's tables before the event is applied, and what was
  added is kept in ``_system/evolved_properties`` so that a restart reads the same definition
  (``with_evolved``);
- ``fail``: the job stops before applying the event (``SOURCE_SCHEMA_CHANGED``);
- ``ignore``: the column is left out, one warning per column.

Whatever the policy, a column whose Connect type no longer fits its property's type (``fits``:
its values would be cut or changed on the way into it — a double into an integer property, a
timestamp into a date) stops the job (``SOURCE_TYPE_CHANGED``). Text fits every property: its
values are checked one by one as a file's are (a value that does not cast is a mistyped value).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from streaming.core.catalog import META_COLUMNS, Dataset, PropertyDef, SchemaDef
from streaming.core.codes import Code
from streaming.core.columns import loose
from streaming.core.errors import CdcError

__all__ = [
    "DATES",
    "MAX_PRECISION",
    "SHAPE_DEPTH",
    "SHAPE_KEYS",
    "TIMESTAMP_UNITS",
    "TIME_DIGITS",
    "UNTYPED",
    "AbsentColumn",
    "Changes",
    "ColumnType",
    "EvolvedProperty",
    "Kind",
    "NewColumn",
    "SchemaChanges",
    "SourceSchemaChanged",
    "SourceTypeChanged",
    "TypeConflict",
    "absent_warning",
    "column_type",
    "definition_text",
    "evolved",
    "field_shape",
    "fits",
    "ignored_warning",
    "property_of",
    "schema_changed",
    "source_changes",
    "type_changed",
    "type_text",
    "with_evolved",
]

SchemaChanges = Literal["evolve", "fail", "ignore"]
"""A feed's policy for a column its events carry and its schema lacks."""

Kind = Literal[
    "integer",
    "float",
    "decimal",
    "boolean",
    "date",
    "timestamp",
    "time",
    "text",
    "bytes",
    "composite",
]

MAX_PRECISION = 38
"""Spark's (and Delta's) widest decimal."""
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}
"""Decimal digits an integer of so many bits needs."""

_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
DATES = frozenset(("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"))
"""Connect's and Debezium's dates: days since 1970."""
TIMESTAMP_UNITS = {
    "io.debezium.time.Timestamp": 1_000,
    "org.apache.kafka.connect.data.Timestamp": 1_000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
}
"""Connect's and Debezium's timestamps counted since 1970 → their units a second."""
_TIMESTAMPS = {*TIMESTAMP_UNITS, "io.debezium.time.ZonedTimestamp"}
TIME_DIGITS = {
    "io.debezium.time.Time": 3,
    "org.apache.kafka.connect.data.Time": 3,
    "io.debezium.time.MicroTime": 6,
    "io.debezium.time.NanoTime": 9,
}
"""Connect's and Debezium's times of day (a count since midnight) → the digits of their unit:
they land as text (``core.changefeed.time_text``)."""
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"


class SourceSchemaChanged(CdcError):
    """A feed with ``schema_changes: fail`` met a column its schema lacks: the job stops."""

    code = Code.SOURCE_SCHEMA_CHANGED


class SourceTypeChanged(CdcError):
    """A column's type in the source no longer fits its property: the job stops."""

    code = Code.SOURCE_TYPE_CHANGED


@dataclass(frozen=True)
class ColumnType:
    """What a column's Connect schema says: the property type a new column gets, the kind of
    its values (``fits``) and the type as the schema names it (for messages)."""

    type: str
    """The property type a new column gets, as ``property_of`` reads it: a scalar type's
    name, ``decimal(<precision>,<scale>)`` or ``array<<scalar type>>``."""
    kind: Kind
    connect: str
    bits: int = 0
    """integer: 8, 16, 32 or 64."""
    scale: int | None = None
    """decimal: its scale; None: variable (Debezium's VariableScaleDecimal)."""
    precision: int | None = None
    """decimal: its precision, if the schema gives it."""


UNTYPED = ColumnType("string", "text", "no schema")
"""A column of an event without the converter's schema (``schemas.enable=false``, DMS)."""


def column_type(schema: Mapping[str, Any] | None) -> ColumnType:
    """A column's Connect schema (a field of the envelope's ``after``/``before`` struct) → its
    type: int8/16/32/64 → integer; float/double → number; boolean; string → string; Date → date;
    Timestamp, Micro-/NanoTimestamp, ZonedTimestamp → timestamp; Decimal → decimal of its
    precision (38 if the schema has none) and scale; Debezium's VariableScaleDecimal (a NUMERIC
    without size) → string (its exact text: no one scale holds every value); bytes → binary;
    Json, Uuid, Enum, Xml, ZonedTime, Interval … (strings) → string; Time, MicroTime, NanoTime →
    string (``HH:MM:SS.ffffff`` text: a count since midnight in ms, µs or ns as Debezium sends
    it would change unit with the column's precision); an array of integers,
    numbers, booleans or strings → an array of them; other structs, arrays, maps → string (the
    JSON text)."""
    if not schema:
        return UNTYPED
    base = str(schema.get("type") or "")
    name = str(schema.get("name") or "")
    connect = f"{name} ({base})" if name else base
    if name in DATES:
        return ColumnType("date", "date", connect)
    if name in _TIMESTAMPS:
        return ColumnType("timestamp", "timestamp", connect)
    if name in TIME_DIGITS:
        return ColumnType("string", "time", connect)
    if name == _DECIMAL:
        parameters = schema.get("parameters") or {}
        scale = int(parameters.get("scale", 0))
        given = int(parameters.get("connect.decimal.precision", 0) or 0) or None
        connect = f"{name} (scale {scale}{f', precision {given}' if given else ''})"
        precision = given or MAX_PRECISION
        sized = 0 <= scale <= precision <= MAX_PRECISION
        type_ = f"decimal({precision},{scale})" if sized else "string"
        return ColumnType(type_, "decimal", connect, 0, scale, given)
    if name == _VARIABLE_DECIMAL:
        return ColumnType("string", "decimal", connect)
    if base in _INTS:
        return ColumnType("integer", "integer", connect, _INTS[base])
    if base in ("float", "double", "float32", "float64"):
        return ColumnType("number", "float", connect)
    if base == "boolean":
        return ColumnType("boolean", "boolean", connect)
    if base == "bytes":
        return ColumnType("binary", "bytes", connect)
    if base == "array":
        items = schema.get("items")
        if not isinstance(items, dict):
            return ColumnType("string", "composite", connect)
        element = column_type(items)
        simple = element.kind in ("integer", "float", "boolean", "text") and not items.get("name")
        type_ = f"array<{element.type}>" if simple else "string"
        return ColumnType(type_, "composite", f"array of {element.connect}")
    if base in ("struct", "map"):
        return ColumnType("string", "composite", connect)
    return ColumnType("string", "text", connect)


SHAPE_KEYS = ("type", "name", "parameters", "items")
SHAPE_DEPTH = 3
"""What ``column_type`` reads of a column's Connect schema, and how deep into ``items``: an
array of arrays is text whatever its elements."""


def field_shape(schema: Mapping[str, Any], depth: int = SHAPE_DEPTH) -> dict[str, Any]:
    """A column's Connect schema as far as ``column_type`` reads it (``SHAPE_KEYS``, absent
    ones left out): what a decoded change event keeps of its converter schema."""
    out: dict[str, Any] = {}
    for key in SHAPE_KEYS:
        value = schema.get(key)
        if value is None:
            continue
        if key == "items":
            if depth <= 1 or not isinstance(value, dict):
                continue
            value = field_shape(value, depth - 1)
        out[key] = value
    return out


def property_of(type_: str) -> PropertyDef:
    """The property a ``ColumnType.type`` (or a row of ``_system/evolved_properties``) stands
    for: ``integer``, ``decimal(10,2)``, ``array<string>`` …"""
    if type_.startswith("decimal(") and type_.endswith(")"):
        precision, scale = (int(n) for n in type_[len("decimal(") : -1].split(","))
        return PropertyDef(type="decimal", precision=precision, scale=scale)
    if type_.startswith("array<") and type_.endswith(">"):
        return PropertyDef(type="array", items=property_of(type_[len("array<") : -1]))
    return PropertyDef(type=type_)


def type_text(prop: PropertyDef) -> str:
    """A property's type as messages and ``property_of`` write it."""
    if prop.base_type == "decimal":
        return "decimal({},{})".format(*prop.decimal_digits)
    if prop.items is not None:
        return f"array<{type_text(prop.items)}>"
    return prop.base_type


def definition_text(prop: PropertyDef) -> str:
    """A property's definition as the dataset file writes it (``{type: string}``)."""
    if prop.base_type == "decimal":
        precision, scale = prop.decimal_digits
        return f"{{type: decimal, precision: {precision}, scale: {scale}}}"
    if prop.items is not None:
        return f"{{type: array, items: {definition_text(prop.items)}}}"
    return f"{{type: {prop.type}}}"


_FITS: dict[str, set[str]] = {
    "integer": {"integer", "time"},
    "number": {"integer", "float", "decimal"},
    "decimal": {"integer", "decimal"},
    "boolean": {"boolean", "integer"},
    "date": {"date"},
    "datetime": {"date", "timestamp"},
    "timestamp": {"date", "timestamp"},
    "binary": {"bytes"},
}


def fits(column: ColumnType, prop: PropertyDef) -> bool:
    """Whether every value of a column of type ``column`` keeps in the property ``prop``: a
    string property keeps any value (as text); text (and a column without a schema) goes into
    any property, its values checked one by one; a number keeps integers, floats and decimals
    (as its definition chose); a decimal(P, S) integers and decimals of at most S digits after
    the point and P - S before it (a variable one is checked value by value); an integer
    integers, and times of day as the count Debezium sends (a property declared before times
    landed as text: ``Feed.integer_columns``); a boolean booleans and integers (MariaDB's
    ``BOOLEAN`` is a ``TINYINT(1)``: 0 and 1 cast, any other value is a mistyped value); a date
    only dates; a timestamp dates and timestamps. Composite properties (array,
    map, object) take composite columns and text."""
    if column.kind == "text" or prop.base_type == "string":
        return True
    if prop.base_type in ("array", "map", "object"):
        return column.kind == "composite"
    if column.kind not in _FITS.get(prop.base_type, set()):
        return False
    if prop.base_type == "decimal":
        precision, scale = prop.decimal_digits
        if column.kind == "integer":
            return _INT_DIGITS.get(column.bits, 19) <= precision - scale
        if column.scale is None:  # variable: value by value
            return True
        digits = (column.precision or 0) - column.scale
        return column.scale <= scale and digits <= precision - scale
    return True


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class NewColumn:
    """A column of a source table its schema has no property for."""

    feed: str
    dataset: str
    schema: str
    source_table: str
    column: str
    type: ColumnType
    where: str
    """The record it was first seen in (``kafka:<topic>[<partition>]@<offset>``)."""

    @property
    def usable(self) -> bool:
        """Whether it can be a property: a valid name, not an object's meta column."""
        if not _NAME.fullmatch(self.column) or self.column.startswith("__"):
            return False
        return self.column.lower() not in META_COLUMNS

    @property
    def property(self) -> PropertyDef:
        return property_of(self.type.type)


@dataclass(frozen=True)
class TypeConflict:
    """A column whose Connect type does not fit its property's type."""

    feed: str
    dataset: str
    schema: str
    source_table: str
    column: str
    property: str
    property_type: str
    type: ColumnType
    where: str


@dataclass(frozen=True)
class AbsentColumn:
    """A property of a schema that no column of its source table's events feeds, as the
    converter's schema lists them: Debezium leaves out a column of a type it does not capture
    (PostgreSQL's geometric types other than ``point``, ``pg_lsn`` …) and a column dropped in
    the source; rows this feed writes leave the property NULL."""

    feed: str
    schema: str
    source_table: str
    property: str
    where: str


@dataclass
class Changes:
    """What a feed's ready events carry that their schemas do not say."""

    new: list[NewColumn] = field(default_factory=list)
    conflicts: list[TypeConflict] = field(default_factory=list)
    absent: list[AbsentColumn] = field(default_factory=list)


def source_changes(
    feed: str,
    dataset: Dataset,
    tables: Mapping[str, str],
    events: Iterable[Any],
    filled: Collection[str] = (),
) -> Changes:
    """The new columns, the type conflicts and the absent columns of a feed's ``events``
    (``core.changefeed``'s ``DataEvent``s: ``table``, ``row``, ``fields``, ``record``; in the
    order they apply), each column once: at its first event. ``tables``: source table → schema
    name; ``filled``: the properties the job fills itself (the position, the source time),
    never absent."""
    out = Changes()
    seen: set[tuple[str, str, tuple[str, str, str]]] = set()
    named: set[tuple[str, str]] = set()
    known: dict[str, dict[str, str]] = {}
    missed: set[tuple[str, str]] = set()
    for event in events:
        schema_name = tables.get(event.table)
        schema = dataset.get(schema_name) if schema_name else None
        if schema is None or event.row is None:
            continue
        by_loose = known.get(schema.name)
        if by_loose is None:
            by_loose = known[schema.name] = _property_names(schema)
        fields = event.fields or {}
        if fields:  # the converter's schema lists every column the connector sends
            sent = {by_loose.get(loose(c)) for c in fields}
            for name in schema.data_columns():
                if name not in sent and name not in filled and (schema.name, name) not in missed:
                    missed.add((schema.name, name))
                    out.absent.append(
                        AbsentColumn(feed, schema.name, event.table, name, event.where)
                    )
        for column in (*event.row, *(c for c in fields if c not in event.row)):
            field_schema = fields.get(column)
            seen_as = (schema.name, column, _signature(field_schema))
            if seen_as in seen:  # each column once per type it comes with
                continue
            seen.add(seen_as)
            kind = column_type(field_schema) if fields else UNTYPED
            where = event.where
            prop = by_loose.get(loose(column))
            if prop is None:
                if (schema.name, column) not in named:
                    named.add((schema.name, column))
                    new = NewColumn(
                        feed, dataset.name, schema.name, event.table, column, kind, where
                    )
                    out.new.append(new)
                continue
            definition = schema.properties.get(prop)
            if definition is not None and fields and not fits(kind, definition):
                out.conflicts.append(
                    TypeConflict(
                        feed,
                        dataset.name,
                        schema.name,
                        event.table,
                        column,
                        prop,
                        type_text(definition),
                        kind,
                        where,
                    )
                )
    return out


def _signature(schema: Mapping[str, Any] | None) -> tuple[str, str, str]:
    if not schema:
        return ("", "", "")
    parameters = schema.get("parameters")
    return (str(schema.get("type")), str(schema.get("name") or ""), str(parameters or ""))


def _property_names(schema: SchemaDef) -> dict[str, str]:
    """loose spelling → property: the schema's properties, an object's id, and the columns
    its ``columnMapping`` names."""
    names = {loose(p): p for p in schema.properties}
    if schema.is_object:
        names.setdefault("id", "id")
    for prop, column in schema.column_mapping.items():
        names.setdefault(loose(column), prop)
    return names


def evolved(datasets: Mapping[str, Dataset], new: Sequence[NewColumn]) -> dict[str, Dataset]:
    """``datasets`` with each usable new column a property of its schema (after the others);
    a column whose schema already has a property of that spelling is left as it is."""
    out = dict(datasets)
    for column in new:
        if not column.usable:
            continue
        dataset = out.get(column.dataset)
        schema = dataset.get(column.schema) if dataset else None
        if dataset is None or schema is None:
            continue
        if any(loose(p) == loose(column.column) for p in schema.properties):
            continue
        grown = schema.model_copy(
            update={"properties": {**schema.properties, column.column: column.property}}
        )
        out[column.dataset] = dataset.model_copy(
            update={"schemas": {**dataset.schemas, column.schema: grown}}
        )
    return out


@dataclass(frozen=True)
class EvolvedProperty:
    """A property a change feed added (a row of ``_system/evolved_properties``)."""

    dataset: str
    schema: str
    property: str
    type: str


def with_evolved(
    datasets: Mapping[str, Dataset], added: Iterable[EvolvedProperty]
) -> dict[str, Dataset]:
    """The definitions the job runs with: each dataset file's, and after its properties those a
    change feed added that the file does not have (in any case or spelling: the file's wins,
    so a property added to the file later is the file's from then on)."""
    out = dict(datasets)
    for item in added:
        dataset = out.get(item.dataset)
        schema = dataset.get(item.schema) if dataset else None
        if dataset is None or schema is None or schema.kind not in ("object", "record"):
            continue
        if any(loose(p) == loose(item.property) for p in schema.properties):
            continue
        prop = property_of(item.type)
        grown = schema.model_copy(update={"properties": {**schema.properties, item.property: prop}})
        out[item.dataset] = dataset.model_copy(
            update={"schemas": {**dataset.schemas, item.schema: grown}}
        )
    return out


def _described(column: NewColumn) -> str:
    return (
        f"column {column.column!r} of source table {column.source_table} (schema "
        f"{column.schema}, type {column.type.connect}, first in {column.where})"
    )


def schema_changed(new: Sequence[NewColumn]) -> SourceSchemaChanged:
    """The stop of a feed with ``schema_changes: fail``."""
    first = new[0]
    columns = "; ".join(_described(c) for c in new)
    lines = "\n".join(
        f"    {c.schema}: {{properties: {{{c.column}: {definition_text(c.property)}}}}}"
        for c in new
    )
    return SourceSchemaChanged(
        f"change feed {first.feed!r} (dataset {first.dataset}): the source has a column its "
        f"schema lacks — {columns}. Nothing from this batch on was applied (it is read again "
        "at the next start). To fix: add the property to the dataset definition, e.g.\n"
        f"{lines}\nor set kafka.change_feeds[].schema_changes to evolve (add it to the tables) "
        "or ignore (leave it out), then start the job again"
    )


def type_changed(conflicts: Sequence[TypeConflict]) -> SourceTypeChanged:
    """The stop for columns whose type no longer fits their property."""
    first = conflicts[0]
    parts = "; ".join(
        f"column {c.column!r} of source table {c.source_table} (schema {c.schema}, property "
        f"{c.property}: {c.property_type}) now has type {c.type.connect} (first in {c.where})"
        for c in conflicts
    )
    return SourceTypeChanged(
        f"change feed {first.feed!r} (dataset {first.dataset}): {parts}; its values would not "
        "keep in the property's type, so nothing from this batch on was applied (it is read "
        "again at the next start). To fix: change the column back to a type that fits in the "
        "source, or add the column under a new property name in the source and the definition "
        "(the tables cannot change a column's type in place)"
    )


def ignored_warning(column: NewColumn, policy: SchemaChanges) -> str:
    """The one warning for a new column that is left out."""
    if not column.usable:
        why = (
            f"its name cannot be a property of {column.schema} (an object's meta column, a "
            "name with __ or other than letters, digits and _)"
        )
        fix = "rename it in the source, or map it with the schema's columnMapping"
    else:
        why = f"the feed's schema_changes is {policy}"
        fix = (
            f"add `{column.column}: {definition_text(column.property)}` to the properties of "
            f"{column.schema}, or set schema_changes: evolve"
        )
    return (
        f"change feed {column.feed!r}: {_described(column)} is not in the schema and is left "
        f"out: {why}. To keep its values: {fix}"
    )


def absent_warning(column: AbsentColumn) -> str:
    """The line an absent column is named in, once per run (``runtime.sourcecolumns``)."""
    return (
        f"change feed {column.feed!r}: the events of source table {column.source_table} carry "
        f"no column for property {column.property!r} of {column.schema} (first seen at "
        f"{column.where}): the rows this feed writes leave it NULL. Debezium leaves out a "
        "column of a type it does not capture (PostgreSQL's box, circle, line, lseg, path, "
        "polygon, pg_lsn; see docs/interface.md) and a column dropped in the source: cast it "
        "in the source (a generated text column), or remove the property"
    )
