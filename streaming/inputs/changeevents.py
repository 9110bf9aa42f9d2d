"""Debezium change events decoded by Spark: one JSON parse a record, on the executors' JVMs.

Not used by the job yet (``inputs.changefeeds`` decodes with the rules), issue 58. What it costs,
profiled (JFR over the executors, the stages' build/optimize times; bench/history/rounds.md):
a fixed ~2-3 s a query before the first record — the expressions are a plan of ~220k characters,
analyzed a select at a time (1.2 s with the columns built once, ``_projections``), optimized
(~1 s) and compiled per task — and ~7-15 µs a record against a typed ``from_json``'s ~1.5 µs.
Where a record takes a higher-order function (a lambda a column: conversions, placeholders)
Spark runs it interpreted, and Spark 4.2's interpreted read of a struct's field builds a
SQLConf each time; so the common path takes none: the key comes from the record's one parse,
patterns are literals, the envelope's fields are columns, the schemas are zipped arrays.

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
no claim of equivalence there (to be said in docs/interface.md when the job uses it): a key
repeated in one object (Python keeps the last value, Spark's map the first), a key's text that
is not JSON but closes the record's object early (``1,"v":{…}``: value and key are parsed as
one object), a number where the schema names a decimal's base64 bytes, an object with keys
besides ``schema`` and ``payload``. A float keeps its value but may be written otherwise
(``1.0E20`` for ``1e+20``): a property of a numeric type holds the same number.
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

__all__ = ["DECODABLE", "RECORD_SCHEMA", "VALUE_SCHEMA", "decodable_feed", "decode"]

DECODABLE = "decodable"
"""The column ``decode`` adds: whether the record's decoded row is Spark's (else the Python
rules must read it)."""

_PARAMETERS = "parameters: map<string,string>"
_ITEMS = (
    f"struct<type: string, name: string, {_PARAMETERS}, "
    f"items: struct<type: string, name: string, {_PARAMETERS}>>"
)
_FIELD = f"struct<field: string, type: string, name: string, {_PARAMETERS}, items: {_ITEMS}>"
_SHAPE = f"struct<type: string, name: string, {_PARAMETERS}, items: {_ITEMS}>"
"""A column's Connect schema as the rules keep it (``sourceschema.field_shape``)."""
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
    f"schema: struct<fields: array<struct<field: string, fields: array<{_FIELD}>>>>, "
    f"payload: struct<{_ENVELOPE_DDL}>, "
    + ", ".join(f"{name}: {kind}" for name, kind in _ENVELOPE.items())
)
"""A record's value: the envelope with the converter's wrapper (``schema``: the columns' Connect
schemas as far as they are read; ``payload``) and without it (the same fields at the top)."""
RECORD_SCHEMA = (
    f"v struct<{VALUE_SCHEMA}>, k map<string,string>, "
    "kw struct<schema: string, payload: map<string,string>>, __corrupt string"
)
"""One parse of a record: ``{"v": <value>, "k": <key>, "kw": <key>}`` — the key read both as an
object of values and as the converter's wrapper; ``__corrupt``: the text of a record the reader
could not take."""

_PARSE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "__corrupt"}
_INTEGER = "^-?[0-9]{1,19}$"  # a long's digits (try_cast refuses what does not fit)
_DIGITS = "^[0-9]{1,18}$"
_SEQUENCE = '^\\[(?:null|"([0-9]{1,18})"),"([0-9]{1,18})"\\]$'
_KEY_SCALAR = "^(0|-?[1-9][0-9]*|true|false)$"
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
    """The record's key (bytes) → (``key_id``'s text, whether that is the rules' text), by a
    second JSON parse (a variant): what ``_record_key`` leaves, a key of several columns."""
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


