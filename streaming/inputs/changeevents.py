"""Debezium change events decoded by Spark: one JSON parse a record, on the executors' JVMs.

Not used by the job yet (``runtime.feeds`` decodes with the rules): it runs 2.4-5x the rules'
time today (bench workload ``Decode``) — higher-order functions run interpreted, a lambda a
column, and the key's variant parse and the plan's size cost more than expected. Issue 58.

``core.changefeed.read_debezium`` and ``core.feedevents.decoded`` are the rules, and stay the
reference and the fallback. ``decode`` computes the same decoded row (``DECODED_FIELDS``) with
Spark's expressions for every record it can read as those rules do — the JSON converter's
envelope with or without its ``schema``/``payload`` wrapper, BEGIN/END, tombstones, truncates,
PostgreSQL's, MariaDB's, MySQL's and SQL Server's positions, Connect's dates, timestamps, times
of day and decimals, TOAST placeholders — and marks every other record not ``decodable``: the
Python rules read it, or reject it with their code. Among those: text that is not UTF-8 or not
a JSON object, a value outside a type's range (PostgreSQL's ``infinity``), a decimal wider than
16 bytes, a key that is not an object of strings, integers and booleans, a placeholder in a
column whose value the rules convert, anything this module does not know.

Where Spark's reader and Python's differ it is on input no converter writes, and the two make
no claim of equivalence there (docs/interface.md): a key repeated in one object (Python keeps
the last value, Spark's map the first), text after the first JSON value (Spark ignores it), a
number where the schema names a decimal's base64 bytes, an object with keys besides ``schema``
and ``payload``. A float keeps its value but may be written otherwise (``1.0E20`` for
``1e+20``): a property of a numeric type holds the same number.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streaming.core.changefeed import (
    KEY_COLUMN,
    OP_COLUMN,
    POSITION_COLUMN,
    SNAPSHOT_INCREMENTAL,
    SNAPSHOT_LAST,
    TIME_COLUMN,
    Feed,
    placeholder_texts,
    placeholders,
)
from streaming.core.feedevents import DECODED_FIELDS
from streaming.core.fold import FLAGS, MISSING
from streaming.core.sourceschema import DATES, TIME_DIGITS, TIMESTAMP_UNITS

__all__ = ["DECODABLE", "VALUE_SCHEMA", "decodable_feed", "decode"]

DECODABLE = "decodable"
"""The column ``decode`` adds: whether the record's decoded row is Spark's (else the Python
rules must read it)."""

_PARAMETERS = "parameters: map<string,string>"
_FIELD = (
    f"struct<field: string, type: string, name: string, {_PARAMETERS}, "
    f"items: struct<type: string, name: string, {_PARAMETERS}, "
    f"items: struct<type: string, name: string, {_PARAMETERS}>>>"
)
_ENVELOPE = {
    "before": "map<string,string>",
    "after": "map<string,string>",
    "op": "string",
    "source": (
        "struct<connector: string, lsn: long, sequence: string, file: string, pos: long, "
        "row: long, ts_ms: long, snapshot: string, commit_lsn: string, change_lsn: string>"
    ),
    "transaction": "struct<id: string, data_collection_order: long>",
    "status": "string",
    "id": "string",
    "data_collections": "array<struct<data_collection: string, event_count: long>>",
}
_ENVELOPE_DDL = ", ".join(f"{name}: {kind}" for name, kind in _ENVELOPE.items())
VALUE_SCHEMA = (
    f"schema struct<fields: array<struct<field: string, fields: array<{_FIELD}>>>>, "
    f"payload struct<{_ENVELOPE_DDL}>, "
    + ", ".join(f"{name} {kind}" for name, kind in _ENVELOPE.items())
    + ", __corrupt string"
)
"""One parse of a record's value: the envelope with the converter's wrapper (``schema``: the
columns' Connect schemas as far as they are read; ``payload``) and without it (the same fields
at the top); ``__corrupt``: the text of a record the reader could not take."""

_PARSE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "__corrupt"}
_INTEGER = "^-?[0-9]{1,19}$"  # a long's digits (try_cast refuses what does not fit)
_DIGITS = "^[0-9]{1,18}$"
_LONG_MIN = -(2**63)
_DAYS = (-719_162, 2_932_896)  # 0001-01-01 .. 9999-12-31, days since 1970
_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)
_BASE64 = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_KEY_TYPES = "^(STRING|BIGINT|INT|SMALLINT|TINYINT|BOOLEAN|DECIMAL\\([0-9]+,0\\))$"
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
_ZONED = "io.debezium.time.ZonedTimestamp"
_DURATION = "io.debezium.time.MicroDuration"
_YEAR = "io.debezium.time.Year"
_CONVERTED = sorted({*DATES, *TIMESTAMP_UNITS, *TIME_DIGITS, _DECIMAL, _VARIABLE_DECIMAL})
"""Connect names whose values the rules rewrite (a placeholder in one goes to the rules)."""
_OPS = {"c": "I", "r": "I", "u": "U", "d": "D"}
_CONVERTING_MARKS = (
    "io.debezium.time.",
    "org.apache.kafka.connect.data.",
    "io.debezium.data.VariableScaleDecimal",
    '"float"',
    '"float32"',
    "UNSIGNED",
)
"""Text a record's value holds where the rules may rewrite one of its values: the Connect names
of ``_converted``, a 32-bit float's type, an unsigned column's type (parameters)."""


def _first_byte_pattern(placeholder: str) -> str:
    """A regex any text holding the placeholder as an array of its bytes' numbers matches."""
    raw = placeholders(placeholder)[1]
    return f"\\[\\s*{raw[0]}\\s*[,\\]]" if raw else "\\["


