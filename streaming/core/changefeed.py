"""Change events from a database on Kafka (Debezium, AWS DMS's Kafka target) → source
transactions, each applied all or nothing. Pure: no Spark, no Kafka client.

A *feed* (``kafka.change_feeds`` in the config) is one connector's topics: a data topic per
source table and, with Debezium's transaction metadata, the ``<prefix>.transaction`` topic of
BEGIN/END events. Every micro-batch, the records the feed's stream read (and those still waiting
from earlier batches, ``Received``) are assembled (``core.feedevents.decide``, over Spark's
summaries of them; ``tests/support/assembly.py`` is the reference model, record by record) into:

- *source transactions* ready to apply, in source commit order: a transaction whose END and every
  data event of the tables the feed maps are in — and only once every transaction that committed
  before it (an earlier END) is complete or given up, so the tables never show a later commit
  without an earlier one;
- *chunks*: events without transaction metadata (a snapshot's reads, a feed without metadata,
  DMS), one per topic partition and micro-batch, applied per key in order (as DMS files are);
- *given up*: a transaction still incomplete after ``max_wait`` or pushed out by
  ``max_pending_events`` (oldest first) — REJECTED with ``SOURCE_TRANSACTION_INCOMPLETE``, its
  events kept in quarantine;
- records that cannot be read: each REJECTED alone (``INVALID_CHANGE_EVENT``);
- what waits: the records of transactions not ready yet, stored by the batch
  (``storage.pending``) and read again by the next one.

Each becomes a request (``request_for``): one UPSERT action per table, its rows the
DMS shape (``Op`` I/U/D) with two columns of ours: ``__key`` (the message key: the row's id) and
``__position`` (the source position, a string that sorts as the source's order: the watermark
of the schema's position property, so a late or replayed older change — a snapshot read
included — never overwrites a newer one, and a delete leaves a tombstone).
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Literal

from streaming.core.catalog import Dataset
from streaming.core.codes import Code
from streaming.core.columns import loose
from streaming.core.config import ChangeFeedConfig, duration_seconds
from streaming.core.errors import ConfigError, RejectedError
from streaming.core.fold import FLAGS, MISSING
from streaming.core.sourceschema import DATES, TIME_DIGITS, TIMESTAMP_UNITS, SchemaChanges

__all__ = [
    "BINLOG_FILE",
    "DEBEZIUM_OPS",
    "DMS_OPS",
    "EPOCH",
    "EPOCH_UTC",
    "KEY_COLUMN",
    "OP_COLUMN",
    "POSITION_COLUMN",
    "POSTGRES_TX",
    "SCHEME",
    "SNAPSHOT_INCREMENTAL",
    "SNAPSHOT_LAST",
    "TIME_COLUMN",
    "Boundary",
    "DataEvent",
    "Decode",
    "EventError",
    "Feed",
    "Item",
    "Part",
    "Received",
    "binlog_position",
    "column_mapping",
    "connect_value",
    "decimal_text",
    "decode_json_value",
    "feed_of",
    "is_unavailable",
    "kafka_where",
    "key_id",
    "may_hold_placeholder",
    "placeholder_texts",
    "placeholders",
    "plain_json",
    "postgres_position",
    "read_debezium",
    "read_dms",
    "request_for",
    "source_position",
    "source_time",
    "staged_at",
    "staged_row",
    "time_text",
    "transaction_key",
    "unwrap",
    "utc",
    "value_text",
]

KEY_COLUMN = "__key"
POSITION_COLUMN = "__position"
TIME_COLUMN = "__source_time"
"""A staged row's source commit time (ISO 8601, UTC), with a feed's ``time_property`` only."""
OP_COLUMN = "Op"
SCHEME = "changes:"
"""The ``locationUri`` scheme of a source transaction's rows (staged by the sink, never a path)."""

DEBEZIUM_OPS = {"c": "I", "r": "I", "u": "U", "d": "D"}


@dataclass(frozen=True)
class Feed:
    """One connector's topics, as the config maps them (``core.config.ChangeFeedConfig``)."""

    name: str
    dataset: str
    format: Literal["debezium", "dms"]
    tables: Mapping[str, str]
    """source table (Debezium's data collection, ``<db schema>.<table>``) → schema name."""
    topics: Mapping[str, str]
    """data topic → source table (DMS: its one topic → ``""``: tables come from each message)."""
    transaction_topic: str | None
    """Debezium's BEGIN/END topic; None: no transaction metadata (the guarantee is per key)."""
    position_property: str
    max_wait: timedelta
    max_pending_events: int
    placeholder: str = "__debezium_unavailable_value"
    """Debezium's ``unavailable.value.placeholder``: what stands for a value the source did not
    send (PostgreSQL's unchanged TOASTed columns, Oracle's unchanged LOBs)."""
    schema_changes: SchemaChanges = "evolve"
    """A column the events carry and the schema lacks: ``core.sourceschema``."""
    time_property: str | None = None
    """The datetime property every event fills with its source commit time (Debezium's
    ``source.ts_ms``, DMS's ``metadata.timestamp``); None: none."""
    integer_columns: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """source table → its schema's ``integer`` properties, as columns match them (lower case,
    no underscores). A time of day feeding one keeps the count Debezium sends, as every time
    did before times landed as text (a property declared, or evolved, then); ``_row``."""

    @property
    def all_topics(self) -> list[str]:
        return sorted({*self.topics, *([self.transaction_topic] if self.transaction_topic else [])})

    def transaction_id(self, source_id: str) -> str:
        return f"{self.format}:{self.name}:{source_id}"