def _record_key(parsed: Column, key: Column) -> tuple[Column, Column]:
    """The key (``key``: its bytes; ``parsed``: the record's parse, holding it as ``k`` and
    ``kw``) → (``key_id``'s text, whether that is the rules' text). A key of one column (or
    none) is read from the record's one parse where its value's text is the rules' whatever
    JSON type it had: an integer as JSON writes one, a boolean, null, or a string that looks
    like none of them or of a number or nested value. The rest (a key of several columns, a
    string such as ``"12-A"``): a second parse (``_key_id``)."""
    plain, wrapper = parsed["k"], parsed["kw"]
    wrapped = (
        (F.size(plain) == 2)
        & F.map_contains_key(plain, "schema")
        & F.map_contains_key(plain, "payload")
    )
    entries = F.when(wrapped, wrapper["payload"]).otherwise(plain)
    value = F.get(F.map_values(entries), 0)
    none = key.isNull() | entries.isNull()
    one = (F.size(entries) == 1) & (
        value.isNull() | value.rlike(_KEY_SCALAR) | ~value.rlike("^[-0-9\\[{]")
    )
    fast = F.coalesce(none | one, F.lit(False))
    several_id, several_ok = _key_id(key)
    key_id = F.when(fast, F.when(~none, value)).otherwise(several_id)
    return key_id, fast | several_ok


def _transaction_key(tx_id: Column) -> Column:
    """``changefeed.transaction_key``: PostgreSQL's ``<txId>:<lsn>`` → its txId."""
    return F.when(
        tx_id.rlike("^[0-9]+:[0-9]+$"), F.regexp_extract(tx_id, "^([0-9]+):", 1)
    ).otherwise(tx_id)


def _padded(number: Column, width: int) -> Column:
    """A long as ``f"{number:0{width}d}"`` writes it (``lpad`` where it holds; ``format_string``,
    which costs several times more, for the rest)."""
    text = number.cast("string")
    return F.when((number >= 0) & (F.length(text) <= width), F.lpad(text, width, "0")).otherwise(
        F.format_string(f"%0{width}d", number)
    )


def _position(source: Column, offset: Column) -> tuple[Column, Column]:
    """``changefeed.source_position`` → (the text, whether read)."""
    connector = source["connector"]
    pos, row = F.coalesce(source["pos"], F.lit(0)), F.coalesce(source["row"], F.lit(0))
    text_of_sequence = source["sequence"]
    # Debezium's own text (``["<lsn>","<lsn>"]``, the first may be null) by a regex; any other
    # by a JSON parse.
    usual = text_of_sequence.rlike(_SEQUENCE)
    sequence = F.from_json(text_of_sequence, "array<string>")
    pair = F.coalesce(F.size(sequence) == 2, F.lit(False))
    items = [F.get(sequence, i) for i in (0, 1)]
    lsns = [
        F.when(usual, F.regexp_extract(text_of_sequence, _SEQUENCE, i + 1))
        .when(pair & item.rlike(_DIGITS), item)
        .try_cast("long")
        for i, item in enumerate(items)
    ]
    # An LSN the rules read and Spark's long does not: negative, or past 18 digits.
    odd = ~F.coalesce(usual, F.lit(False)) & (
        pair
        & F.coalesce(
            F.exists(sequence, lambda v: v.rlike("^-?[0-9]+$") & ~v.rlike(_DIGITS)), F.lit(False)
        )
    )
    change = F.coalesce(source["lsn"], lsns[1])
    postgres = F.concat(_padded(F.coalesce(lsns[0], change), 20), F.lit("/"), _padded(change, 20))
    file = source["file"]
    numbered = F.regexp_extract(file, "^(.*)\\.([0-9]+)$", 2)
    widened = F.when(
        numbered != "",
        F.concat(
            F.regexp_extract(file, "^(.*)\\.([0-9]+)$", 1),
            F.lit("."),
            _padded(numbered.try_cast("long"), 10),
        ),
    ).otherwise(file)
    binlog = F.concat(F.lit("/"), _padded(pos, 20), F.lit("/"), _padded(row, 10))
    mariadb = F.concat(widened, binlog)
    mysql = F.concat(file, binlog)
    change_lsn = source["change_lsn"]
    sqlserver = F.concat(F.coalesce(source["commit_lsn"], F.lit("")), F.lit("/"), change_lsn)
    other = F.concat(
        _padded(F.coalesce(source["ts_ms"], F.lit(0)), 20), F.lit("/"), _padded(offset, 20)
    )
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
    frame = records
    for columns in _projections(feeds):
        frame = frame.select(*columns)
    return frame