def decodable_feed(feed: Feed) -> bool:
    """Whether Spark may read the feed's records (else the Python rules read them all): a
    Debezium feed whose placeholder is printable text no JSON scalar spells (a placeholder
    ``0`` would be taken for the number 0, which never stands for it)."""
    if feed.format != "debezium":
        return False
    text = placeholder_texts(feed.placeholder)[0]
    try:
        json.loads(text)
    except ValueError:
        return text.isprintable()
    return False


# -- values -------------------------------------------------------------------------------------


def _signed(hex_digits: Column, size: Column) -> Column:
    """Big-endian two's complement bytes, as (at most 16) hex digits, as a decimal(20,0)."""
    unsigned = F.conv(hex_digits, 16, 10).cast("decimal(20,0)")
    # 2**(8 * size) exactly (a double's 2**64 cast to a decimal is 18446744073709552000).
    powers = F.array(*[F.lit(str(1 << (8 * n))) for n in range(9)])
    wrap = F.element_at(powers, size + 1).cast("decimal(20,0)")
    return F.when(F.substring(hex_digits, 1, 1) >= F.lit("8"), unsigned - wrap).otherwise(unsigned)


def _unscaled(raw: Column) -> Column:
    """Base64 text of a decimal's unscaled value (big-endian two's complement, 1 to 16 bytes)
    as a decimal(38,0); null where it is not such text (the rules then read it)."""
    data = F.when((F.length(raw) > 0) & raw.rlike(_BASE64), F.unbase64(raw))
    size = F.octet_length(data)
    digits = F.hex(data)
    narrow = _signed(digits, size).cast("decimal(38,0)")
    high = _signed(F.substring(digits, 1, (size - 8) * 2), size - 8).cast("decimal(38,0)")
    low = F.conv(F.substring(digits, -16, 16), 16, 10).cast("decimal(38,0)")
    shift = F.lit(str(1 << 64)).cast("decimal(38,0)")
    wide = F.try_add(F.try_multiply(high, shift), low)
    return F.when(size <= 8, narrow).when(size <= 16, wide)


def _decimal_text(unscaled: Column, scale: Column) -> Column:
    """``unscaled * 10**-scale`` as plain text, every digit kept (``decimal_text``)."""
    # From the text: Spark's abs() of such a CASE loses the last digits of a 36-digit value.
    text = unscaled.cast("string")
    sign = F.when(text.startswith("-"), F.lit("-")).otherwise(F.lit(""))
    digits = F.regexp_replace(text, "^-", "")
    padded = F.lpad(digits, F.greatest(F.length(digits), scale + 1), F.lit("0"))
    cut = F.length(padded) - scale
    point = F.concat(
        F.substring(padded, F.lit(1), cut), F.lit("."), F.substring(padded, cut + 1, scale)
    )
    whole = F.concat(digits, F.repeat(F.lit("0"), -scale))
    return F.concat(sign, F.when(scale <= 0, whole).otherwise(point))


def _floor_div(count: Column, unit: int) -> Column:
    """``count // unit`` as Python floors it (exact, in longs)."""
    towards_zero = F.call_function("div", count, F.lit(unit))
    return towards_zero - F.when((count % unit != 0) & (count < 0), 1).otherwise(0)