@dataclass(frozen=True)
class Received:
    """A record of a feed's topic as Kafka gave it, and when the job first took it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: datetime
    received_at: datetime

    @property
    def where(self) -> str:
        return kafka_where(self.topic, self.partition, self.offset)

    def sort_key(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)


def kafka_where(topic: str, partition: int, offset: int) -> str:
    """A Kafka record's place as messages and outcomes name it: ``kafka:<topic>[<p>]@<offset>``."""
    return f"kafka:{topic}[{partition}]@{offset}"


Decode = Callable[[bytes], Any]
"""Bytes of a key or value → its JSON-shaped value (JSON, or Avro through the registry)."""


@dataclass(frozen=True)
class DataEvent:
    record: Received
    table: str
    """The source table (data collection)."""
    op: str
    """I, U or D (a DMS ``Op``); T: a truncate."""
    row: Mapping[str, Any] | None
    key: str | None
    position: str
    transaction: str | None
    order: int
    """The event's order among its transaction's events of its table (Debezium's
    ``data_collection_order``), else its offset."""
    unavailable: tuple[str, ...] = ()
    """Columns whose value the source did not send (``unavailable``): the stored value stays."""
    fields: Mapping[str, Any] | None = None
    """The Connect schemas of the row's columns (the JSON converter's schema); None without."""
    snapshot: str | None = None
    """Debezium's ``source.snapshot`` (``SNAPSHOT_LAST`` on the last read of a snapshot)."""
    time: str | None = None
    """The source's commit time (ISO 8601, UTC) when the feed has a ``time_property``."""

    @property
    def where(self) -> str:
        return self.record.where


@dataclass(frozen=True)
class Boundary:
    record: Received
    transaction: str
    status: Literal["BEGIN", "END"]
    counts: Mapping[str, int]
    """END: events per data collection."""
    id: str
    """The id as the event gives it: END's names the transaction for good (Postgres: its
    ``txId`` and commit LSN — a ``txId`` alone comes round again after 2**32 transactions)."""


Item = DataEvent | Boundary


def feed_of(cfg: ChangeFeedConfig, index: int, datasets: Mapping[str, Dataset]) -> Feed:
    """The feed a config entry describes, checked against its dataset: every mapped schema is
    an object schema with the position property (a string) as its watermark. A wrong entry
    stops the job at startup, naming the key."""
    where = f"kafka.change_feeds[{index}]"
    dataset = datasets.get(cfg.dataset)
    if dataset is None:
        raise ConfigError(
            f"{where}.dataset: no dataset {cfg.dataset!r} (datasets: {sorted(datasets)})"
        )
    tables = dict(cfg.tables) or {
        name: name for name, schema in dataset.schemas.items() if schema.is_object
    }
    for name in tables:
        schema = dataset.get(name)
        if schema is None or not schema.is_object:
            raise ConfigError(
                f"{where}.tables: {name!r} is not an object schema of {cfg.dataset!r}"
            )
        prop = schema.properties.get(cfg.position_property)
        if (
            prop is None
            or prop.base_type != "string"
            or schema.watermark != [cfg.position_property]
        ):
            raise ConfigError(
                f"{where}.position_property: schema {name} needs the string property "
                f"{cfg.position_property!r} as its watermark, to apply each row's changes in "
                f"source order: add `{cfg.position_property}: {{type: string}}` to its "
                f"properties and `watermark: [{cfg.position_property}]`"
            )
        if cfg.time_property is not None:
            stamp = schema.properties.get(cfg.time_property)
            if stamp is None or stamp.base_type not in ("datetime", "timestamp"):
                raise ConfigError(
                    f"{where}.time_property: schema {name} needs the datetime property "
                    f"{cfg.time_property!r} to hold each change's source commit time: add "
                    f"`{cfg.time_property}: {{type: datetime}}` to its properties (and, for "
                    f"SCD2 validity in source time, `scd2: {{valid_from: {cfg.time_property}}}`)"
                )
    sources = {source: schema for schema, source in tables.items()}
    integer_columns = {
        source: frozenset(
            loose(p) for p, d in dataset.schemas[name].properties.items() if d.type == "integer"
        )
        for source, name in sources.items()
    }
    if cfg.format == "debezium":
        topics = {f"{cfg.topic_prefix}.{source}": source for source in sources}
    else:
        assert cfg.topic is not None
        topics = {cfg.topic: ""}
    return Feed(
        cfg.name,
        cfg.dataset,
        cfg.format,
        sources,
        topics,
        cfg.transaction_topic,
        cfg.position_property,
        timedelta(seconds=duration_seconds(cfg.max_wait)),
        cfg.max_pending_events,
        cfg.unavailable_value_placeholder,
        cfg.schema_changes,
        cfg.time_property,
        {source: names for source, names in integer_columns.items() if names},
    )