_BUILT: dict[str, list[list[Column | str]]] = {}
"""``_projections`` by the feeds they were built for: building them costs seconds (thousands of
calls into the JVM), and a job decodes the same feeds every batch."""


def _projections(all_feeds: Sequence[Feed]) -> list[list[Column | str]]:
    """The selects ``decode`` runs, one after another, built once for the feeds."""
    cache_key = repr(list(all_feeds))
    if cache_key not in _BUILT:
        if len(_BUILT) >= 16:
            _BUILT.clear()
        _BUILT[cache_key] = _build(all_feeds)
    return _BUILT[cache_key]


def _build(feeds: Sequence[Feed]) -> list[list[Column | str]]:
    stages: list[list[Column | str]] = []
    feeds = [f for f in feeds if decodable_feed(f)]
    value_text = F.when(F.is_valid_utf8("value"), F.col("value").cast("string"))
    key = F.col("key")
    key_text = F.coalesce(key.cast("string"), F.lit("null"))
    # One parse a record: value and key in one JSON object (text that is not JSON, in either,
    # makes the record's parse fail, and the rules read it). Bytes that are not UTF-8 are parsed
    # too (the reader replaces them) and the record left to the rules: a check inside the
    # parse's input would run interpreted, by reflection, a record at a time.
    utf8 = F.is_valid_utf8("value") & (key.isNull() | F.is_valid_utf8(key))
    record_text = F.concat(
        F.lit('{"v":'),
        F.col("value").cast("string"),
        F.lit(',"k":'),
        key_text,
        F.lit(',"kw":'),
        key_text,
        F.lit("}"),
    )
    stages.append(["*", F.from_json(record_text, RECORD_SCHEMA, _PARSE).alias("__p")])
    v = F.col("__p")["v"]
    wrapped = v["payload"].isNotNull()  # and nothing of the envelope at the top
    for name in _ENVELOPE:
        wrapped = wrapped & v[name].isNull()

    # The envelope's fields once, as columns: an expression used twice is written out twice in
    # the plan, and the plan's size is what every batch pays for (built, optimized, compiled).
    stages.append(
        [
            "*",
            *[
                F.when(wrapped, v["payload"][n]).otherwise(v[n]).alias(f"__e_{n}")
                for n in _ENVELOPE
            ],
            F.when(wrapped, v["schema"]["fields"]).alias("__e_fields"),
        ]
    )

    def field(name: str) -> Column:
        return F.col(f"__e_{name}")

    envelope_fields = F.col("__e_fields")

    def schemas_of(part: str) -> Column:
        """The Connect schemas of ``part``'s columns by name, as ``_SHAPE``s (null: a column
        without a name; the rules read the record)."""
        chosen = F.get(envelope_fields, F.array_position(envelope_fields["field"], part) - 1)
        columns = chosen["fields"]
        names = columns["field"]
        shapes = F.arrays_zip(
            columns["type"], columns["name"], columns["parameters"], columns["items"]
        ).cast(f"array<{_SHAPE}>")
        # No name is null (sorted, nulls come first; array_compact is a higher-order function).
        named = (F.size(names) <= 0) | F.get(F.sort_array(names), 0).isNotNull()
        return F.when(named, F.map_from_arrays(names, shapes))

    topic, offset = F.col("topic"), F.col("offset")
    tx_topic = _by_feed(feeds, lambda f: f.transaction_topic)
    has_tx_topic = _by_feed(feeds, lambda f: f.transaction_topic is not None)
    tables = {t: table for f in feeds for t, table in f.topics.items()}
    table = _lookup(tables, topic)
    schema_of = {f"{f.name}\u0000{t}": s for f in feeds for t, s in f.tables.items()}
    integers = {
        f"{f.name}\u0000{t}": sorted(cols) for f in feeds for t, cols in f.integer_columns.items()
    }
    key_id, key_ok = _record_key(F.col("__p"), key)
    forms = _by_feed(feeds, lambda f: list(placeholder_texts(f.placeholder)))
    text_form, encoded_form = F.get(forms, 0), F.get(forms, 1)
    other_forms = F.slice(forms, 3, 4)
    # Most records need none of it: no column the rules convert (no Connect name they rewrite, no
    # float, no unsigned type in the text) and no placeholder in any form (the text holds none
    # of them, nor an escape). Spark runs higher-order functions interpreted, a lambda a column:
    # those records skip them.
    # Literal texts and patterns, a feed at a time (a pattern from a column compiles a record).
    may_hold = value_text.contains("\\")
    for f in feeds:
        text, encoded = placeholder_texts(f.placeholder)[:2]
        may_hold = may_hold | (
            (F.col("feed") == f.name)
            & (
                value_text.contains(text)
                | value_text.contains(encoded)
                | value_text.rlike(_first_byte_pattern(f.placeholder))
            )
        )
    converts = F.lit(False)
    for mark in _CONVERTING_MARKS:
        converts = converts | value_text.contains(mark)
    simple = F.coalesce(~may_hold & ~converts, F.lit(False))

    stages.append(
        [
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
        ]
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
    stages.append(
        [
            "*",
            F.when(~F.col("__simple"), convert(part, row_schemas)).alias("__row_c"),
            F.when(~F.col("__simple") & ~deleting, convert(before, before_schemas)).alias(
                "__before_c"
            ),
        ]
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
    # No higher-order function where most records pass: Spark runs them interpreted, and an
    # interpreted read of a struct's field builds a SQLConf (Spark 4.2), a record at a time.
    meta_entries = [
        F.lit(OP_COLUMN),
        event_op,
        F.lit(KEY_COLUMN),
        F.when(~truncate, F.col("__key_id")),
        F.lit(POSITION_COLUMN),
        position,
    ]
    meta = F.when(
        ~truncate & time.isNotNull(),
        F.create_map(*meta_entries, F.lit(TIME_COLUMN), time),
    ).otherwise(F.create_map(*meta_entries))
    flags = F.map_from_arrays(
        F.transform(missing, lambda k: F.concat(F.lit(FLAGS), k)),
        F.transform(missing, lambda k: F.lit(str(MISSING))),
    )
    row = (
        F.when(truncate, meta)
        .when(F.size(missing) > 0, F.map_concat(values, meta, flags))
        .otherwise(F.map_concat(values, meta))
    )
    fields = F.when(~truncate & (F.size(row_schemas) > 0), F.to_json(row_schemas))
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
        & F.col("__p")["__corrupt"].isNull()
        & utf8
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
        .when(boundary & (status == "BEGIN"), F.lit("begin"))
        .when(boundary, F.lit("end"))
        .when(loose_event, F.lit("loose"))
        .otherwise(F.lit("data"))
    )
    chunk = F.concat(topic, F.lit("["), F.col("partition").cast("string"), F.lit("]"))
    item = (
        F.when(skip, F.lit(None))
        .when(boundary, _transaction_key(tx_id))
        .when(loose_event, chunk)
        .otherwise(transaction)
    )
    stages.append(["*", F.when(data, row).alias("__row")])  # once, for row and columns
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
        "row": F.col("__row"),
        "columns": F.map_keys(F.col("__row")),
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
    stages.append([*columns, decodable.alias(DECODABLE)])
    return stages