def _time_text(count: Column, digits: int) -> Column:
    """A count of ``10**-digits`` s since midnight as ``HH:MM:SS[.f]`` (``time_text``)."""
    unit = 10**digits
    whole = F.when(count > _LONG_MIN, F.abs(count))
    seconds = _floor_div(whole, unit)
    fraction = F.pmod(whole, F.lit(unit))
    clock = F.format_string(
        "%s%02d:%02d:%02d",
        F.when(count < 0, F.lit("-")).otherwise(F.lit("")),
        _floor_div(seconds, 3600),
        F.pmod(_floor_div(seconds, 60), F.lit(60)),
        F.pmod(seconds, F.lit(60)),
    )
    tail = F.regexp_replace(F.lpad(fraction.cast("string"), digits, "0"), "0+$", "")
    return F.when(fraction == 0, clock).otherwise(F.concat(clock, F.lit("."), tail))


def _iso_micros(micros: Column) -> Column:
    """Microseconds since 1970 (UTC) as ``datetime.isoformat`` writes them, without a zone."""
    fraction = F.pmod(micros, F.lit(1_000_000))
    base = F.date_format(F.timestamp_micros(micros), "yyyy-MM-dd'T'HH:mm:ss")
    tail = F.concat(F.lit("."), F.lpad(fraction.cast("string"), 6, "0"))
    return F.when(fraction == 0, base).otherwise(F.concat(base, tail))