def decode_json_value(data: bytes) -> Any:
    """A change event's key or value as JSON."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise RejectedError(f"not JSON: {e}", code=Code.INVALID_JSON) from e


POSTGRES_TX = re.compile(r"(\d+):\d+")
"""Debezium's Postgres transaction ids: ``<txId>:<lsn>`` — the lsn of each event (BEGIN's that
of the first, END's that of the commit), so one transaction's events carry different ids."""


def transaction_key(tx_id: str) -> str:
    """What the events and BEGIN/END of one source transaction share: Postgres's ``txId``; any
    other connector's id as it is (one id per transaction: MariaDB's and MySQL's GTID —
    MariaDB's ``<domain>-<server>-<seq>`` — or, without GTIDs, ``file=<binlog>,pos=<pos>``;
    SQL Server's LSN)."""
    found = POSTGRES_TX.fullmatch(tx_id)
    return found.group(1) if found else tx_id


# -- reading one record -----------------------------------------------------------------------


def _invalid(record: Received, why: str) -> RejectedError:
    return RejectedError(f"{record.where}: {why}", code=Code.INVALID_CHANGE_EVENT)


class EventError(RejectedError):
    """A data event of a source transaction whose envelope reads but whose row does not (a
    value no Delta column holds): the event still counts among its transaction's (``table``,
    ``order``), and the transaction, once complete, is rejected whole with this error — not
    left waiting ``max_wait`` for an event that did come, holding every later commit."""

    def __init__(self, error: RejectedError, transaction: str, table: str, order: int) -> None:
        super().__init__(error.message, code=error.code)
        self.transaction = transaction
        self.table = table
        self.order = order


def unwrap(value: Any) -> tuple[Any, Mapping[str, Any] | None]:
    """The JSON converter's ``{"schema": …, "payload": …}`` → (payload, schema); else as is."""
    if isinstance(value, dict) and set(value) == {"schema", "payload"}:
        schema = value["schema"]
        return value["payload"], schema if isinstance(schema, dict) else None
    return value, None


def _field_schemas(schema: Mapping[str, Any] | None, name: str) -> Mapping[str, Any]:
    """The Connect schemas of the fields of the envelope's struct field ``name``."""
    if not schema:
        return {}
    for part in schema.get("fields") or []:
        if isinstance(part, dict) and part.get("field") == name:
            return {
                f["field"]: f
                for f in part.get("fields") or []
                if isinstance(f, dict) and "field" in f
            }
    return {}


EPOCH = datetime(1970, 1, 1)
EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)


def connect_value(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """A column's value as Debezium's JSON carries it → a JSON value Spark casts to the schema's
    type: dates and timestamps (epoch days, milli-, micro-, nanoseconds) as ISO text, times of
    day (milli-, micro-, nanoseconds since midnight) as ``HH:MM:SS[.f]`` text (``time_text``),
    decimals (the base64 bytes of the unscaled value, or Debezium's variable-scale struct) as
    decimal text. Bytes (Avro's) as base64 text, as the JSON converter sends them (a ``binary``
    property reads it back: ``inputs.loads``). Without a schema (``schemas.enable=false``)
    values are taken as they are.

    A value no Delta column holds, or one Debezium is known to have sent wrong, raises
    ``ValueError`` (``_row`` rejects the event naming the column): PostgreSQL's ``infinity``
    dates and timestamps (a Date of -2147472692 days, a timestamp of ±9223372036825200000,
    a ``ZonedTimestamp`` of ``infinity``), an interval at MicroDuration's 64-bit limit (Debezium
    saturates a longer one there), a negative ``BIGINT UNSIGNED`` (Debezium's default
    ``bigint.unsigned.handling.mode=long`` wraps a value above 2^63 - 1; seen when the
    connector propagates the source's column types). A MariaDB/MySQL ``YEAR`` of 0000, which
    the connector sends as 1900 (no year YEAR holds otherwise: 1901-2155), is 0."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if value is None or not schema:
        return value
    if isinstance(value, float):
        if not math.isfinite(value):  # Avro's; JSON's are text
            return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        if schema.get("type") in ("float", "float32"):
            return _shortest_single(value)
    name = schema.get("name") or ""
    if isinstance(value, date | time):  # Avro's logical types, as fastavro reads them
        return _temporal_text(value)
    if name in DATES:
        try:
            return (date(1970, 1, 1) + timedelta(days=int(value))).isoformat()
        except OverflowError as e:
            raise ValueError(f"{_OUT_OF_RANGE} ({e})") from e
    scale = TIMESTAMP_UNITS.get(name)
    if scale is not None:
        seconds, rest = divmod(int(value), scale)
        micros = rest * 1_000_000 // scale
        try:
            return (EPOCH + timedelta(seconds=seconds, microseconds=micros)).isoformat()
        except OverflowError as e:
            raise ValueError(f"{_OUT_OF_RANGE} ({e})") from e
    digits = TIME_DIGITS.get(name)
    if digits is not None:
        return time_text(int(value), digits)
    if name == "org.apache.kafka.connect.data.Decimal" and isinstance(value, str):
        places = int((schema.get("parameters") or {}).get("scale", 0))
        return decimal_text(int.from_bytes(base64.b64decode(value), "big", signed=True), places)
    if name == "io.debezium.data.VariableScaleDecimal" and isinstance(value, dict):
        raw = value["value"]  # base64 text from JSON, the bytes from Avro
        raw = raw if isinstance(raw, bytes | bytearray) else base64.b64decode(raw)
        unscaled = int.from_bytes(raw, "big", signed=True)
        return decimal_text(unscaled, int(value["scale"]))
    if name == "io.debezium.time.ZonedTimestamp" and str(value).lstrip("+-") == "infinity":
        raise ValueError(_OUT_OF_RANGE)
    if name == "io.debezium.time.MicroDuration" and value in _INT64_LIMITS:
        raise ValueError(
            "an interval at the 64-bit limit of Debezium's MicroDuration, which it sends for "
            "any longer interval: set the connector's interval.handling.mode=string (ISO 8601 "
            "text, into a string property)"
        )
    if name == "io.debezium.time.Year" and value == 1900:
        return 0
    if isinstance(value, int) and value < 0 and _unsigned(schema):
        raise ValueError(
            "a negative value of an UNSIGNED column: Debezium's "
            "bigint.unsigned.handling.mode=long wraps a value above 9223372036854775807 so; "
            "set it to precise (a decimal(20,0))"
        )
    return value


_INT64_LIMITS = (-(2**63), 2**63 - 1)
_OUT_OF_RANGE = (
    "outside 0001-01-01..9999-12-31, which no Delta date or timestamp holds (PostgreSQL's "
    "'infinity' and '-infinity' come so)"
)


def _shortest_single(value: float) -> float:
    """A 32-bit float (a ``real``, a ``FLOAT``) as the JSON converter writes it, the shortest
    decimal that reads back as the same single: Avro's is the single itself, which as a double
    is noise (1.1 → 1.100000023841858). A double that is no single (JSON's text) is kept."""
    single = _SINGLE.pack(value)
    if _SINGLE.unpack(single)[0] != value:
        return value
    for digits in range(1, 10):
        shortest = float(f"{value:.{digits}g}")
        if _SINGLE.pack(shortest) == single:
            return shortest
    return value


_SINGLE = struct.Struct("<f")


def _temporal_text(value: date | time) -> str:
    """A date, timestamp or time fastavro read from an Avro logical type (Connect's ``Date``,
    ``Timestamp``, ``Time``) as the text the same value gets from JSON: a timestamp in UTC
    without its zone, as ``connect_value`` writes an epoch count."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, time):
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
        return time_text(micros + value.microsecond, 6)
    return value.isoformat()


def _unsigned(schema: Mapping[str, Any]) -> bool:
    """Whether the connector says (``column.propagate.source.type``) that the column is an
    UNSIGNED integer."""
    parameters = schema.get("parameters")
    if not isinstance(parameters, dict):
        return False
    return "UNSIGNED" in str(parameters.get("__debezium.source.column.type", "")).upper()


def time_text(value: int, digits: int) -> str:
    """A time of day counted in units of ``10**-digits`` s since midnight as ``HH:MM:SS`` text,
    the fraction's trailing zeros left out (``10:11:12.5``), as PostgreSQL writes it. Hours go
    past 23 and below zero: PostgreSQL's ``24:00:00``, MariaDB's ``TIME`` (a duration,
    ``-838:59:59`` to ``838:59:59``)."""
    sign = "-" if value < 0 else ""
    seconds, fraction = divmod(abs(value), 10**digits)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minute:02d}:{second:02d}"
    if fraction:
        text += "." + str(fraction).rjust(digits, "0").rstrip("0")
    return text


def decimal_text(unscaled: int, scale: int) -> str:
    """``unscaled * 10**-scale`` as plain decimal text, every digit kept: integer arithmetic on
    the digits, never ``decimal``'s context (28 significant digits by default, which rounds a
    38-digit value) nor exponent notation. Spark casts the text to the property's type, and a
    value the type cannot hold exactly is a ``TYPE_MISMATCH`` (``inputs.loads``), never rounded."""
    sign, digits = ("-" if unscaled < 0 else ""), str(abs(unscaled))
    if scale <= 0:
        return f"{sign}{digits}{'0' * -scale}"
    digits = digits.rjust(scale + 1, "0")
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


def plain_json(value: Any) -> Any:
    """``json.dumps``'s ``default`` for a staged row: a ``Decimal`` (Avro's decimals, read by
    fastavro at the schema's precision) as its exact plain text, bytes nested in a struct or
    array (Avro's, e.g. a point's ``wkb``) as base64 text as the JSON converter writes them,
    anything else as ``str``."""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def value_text(value: Any) -> str | None:
    """A staged row's value as the text a change feed's row holds (``feedevents.decoded``'s
    ``row``, a ``map<string,string>``): a string as it is, any other JSON value as JSON text — what
    Spark's JSON reader gives a string field or map value — bytes as base64 and a ``Decimal``
    as its plain text (``plain_json``). ``inputs.loads`` casts a primitive to its property's type
    and parses a nested one as JSON."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal | bytes | bytearray):
        return str(plain_json(value))
    # Compact, UTF-8 as it is: the text Spark's reader gives a nested value (a string property
    # holds it so); a float as Python writes it (Java may write the same double otherwise).
    return json.dumps(value, default=plain_json, separators=(",", ":"), ensure_ascii=False)


def _row(
    values: Any,
    schemas: Mapping[str, Any],
    record: Received,
    part: str,
    integers: frozenset[str] = frozenset(),
) -> dict[str, Any] | None:
    """``values`` (the event's ``before``/``after``) through ``connect_value``; ``integers``:
    the table's integer properties (``Feed.integer_columns``), where times stay counts."""
    if values is None:
        return None
    if not isinstance(values, dict):
        raise _invalid(record, f"'{part}' is not an object")
    if not schemas:  # ``connect_value`` without a schema: only bytes change
        return {
            k: base64.b64encode(v).decode("ascii") if isinstance(v, bytes | bytearray) else v
            for k, v in values.items()
        }
    try:
        row = {k: connect_value(v, schemas.get(k)) for k, v in values.items()}
    except (ValueError, OverflowError, TypeError, KeyError):
        pass  # found and named below; the common path stays one comprehension
    else:
        for column in [c for c in row if integers and loose(c) in integers]:
            if (schemas.get(column) or {}).get("name") in TIME_DIGITS:
                row[column] = values[column]
        return row
    for column, value in values.items():
        schema = schemas.get(column)
        try:
            connect_value(value, schema)
        except (ValueError, OverflowError, TypeError, KeyError) as e:
            # e.g. PostgreSQL's date 'infinity', which Debezium sends as a Date of -2147472692
            # days: no date Spark or Python holds. Rejected, named, kept in quarantine.
            kind = (schema or {}).get("name") or (schema or {}).get("type")
            raise _invalid(
                record, f"'{part}' column '{column}' ({kind}): value {value!r} cannot be read: {e}"
            ) from e
    raise AssertionError("unreachable: a column's conversion failed, then none did")


@functools.lru_cache(maxsize=64)
def _placeholder_marks(placeholder: str) -> tuple[bytes, ...]:
    """What JSON text holding the placeholder in any form ``is_unavailable`` knows holds: its
    text, its base64 text, its first byte as a number (the bytes-as-numbers form)."""
    text, raw, encoded = placeholders(placeholder)
    first = str(raw[0]).encode("ascii") if raw else b""  # b"" is in any text: always scan
    return text.encode("utf-8"), encoded.encode("ascii"), first


def may_hold_placeholder(data: bytes, placeholder: str) -> bool:
    """Whether a record's JSON text may hold the placeholder: False only where it cannot —
    no escape in the text (so a string equal to it is there as it is) and none of its forms'
    marks (``_placeholder_marks``)."""
    text, encoded, number = _placeholder_marks(placeholder)
    return b"\\" in data or text in data or encoded in data or number in data


@functools.lru_cache(maxsize=64)
def placeholders(placeholder: str) -> tuple[str, bytes, str]:
    """Debezium's placeholder as text, as bytes (a ``hex:`` value is given as bytes) and as
    base64 text (bytes in JSON); computed once per placeholder, not per value."""
    if placeholder.startswith("hex:"):
        raw = bytes.fromhex(placeholder[4:])
        text = raw.decode("utf-8", errors="replace")
    else:
        text, raw = placeholder, placeholder.encode("utf-8")
    return text, raw, base64.b64encode(raw).decode("ascii")


def placeholder_texts(placeholder: str) -> tuple[str, ...]:
    """Every form of the placeholder ``is_unavailable`` knows that JSON can carry, as compact
    JSON text (a string's form unquoted): the text, its base64 (bytes), a one-element array of
    either, its bytes as an array of numbers, a one-entry map — what Spark's JSON reader gives a
    column's value read as text (``inputs.changeevents``)."""
    text, raw, encoded = placeholders(placeholder)

    def compact(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    return (
        text,
        encoded,
        compact([text]),
        compact([encoded]),
        compact(list(raw)),
        compact({text: text}),
    )


def is_unavailable(value: Any, placeholder: str, schema: Mapping[str, Any] | None = None) -> bool:
    """Whether a column's value is Debezium's stand-in for a value it did not send: the
    placeholder as text (text, JSON, XML, …), as bytes (raw from Avro, base64 in JSON), as a
    one-element array (text and binary arrays), as the placeholder's bytes as numbers (integer
    arrays), or as a one-entry map (hstore). ``schema``: the column's Connect schema, if any (a
    base64 text is taken for bytes only where the schema says bytes, or where there is none)."""
    if value is None or isinstance(value, int | float):  # numbers and booleans never are
        return False
    text, raw, encoded = placeholders(placeholder)
    kind = (schema or {}).get("type")
    if isinstance(value, str):
        return value == text or (value == encoded and kind in (None, "bytes"))
    if isinstance(value, bytes | bytearray):
        return bytes(value) == raw
    if isinstance(value, list):
        return value in ([text], [encoded], [raw], list(raw))
    if isinstance(value, dict):
        return value == {text: text}
    return False


def _available(
    row: dict[str, Any],
    before: Mapping[str, Any] | None,
    schemas: Mapping[str, Any],
    placeholder: str,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``row`` with the placeholder's columns taken from ``before`` where it has them (a table
    with ``REPLICA IDENTITY FULL`` sends the old row whole), and the columns still unavailable
    (their value None: never written as data)."""
    missing: list[str] = []
    for column, value in row.items():
        if not is_unavailable(value, placeholder, schemas.get(column)):
            continue
        old = (before or {}).get(column)
        if old is not None and not is_unavailable(old, placeholder, schemas.get(column)):
            row[column] = old
        else:
            row[column] = None
            missing.append(column)
    return row, tuple(missing)


def key_id(key: Any) -> str | None:
    """The row id a message key stands for: its one field's value as text; a key of several
    fields: their values as a JSON array (in the key's field order)."""
    key, _ = unwrap(key)
    if key is None:
        return None
    if isinstance(key, dict):
        values = list(key.values())
        if len(values) == 1:
            return None if values[0] is None else _text(values[0])
        return json.dumps(values, separators=(",", ":"), default=str)
    return _text(key)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def source_position(source: Mapping[str, Any], record: Received) -> str:
    """The source position of a change as text that sorts as the source's order: PostgreSQL's
    (``postgres_position``), MariaDB's (``binlog_position``) and MySQL's binlog
    ``file``/``pos``/``row``, SQL Server's commit and change LSNs (hex of one width); another
    connector: its ``ts_ms`` and the Kafka offset. A PostgreSQL, MariaDB or MySQL event without
    its connector's position is rejected: a position of another form would be compared with
    theirs as text, and the order would be wrong."""
    connector = source.get("connector")
    if connector == "postgresql":
        return postgres_position(source, record)
    if connector in ("mariadb", "mysql"):
        if source.get("file") is None:
            raise _invalid(record, f"a {connector} event without its binlog 'file' in 'source'")
        if connector == "mariadb":
            return binlog_position(source)
        pos, row = int(source.get("pos") or 0), int(source.get("row") or 0)
        return f"{source['file']}/{pos:020d}/{row:010d}"
    if connector == "sqlserver" and source.get("change_lsn"):
        return f"{source.get('commit_lsn') or ''}/{source['change_lsn']}"
    return f"{int(source.get('ts_ms') or 0):020d}/{record.offset:020d}"


def postgres_position(source: Mapping[str, Any], record: Received) -> str:
    """A PostgreSQL change's place in commit order, ``<commit>/<lsn>`` (20 digits each):
    Debezium's ``source.sequence`` is ``[last committed LSN, current LSN]``, the first in the
    order the connector emits transactions (commit order), the second the change's own LSN,
    which orders one transaction's changes. The change's LSN alone does not order a change
    against a snapshot read: a transaction that changed a row before the read was taken but
    committed after it has a smaller LSN than the read and is emitted after it. An incremental
    snapshot's reads carry no ``lsn``, only the ``sequence`` of the point in the stream where
    the connector emits them (after every change that committed before the chunk was read, and
    before every change that committed later: Debezium's watermarks drop a read whose key
    changed while the chunk was read). Without a committed LSN (an initial snapshot's reads,
    the first transaction after the connector starts) the change's LSN stands for both."""
    lsn = source.get("lsn")
    committed = current = None
    sequence = source.get("sequence")
    if isinstance(sequence, str):
        try:
            sequence = json.loads(sequence)
        except ValueError:
            sequence = None
    if isinstance(sequence, list) and len(sequence) == 2:
        committed, current = (_lsn(v) for v in sequence)
    change = lsn if isinstance(lsn, int) and not isinstance(lsn, bool) else current
    if change is None:
        raise _invalid(
            record, "a postgresql event without 'lsn' or 'sequence' in 'source': no position"
        )
    return f"{committed if committed is not None else change:020d}/{change:020d}"


def _lsn(value: Any) -> int | None:
    """One LSN of Debezium's ``sequence`` (decimal text, or null)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


BINLOG_FILE = re.compile(r"(.*)\.(\d+)")


def binlog_position(source: Mapping[str, Any]) -> str:
    """A MariaDB change's binlog place, ``<file>/<pos>/<row>``, as text that sorts as the
    server's binlog order: the file's number widened to 10 digits (MariaDB writes 6 and goes on
    with 7 after ``.999999``), the event's position in the file (20 digits) and the row in the
    event (10 digits). A snapshot's reads all carry the place the snapshot began at, row 0:
    before every change streamed after it."""
    file = str(source["file"])
    numbered = BINLOG_FILE.fullmatch(file)
    if numbered:
        file = f"{numbered.group(1)}.{int(numbered.group(2)):010d}"
    pos, row = int(source.get("pos") or 0), int(source.get("row") or 0)
    return f"{file}/{pos:020d}/{row:010d}"


def read_debezium(feed: Feed, record: Received, decode: Decode) -> Item | None:
    """One Debezium record → a data event, a BEGIN/END boundary, or None (a Kafka tombstone:
    the null value after a delete, no change of its own)."""
    if record.value is None:
        return None
    try:
        value, schema = unwrap(decode(record.value))
        key = decode(record.key) if record.key is not None else None
    except RejectedError as e:
        raise _invalid(record, e.message) from e
    if not isinstance(value, dict):
        raise _invalid(record, "the value is not an object")
    if record.topic == feed.transaction_topic:
        return _boundary(record, value)
    table = feed.topics.get(record.topic)
    if table is None:
        raise _invalid(record, f"topic {record.topic!r} is not one of the feed's")
    op = value.get("op")
    if op != "t" and op not in DEBEZIUM_OPS:
        raise _invalid(record, f"op {op!r} is not one of c, u, d, r, t")
    source = value.get("source")
    if not isinstance(source, dict):
        raise _invalid(record, "no 'source' block")
    tx = value.get("transaction")
    tx_id = tx.get("id") if isinstance(tx, dict) else None
    order = tx.get("data_collection_order") if isinstance(tx, dict) else None
    transaction = None if tx_id is None else transaction_key(str(tx_id))
    place = int(order) if isinstance(order, int) else record.offset
    position = source_position(source, record)
    if op == "t":  # every row of the table, in its transaction (a truncate cuts its run: ``Part``)
        return DataEvent(record, table, "T", None, None, position, transaction, place)
    mapped = DEBEZIUM_OPS[op]
    part = "before" if mapped == "D" else "after"
    schemas = _field_schemas(schema, part)
    integers = feed.integer_columns.get(table, frozenset())
    try:
        row = _row(value.get(part), schemas, record, part, integers)
        if row is None:
            raise _invalid(record, f"op {op!r} without '{part}'")
        unavailable: tuple[str, ...] = ()
        if mapped != "D":
            before_schemas = _field_schemas(schema, "before")
            before = _row(value.get("before"), before_schemas, record, "before", integers)
            if decode is not decode_json_value or may_hold_placeholder(
                record.value, feed.placeholder
            ):
                row, unavailable = _available(row, before, schemas, feed.placeholder)
    except RejectedError as e:
        if transaction is None or feed.transaction_topic is None:
            raise
        raise EventError(e, transaction, table, place) from e
    fields = schemas or None
    snapshot = source.get("snapshot")
    at = source_time(source.get("ts_ms")) if feed.time_property is not None else None
    return DataEvent(
        record,
        table,
        mapped,
        row,
        key_id(key),
        position,
        transaction,
        place,
        unavailable,
        fields,
        snapshot if isinstance(snapshot, str) else None,
        at,
    )


def source_time(ts_ms: Any) -> str | None:
    """Debezium's ``source.ts_ms`` (the source's commit time, epoch milliseconds) as an ISO 8601
    UTC time; None when it is not a number."""
    if isinstance(ts_ms, bool) or not isinstance(ts_ms, int | float):
        return None
    at = EPOCH_UTC + timedelta(milliseconds=ts_ms)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _boundary(record: Received, value: Mapping[str, Any]) -> Boundary:
    status, tx = value.get("status"), value.get("id")
    if status not in ("BEGIN", "END") or tx is None:
        raise _invalid(record, "a transaction event needs 'status' BEGIN or END and an 'id'")
    counts: dict[str, int] = {}
    for entry in value.get("data_collections") or []:
        if isinstance(entry, dict) and "data_collection" in entry:
            counts[str(entry["data_collection"])] = int(entry.get("event_count") or 0)
    return Boundary(record, transaction_key(str(tx)), status, counts, str(tx))


DMS_OPS = {"insert": "I", "load": "I", "refresh": "I", "update": "U", "delete": "D"}


def read_dms(feed: Feed, record: Received, decode: Decode) -> Item | None:
    """One message of AWS DMS's Kafka target (``{"data": …, "metadata": …}``) → a data event;
    None for its control records (``record-type`` other than ``data``). The source table is
    ``metadata.schema-name`` + ``.`` + ``table-name``; the position its ``timestamp``."""
    if record.value is None:
        return None
    try:
        value = decode(record.value)
    except RejectedError as e:
        raise _invalid(record, e.message) from e
    if not isinstance(value, dict) or not isinstance(value.get("metadata"), dict):
        raise _invalid(record, "not a DMS message: no 'metadata' object")
    meta = value["metadata"]
    if meta.get("record-type", "data") != "data":
        return None
    op = DMS_OPS.get(str(meta.get("operation", "")).lower())
    if op is None:
        raise _invalid(record, f"operation {meta.get('operation')!r} is not a DMS data operation")
    table = f"{meta.get('schema-name')}.{meta.get('table-name')}"
    data = value.get("data")
    if not isinstance(data, dict):
        raise _invalid(record, "no 'data' object")
    stamp = str(meta.get("timestamp") or "")
    at = (stamp or None) if feed.time_property is not None else None
    return DataEvent(record, table, op, dict(data), None, stamp, None, record.offset, time=at)


# -- source transactions ----------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One action of a source transaction: a run of one table's events, or a truncate."""

    schema: str
    location: str
    """``changes:<transaction id>/<schema>``, then ``#<n>`` for the n-th part after a truncate."""
    truncate: bool
    events: tuple[DataEvent, ...]


def column_mapping(feed: Feed) -> dict[str, str]:
    """A staged row's columns of ours → the schema's properties they feed."""
    return {
        **({"id": KEY_COLUMN} if feed.format == "debezium" else {}),
        feed.position_property: POSITION_COLUMN,
        **({feed.time_property: TIME_COLUMN} if feed.time_property is not None else {}),
    }


def request_for(
    feed: Feed, transaction_id: str, parts: Sequence[tuple[str, str, bool]]
) -> dict[str, Any]:
    """The request of a source transaction whose parts are (schema, location, truncate): an
    UPSERT of each run of rows, a MERGE of no rows for each truncate; without parts, an UPSERT
    of nothing into the feed's first schema."""
    if not parts:
        parts = [
            (schema, f"{SCHEME}{transaction_id}/{schema}", False)
            for schema in sorted(set(feed.tables.values()))[:1]
        ]
    return {
        "transactionId": transaction_id,
        "dataset": feed.dataset,
        "actions": [
            {
                "operation": "MERGE" if truncate else "UPSERT",
                "format": "DMS",
                "locationUri": location,
                "target": schema,
                "columnFormat": "AS_SPECIFIED",
                "columnMapping": column_mapping(feed),
            }
            for schema, location, truncate in parts
        ],
    }


def staged_row(event: DataEvent) -> dict[str, Any]:
    """The row an event stages: the DMS shape (``Op``) with our key, position and flags."""
    row = dict(event.row or {})
    row[OP_COLUMN] = event.op
    row[KEY_COLUMN] = event.key
    row[POSITION_COLUMN] = event.position
    if event.time is not None:
        row[TIME_COLUMN] = event.time
    for column in event.unavailable:  # the stored value stays (``core.fold.MISSING``)
        row[f"{FLAGS}{column}"] = MISSING
    return row


def staged_at(uri: str) -> str | None:
    """The transaction id of a staged rows location, or None."""
    if not uri.startswith(SCHEME):
        return None
    tx, _, schema = uri.removeprefix(SCHEME).rpartition("/")
    return tx if tx and schema else None


def utc(value: datetime | None) -> datetime:
    if value is None:
        return datetime.fromtimestamp(0, UTC)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


# -- the end of a feed's initial snapshot ------------------------------------------------------

SNAPSHOT_INCREMENTAL = "incremental"
"""Debezium's ``source.snapshot`` on the reads of an incremental (or signalled ad-hoc) snapshot."""
SNAPSHOT_LAST = "last"
"""Debezium's ``source.snapshot`` on the last record of an initial snapshot. Its values (3.6):
``first``, ``first_in_data_collection``, ``true``, ``last_in_data_collection`` and ``last`` on
a snapshot's reads, ``incremental`` on an incremental snapshot's, ``false`` (or none) on
streamed changes."""