def _micros(count: Column, per_second: int) -> tuple[Column, Column]:
    """A timestamp counted in ``1/per_second`` s → (microseconds, whether in 0001..9999)."""
    low, high = _MICROS
    if per_second >= 1_000_000:
        step = per_second // 1_000_000
        micros = _floor_div(count, step) if step > 1 else count
        return micros, micros.between(low, high)
    step = 1_000_000 // per_second
    return F.try_multiply(count, F.lit(step)), count.between(-(-low // step), high // step)


def _converted(value: Column, schema: Column, keep_count: Column) -> Column:
    """A column's value (text) through ``connect_value`` by its Connect ``schema`` (null: as
    it is): ``struct<value, ok>``, ``ok`` false where the rules' result may differ (the record
    goes to them). ``keep_count``: a time of day into an integer property keeps its count."""
    name = F.coalesce(schema["name"], F.lit(""))
    number = F.when(value.rlike(_INTEGER), value.try_cast("long"))
    integer = number.isNotNull()
    cases: list[tuple[Column, Column, Column]] = [
        (
            name.isin(*DATES),
            F.when(
                number.between(*_DAYS),
                F.date_add(F.lit("1970-01-01").cast("date"), number.try_cast("int")),
            ).cast("string"),
            number.between(*_DAYS),
        )
    ]
    for unit_name, per_second in TIMESTAMP_UNITS.items():
        micros, fits = _micros(number, per_second)
        cases.append((name == unit_name, F.when(fits, _iso_micros(micros)), fits))
    for time_name, digits in TIME_DIGITS.items():
        text = F.when(keep_count, value).otherwise(_time_text(number, digits))
        cases.append((name == time_name, text, integer & (number > _LONG_MIN)))
    unscaled = _unscaled(value)
    scale = F.coalesce(schema["parameters"]["scale"], F.lit("0"))
    cases.append(
        (
            name == _DECIMAL,
            _decimal_text(unscaled, scale.try_cast("int")),
            unscaled.isNotNull() & scale.rlike(_INTEGER),
        )
    )
    variable = F.from_json(value, "struct<scale: string, value: string>")
    var_unscaled = _unscaled(variable["value"])
    cases.append(
        (
            name == _VARIABLE_DECIMAL,
            _decimal_text(var_unscaled, variable["scale"].try_cast("int")),
            var_unscaled.isNotNull() & variable["scale"].rlike(_INTEGER),
        )
    )
    infinite = F.regexp_replace(value, "^[+-]+", "") == F.lit("infinity")
    cases.append((name == _ZONED, value, ~infinite))
    cases.append((name == _DURATION, value, ~value.isin(str(-(2**63)), str(2**63 - 1))))
    cases.append((name == _YEAR, F.when(value == "1900", "0").otherwise(value), F.lit(True)))
    # A 32-bit float: the rules write the shortest decimal of the single a double holds, which is
    # the same number where the text has at most 7 significant digits (as Connect writes one).
    mantissa = F.regexp_replace(F.regexp_extract(value, "^-?([0-9.]*)", 1), "[.]", "")
    significant = F.regexp_replace(F.regexp_replace(mantissa, "^0+", ""), "0+$", "")
    short = integer | (F.length(significant) <= 7)
    cases.append((schema["type"].isin("float", "float32"), value, short))
    source_type = F.upper(
        F.coalesce(schema["parameters"]["__debezium.source.column.type"], F.lit(""))
    )
    out_value: Column = value
    out_ok: Column = ~(value.rlike("^-[0-9]+$") & source_type.contains("UNSIGNED"))
    for when, converted, ok in reversed(cases):
        out_value = F.when(when, converted).otherwise(out_value)
        out_ok = F.when(when, ok).otherwise(out_ok)
    as_is = value.isNull() | schema.isNull()
    return F.struct(
        F.when(as_is, value).otherwise(out_value).alias("value"),
        (as_is | F.coalesce(out_ok, F.lit(False))).alias("ok"),
    )


# -- per feed -------------------------------------------------------------------------------------


def _by_feed(feeds: Sequence[Feed], value: Callable[[Feed], Any]) -> Column:
    """A per-feed constant, chosen by the record's ``feed``."""
    out: Column = F.lit(None)
    for feed in feeds:
        out = F.when(F.col("feed") == feed.name, F.lit(value(feed))).otherwise(out)
    return out


def _lookup(pairs: dict[str, Any], key: Column) -> Column:
    """``pairs[key]`` (null where absent) as a literal map's lookup."""
    if not pairs:
        return F.lit(None)
    return F.create_map(*[F.lit(x) for k, v in pairs.items() for x in (k, v)])[key]


def _table_key(feed: Column, table: Column) -> Column:
    return F.concat_ws("\u0000", feed, table)


# -- the record ---------------------------------------------------------------------------------


def _key_id(key: Column) -> tuple[Column, Column]:
    """The record's key (bytes) → (``key_id``'s text, whether that is the rules' text)."""
    text = F.when(F.is_valid_utf8(key), key.cast("string"))
    parsed = F.try_parse_json(text)
    whole = F.try_variant_get(parsed, "$", "map<string,variant>")
    names = F.map_keys(whole)
    wrapped = (
        (F.size(whole) == 2)
        & F.array_contains(names, "schema")
        & F.array_contains(names, "payload")
    )
    inner = F.when(wrapped, F.try_variant_get(parsed, "$.payload", "variant")).otherwise(parsed)
    entries = F.try_variant_get(inner, "$", "map<string,variant>")
    values = F.map_values(entries)

    def plain(v: Column) -> Column:
        return F.is_variant_null(v) | F.schema_of_variant(v).rlike(_KEY_TYPES)

    one = F.get(values, 0)
    single = F.when(~F.is_variant_null(one), one.cast("string"))
    many = F.to_json(values)
    simple_text = text.rlike("^[\\x20-\\x7e]*$") & ~text.contains("\\")
    null = inner.isNull() | F.is_variant_null(inner)
    key_id = F.when(null, F.lit(None)).when(F.size(values) == 1, single).otherwise(many)
    ok = key.isNull() | (
        parsed.isNotNull()
        & (
            null
            | (
                entries.isNotNull()
                & (F.size(values) >= 1)
                & F.forall(values, plain)
                & ((F.size(values) == 1) | simple_text)
            )
        )
    )
    return F.when(key.isNotNull(), key_id), ok


def _transaction_key(tx_id: Column) -> Column:
    """``changefeed.transaction_key``: PostgreSQL's ``<txId>:<lsn>`` → its txId."""
    return F.when(
        tx_id.rlike("^[0-9]+:[0-9]+$"), F.regexp_extract(tx_id, "^([0-9]+):", 1)
    ).otherwise(tx_id)


def _position(source: Column, offset: Column) -> tuple[Column, Column]:
    """``changefeed.source_position`` → (the text, whether read)."""
    connector = source["connector"]
    pos, row = F.coalesce(source["pos"], F.lit(0)), F.coalesce(source["row"], F.lit(0))
    sequence = F.from_json(source["sequence"], "array<string>")
    pair = F.coalesce(F.size(sequence) == 2, F.lit(False))
    items = [F.get(sequence, i) for i in (0, 1)]
    lsns = [F.when(pair & item.rlike(_DIGITS), item.try_cast("long")) for item in items]
    # An LSN the rules read and Spark's long does not: negative, or past 18 digits.
    odd = pair & F.coalesce(
        F.exists(sequence, lambda v: v.rlike("^-?[0-9]+$") & ~v.rlike(_DIGITS)), F.lit(False)
    )
    change = F.coalesce(source["lsn"], lsns[1])
    postgres = F.format_string("%020d/%020d", F.coalesce(lsns[0], change), change)
    file = source["file"]
    numbered = F.regexp_extract(file, "^(.*)\\.([0-9]+)$", 2)
    widened = F.when(
        numbered != "",
        F.format_string(
            "%s.%010d", F.regexp_extract(file, "^(.*)\\.([0-9]+)$", 1), numbered.try_cast("long")
        ),
    ).otherwise(file)
    mariadb = F.format_string("%s/%020d/%010d", widened, pos, row)
    mysql = F.format_string("%s/%020d/%010d", file, pos, row)
    change_lsn = source["change_lsn"]
    sqlserver = F.concat(F.coalesce(source["commit_lsn"], F.lit("")), F.lit("/"), change_lsn)
    other = F.format_string("%020d/%020d", F.coalesce(source["ts_ms"], F.lit(0)), offset)
    text = (
        F.when(connector == "postgresql", postgres)
        .when(connector == "mariadb", mariadb)
        .when(connector == "mysql", mysql)
        .when((connector == "sqlserver") & (F.coalesce(change_lsn, F.lit("")) != ""), sqlserver)
        .otherwise(other)
    )
    ok = (
        F.when(connector == "postgresql", change.isNotNull() & ~odd)
        .when(connector == "mariadb", file.isNotNull() & (F.length(numbered) <= 18))
        .when(connector == "mysql", file.isNotNull())
        .otherwise(F.lit(True))
    )
    return text, ok


def _source_time(ts_ms: Column) -> tuple[Column, Column]:
    """``changefeed.source_time`` → (the text, whether read)."""
    low, high = _MICROS[0] // 1000, _MICROS[1] // 1000
    text = F.date_format(F.timestamp_millis(ts_ms), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
    return F.when(ts_ms.isNotNull(), text), ts_ms.isNull() | ts_ms.between(low, high)


def decode(records: DataFrame, feeds: Sequence[Feed]) -> DataFrame:
    """``records`` (``feed, topic, partition, offset, key, value, timestamp, received_at``) →
    ``DECODED_FIELDS`` and ``DECODABLE``. The rows of feeds ``decodable_feed`` refuses, and of
    records marked not decodable, carry only the record: the rules decode them."""
    feeds = [f for f in feeds if decodable_feed(f)]
    value_text = F.when(F.is_valid_utf8("value"), F.col("value").cast("string"))
    frame = records.withColumn("__v", F.from_json(value_text, VALUE_SCHEMA, _PARSE))
    v = F.col("__v")
    wrapped = v["payload"].isNotNull()  # and nothing of the envelope at the top
    for name in _ENVELOPE:
        wrapped = wrapped & v[name].isNull()

    def field(name: str) -> Column:
        return F.when(wrapped, v["payload"][name]).otherwise(v[name])

    envelope_fields = F.when(wrapped, v["schema"]["fields"])

    def schemas_of(part: str) -> Column:
        matching = F.filter(envelope_fields, lambda f: f["field"] == part)
        columns = F.filter(F.get(matching, 0)["fields"], lambda f: f["field"].isNotNull())
        return F.map_from_entries(F.transform(columns, lambda f: F.struct(f["field"], f)))

    topic, offset = F.col("topic"), F.col("offset")
    tx_topic = _by_feed(feeds, lambda f: f.transaction_topic)
    has_tx_topic = _by_feed(feeds, lambda f: f.transaction_topic is not None)
    tables = {t: table for f in feeds for t, table in f.topics.items()}
    table = _lookup(tables, topic)
    schema_of = {f"{f.name}\u0000{t}": s for f in feeds for t, s in f.tables.items()}
    integers = {
        f"{f.name}\u0000{t}": sorted(cols) for f in feeds for t, cols in f.integer_columns.items()
    }
    key_id, key_ok = _key_id(F.col("key"))
    forms = _by_feed(feeds, lambda f: list(placeholder_texts(f.placeholder)))
    text_form, encoded_form = F.get(forms, 0), F.get(forms, 1)
    other_forms = F.slice(forms, 3, 4)
    # Most records need none of it: no column the rules convert (no Connect name they rewrite, no
    # float, no unsigned type in the text) and no placeholder in any form (the text holds none
    # of them, nor an escape). Spark runs higher-order functions interpreted, a lambda a column:
    # those records skip them.
    first_byte = _by_feed(feeds, lambda f: _first_byte_pattern(f.placeholder))
    may_hold = (
        value_text.contains(text_form)
        | value_text.contains(encoded_form)
        | value_text.contains("\\")
        | F.regexp_like(value_text, first_byte)
    )
    converts = F.lit(False)
    for mark in _CONVERTING_MARKS:
        converts = converts | value_text.contains(mark)
    simple = F.coalesce(~may_hold & ~converts, F.lit(False))

    frame = frame.select(
        "*",
        field("op").alias("__op"),
        field("source").alias("__source"),
        field("transaction").alias("__tx"),
        schemas_of("after").alias("__s_after"),
        schemas_of("before").alias("__s_before"),
        key_id.alias("__key_id"),
        key_ok.alias("__key_ok"),
        F.coalesce(topic == tx_topic, F.lit(False)).alias("__boundary"),
        table.alias("__table"),
        simple.alias("__simple"),
    )
    op = F.col("__op")
    mapped = _lookup(_OPS, op)
    deleting = op == "d"
    row_schemas = F.when(deleting, F.col("__s_before")).otherwise(F.col("__s_after"))
    before_schemas = F.col("__s_before")
    table_key = _table_key(F.col("feed"), F.col("__table"))
    int_columns = F.coalesce(
        _lookup(integers, table_key).cast("array<string>"), F.array().cast("array<string>")
    )

    def keep_count(column: Column) -> Column:
        """Whether ``column`` feeds an integer property (``columns.loose`` spells both)."""
        return F.array_contains(int_columns, F.lower(F.regexp_replace(column, "_", "")))

    def convert(values: Column, schemas: Column) -> Column:
        return F.transform_values(values, lambda k, x: _converted(x, schemas[k], keep_count(k)))

    part = F.when(deleting, field("before")).otherwise(field("after"))
    before = field("before")
    frame = frame.select(
        "*",
        F.when(~F.col("__simple"), convert(part, row_schemas)).alias("__row_c"),
        F.when(~F.col("__simple") & ~deleting, convert(before, before_schemas)).alias("__before_c"),
    )
    row_c, before_c = F.col("__row_c"), F.col("__before_c")

    def unavailable(x: Column, schema: Column) -> Column:
        kind = schema["type"]
        return (
            (x == text_form)
            | ((x == encoded_form) & (kind.isNull() | (kind == "bytes")))
            | F.array_contains(other_forms, x)
        )

    def kept(k: Column) -> Column:
        old = before_c[k]["value"]
        return F.when(old.isNotNull() & ~unavailable(old, row_schemas[k]), old)

    def converting(values: Column, schemas: Column) -> Column:
        """Whether a placeholder sits in a column the rules convert (then they read it)."""
        return F.exists(
            F.map_entries(values),
            lambda e: (
                unavailable(e["value"], schemas[e["key"]])
                & F.coalesce(schemas[e["key"]]["name"].isin(*_CONVERTED), F.lit(False))
            ),
        )

    gaps = F.map_filter(row_c, lambda k, c: unavailable(c["value"], row_schemas[k]))
    simple = F.col("__simple")
    missing = F.when(deleting | simple | row_c.isNull(), F.array().cast("array<string>")).otherwise(
        F.filter(F.map_keys(gaps), lambda k: kept(k).isNull())
    )
    values = F.when(simple, part).otherwise(
        F.transform_values(
            row_c,
            lambda k, c: F.when(
                ~deleting & unavailable(c["value"], row_schemas[k]), kept(k)
            ).otherwise(c["value"]),
        )
    )
    row_ok = simple | F.forall(F.map_values(row_c), lambda c: c["ok"]) & F.coalesce(
        F.forall(F.map_values(before_c), lambda c: c["ok"]), F.lit(True)
    )
    placeholders_ok = (
        simple
        | deleting
        | ~(
            F.coalesce(converting(part, row_schemas), F.lit(False))
            | F.coalesce(converting(before, before_schemas), F.lit(False))
        )
    )

    source = F.col("__source")
    position, position_ok = _position(source, offset)
    wants_time = _by_feed(feeds, lambda f: f.time_property is not None)
    time, time_ok = _source_time(source["ts_ms"])
    time = F.when(wants_time, time)
    transaction = _transaction_key(F.col("__tx")["id"])
    loose_event = transaction.isNull() | ~has_tx_topic
    place = F.coalesce(F.col("__tx")["data_collection_order"], offset)
    truncate = op == "t"
    event_op = F.when(truncate, F.lit("T")).otherwise(mapped)
    meta = F.map_filter(
        F.create_map(
            F.lit(OP_COLUMN),
            event_op,
            F.lit(KEY_COLUMN),
            F.when(~truncate, F.col("__key_id")),
            F.lit(POSITION_COLUMN),
            position,
            F.lit(TIME_COLUMN),
            F.when(~truncate, time),
        ),
        lambda k, x: (k != TIME_COLUMN) | x.isNotNull(),
    )
    flags = F.map_from_arrays(
        F.transform(missing, lambda k: F.concat(F.lit(FLAGS), k)),
        F.transform(missing, lambda k: F.lit(str(MISSING))),
    )
    row = F.when(truncate, meta).otherwise(F.map_concat(values, meta, flags))
    shapes = F.transform_values(
        row_schemas,
        lambda k, s: F.struct(
            s["type"].alias("type"),
            s["name"].alias("name"),
            s["parameters"].alias("parameters"),
            s["items"].alias("items"),
        ),
    )
    fields = F.when(~truncate & (F.size(row_schemas) > 0), F.to_json(shapes))
    snapshot = source["snapshot"]
    data_ok = (
        op.isin(*_OPS, "t")
        & source.isNotNull()
        & F.col("__table").isNotNull()
        & position_ok
        & time_ok
        & (truncate | (part.isNotNull() & row_ok & placeholders_ok))
    )

    status = field("status")
    tx_id = field("id")
    collections = F.filter(field("data_collections"), lambda x: x["data_collection"].isNotNull())
    counts = F.to_json(
        F.map_from_entries(
            F.transform(
                collections,
                lambda x: F.struct(x["data_collection"], F.coalesce(x["event_count"], F.lit(0))),
            )
        )
    )
    boundary_ok = status.isin("BEGIN", "END") & tx_id.isNotNull()
    boundary = F.col("__boundary")
    read = (
        v.isNotNull()
        & v["__corrupt"].isNull()
        & F.col("__key_ok")
        & F.when(boundary, boundary_ok).otherwise(data_ok)
    )
    skip = F.col("value").isNull()
    decodable = F.coalesce(
        F.col("feed").isin(*[f.name for f in feeds]) & (skip | read), F.lit(False)
    )
    data = ~skip & ~boundary
    kind = (
        F.when(skip, F.lit("skip"))
        .when(boundary, F.lower(status))
        .when(loose_event, F.lit("loose"))
        .otherwise(F.lit("data"))
    )
    chunk = F.format_string("%s[%d]", topic, F.col("partition"))
    item = (
        F.when(skip, F.lit(None))
        .when(boundary, _transaction_key(tx_id))
        .when(loose_event, chunk)
        .otherwise(transaction)
    )
    out = {
        "kind": kind,
        "item": item,
        "code": F.lit(None),
        "message": F.lit(None),
        "end_id": F.when(boundary & (status == "END"), tx_id),
        "counts": F.when(boundary & (status == "END"), counts),
        "source_table": F.when(data, F.col("__table")),
        "schema": F.when(data, _lookup(schema_of, table_key)),
        "op": F.when(data, event_op),
        "order": F.when(data, F.when(loose_event, offset).otherwise(place)),
        "row": F.when(data, row),
        "columns": F.when(data, F.map_keys(row)),
        "fields": F.when(data, fields),
        "unavailable": F.when(data & ~truncate, F.size(missing)).otherwise(F.lit(0)),
        "snapshot_last": F.coalesce(data & loose_event & (snapshot == SNAPSHOT_LAST), F.lit(False)),
        "incremental": F.coalesce(
            data & loose_event & (snapshot == SNAPSHOT_INCREMENTAL), F.lit(False)
        ),
    }
    columns = [
        (out[name] if name in out else F.col(name)).cast(kind_).alias(name)
        for name, kind_ in DECODED_FIELDS
    ]
    return frame.select(*columns, decodable.alias(DECODABLE))
