"""Every documented type, edge values included, from a real database to Delta (issue 57): a table
with a column of each type docs/interface.md lists, rows of typical, largest and smallest values
and NULLs — each its own source transaction — then updates and a delete, through Debezium's
connector in Kafka Connect (JSON converter with its schemas, the settings docs/interface.md
gives: precise decimals, adaptive times) and one run of the job.

Every value the job stored (read by delta-rs) is compared with the one the database gives its
Python driver (psycopg, PyMySQL), turned into what docs/interface.md says the type lands as.
Values no Delta column holds (PostgreSQL's ``infinity`` dates and timestamps, an interval
beyond Debezium's MicroDuration) and a value that does not fit its property (a MariaDB BOOLEAN
of 5) are each REJECTED with their code, naming the column, and no other transaction is harmed.

Avro is not run here: no Connect Avro converter nor a Confluent-compatible registry is served
from Maven Central or PyPI (issue 57's closing note).
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pymysql
import pytest
from pyspark.sql import SparkSession

from streaming.runtime.job import Job
from tests.support import Workspace, stored_outcomes
from tests.support.kafka import read_topic
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.kafka_connect import (
    DebeziumConnect,
    DebeziumMariaDBConnect,
    DebeziumPostgresConnect,
    wait_for_slot,
)
from tests.support.mariadb import MariaDBServer
from tests.support.postgres import PostgresCluster
from tests.support.sources import KINDS, running

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

Expect = Callable[[Any], Any]
"""The database driver's value → the value the Delta table must hold (delta-rs's Python)."""


def same(value: Any) -> Any:
    return value


def utc(value: datetime) -> datetime:
    """A timestamp without zone as the job stores it: the instant in the session's UTC."""
    return value.replace(tzinfo=UTC)


def time_text(value: timedelta) -> str:
    """A TIME (a duration) as HH:MM:SS[.f], hours past 23 and below zero, as PostgreSQL writes
    a time: the text docs/interface.md says times land as."""
    micros = value // timedelta(microseconds=1)
    sign, micros = ("-" if micros < 0 else ""), abs(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{fraction:06d}".rstrip("0") if fraction else "")


def json_value(text: str) -> Any:
    return json.loads(text)


def bits_number(little_endian: bytes) -> int:
    """Debezium's ``io.debezium.data.Bits``: the bits as a number, least significant byte
    first."""
    return int.from_bytes(little_endian, "little")


@dataclass(frozen=True)
class Column:
    name: str
    sql: str
    """The column's type in the source database."""
    prop: str
    """The property the dataset declares (docs/interface.md's type tables)."""
    values: tuple[str, str, str]
    """SQL literals: a typical value, the largest (or longest), the smallest (or empty)."""
    expect: Expect = same
    """The driver's value → the stored one."""
    stored: Expect = same
    """The stored value (delta-rs) → the form ``expect`` gives (e.g. JSON text → its value)."""
    read: str = ""
    """The SQL that reads it for the driver (default: the column)."""


PG_COLUMNS = [
    Column("i2", "smallint", "integer", ("1", "32767", "-32768")),
    Column("i4", "integer", "integer", ("2", "2147483647", "-2147483648")),
    Column("i8", "bigint", "integer", ("3", "9223372036854775807", "-9223372036854775808")),
    Column("r", "real", "number", ("1.5", "'Infinity'", "'NaN'")),
    Column("d", "double precision", "number", ("2.25", "1.7976931348623157e308", "'-Infinity'")),
    Column(
        "n",
        "numeric(38,10)",
        "{type: decimal, precision: 38, scale: 10}",
        ("12.5", "9999999999999999999999999999.9999999999", "-0.0000000001"),
    ),
    Column(
        "nv",
        "numeric",
        "{type: decimal, precision: 38, scale: 9}",
        ("3.14159", "12345678901234567890123456789.123456789", "-0.000000001"),
    ),
    Column(
        "m",
        "money",
        "{type: decimal, precision: 38, scale: 2}",
        ("12.34", "92233720368547758.07", "-92233720368547758.08"),
        read="m::numeric",
    ),
    Column("b", "boolean", "boolean", ("true", "false", "false")),
    Column("t", "text", "string", ("'héllo ☃ 🙂'", "repeat('x', 100000)", "''")),
    Column("vc", "varchar(10)", "string", ("'abc'", "'0123456789'", "''")),
    Column("ch", "char(3)", "string", ("'ab'", "'abc'", "''")),
    Column(
        "u",
        "uuid",
        "string",
        (
            "gen_random_uuid()",
            "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
            "'00000000-0000-0000-0000-000000000000'",
        ),
        read="u::text",
    ),
    Column(
        "j",
        "json",
        "string",
        ('\'{"a": [1, {"b": null}], "c": "☃"}\'', "'[[[[[1]]]]]'", "'{}'"),
        expect=json_value,
        stored=json_value,
        read="j::text",
    ),
    Column(
        "jb",
        "jsonb",
        "string",
        ('\'{"k": 1.5, "l": [true]}\'', '\'{"deep": {"er": {"est": "x"}}}\'', "'[]'"),
        expect=json_value,
        stored=json_value,
        read="jb::text",
    ),
    Column("x", "xml", "string", ("'<a>x</a>'", "'<a><b c=\"1\"/></a>'", "'<a/>'"), read="x::text"),
    Column(
        "by",
        "bytea",
        "binary",
        ("'\\x00ff10'", "decode(repeat('00ff', 50000), 'hex')", "''"),
        expect=bytes,
    ),
    Column("dt", "date", "date", ("'2024-02-29'", "'9999-12-31'", "'0001-01-01'")),
    Column(
        "ts",
        "timestamp",
        "datetime",
        ("'2024-02-29 10:11:12.123456'", "'9999-12-31 23:59:59.999999'", "'0001-01-01 00:00:00'"),
        expect=utc,
    ),
    Column(
        "ts3",
        "timestamp(3)",
        "datetime",
        ("'1969-12-31 23:59:59.999'", "'2262-04-12 00:00:00'", "'1677-09-21 00:00:00'"),
        expect=utc,
    ),
    Column(
        "tz",
        "timestamptz",
        "datetime",
        (
            "'2024-02-29 10:11:12.123456+02'",
            "'9999-12-31 23:59:59.999999+00'",
            "'0001-01-01 00:00:00+00'",
        ),
    ),
    Column(
        "tm",
        "time",
        "string",
        ("'10:11:12.123456'", "'24:00:00'", "'00:00:00'"),
        expect=lambda v: time_text(v),
        read="tm - time '00:00'",
    ),
    Column(
        "tm0",
        "time(0)",
        "string",
        ("'10:11:12'", "'23:59:59'", "'00:00:00'"),
        expect=lambda v: time_text(v),
        read="tm0 - time '00:00'",
    ),
    Column(
        "tmz",
        "timetz",
        "string",
        ("'10:11:12+02'", "'23:59:59-12'", "'00:00:00+14'"),
        # Debezium's ZonedTime: the time in UTC, ``…Z``.
        expect=lambda v: datetime.combine(date(2000, 1, 1), v).astimezone(UTC).time(),
        stored=lambda s: time.fromisoformat(s).replace(tzinfo=None),
    ),
    Column(
        "iv",
        "interval",
        "integer",
        ("'1 year 2 mons 3 days 04:05:06.5'", "'-1 day -00:00:00.000001'", "'00:00:00'"),
        # Debezium's MicroDuration: µs, a month counted as 30.4375 days.
        read=(
            "(extract(year from iv) * 12 + extract(month from iv)) * 2629800000000"
            " + extract(day from iv) * 86400000000"
            " + extract(epoch from iv - make_interval(years => extract(year from iv)::int,"
            " months => extract(month from iv)::int, days => extract(day from iv)::int))"
            " * 1000000"
        ),
        expect=lambda v: int(v),
    ),
    Column(
        "ia",
        "int[]",
        "{type: array, items: {type: integer}}",
        ("'{1,2,NULL}'", "'{2147483647}'", "'{}'"),
    ),
    Column(
        "ta",
        "text[]",
        "{type: array, items: {type: string}}",
        ("'{a,\"b c\",NULL}'", "'{\"☃\"}'", "'{}'"),
    ),
    Column(
        "ip", "inet", "string", ("'192.168.0.1/24'", "'::1'", "'0.0.0.0'"), read="format('%s', ip)"
    ),
    Column(
        "cd", "cidr", "string", ("'10.0.0.0/8'", "'::/0'", "'0.0.0.0/32'"), read="format('%s', cd)"
    ),
    Column(
        "mac",
        "macaddr",
        "string",
        ("'08:00:2b:01:02:03'", "'ff:ff:ff:ff:ff:ff'", "'00:00:00:00:00:00'"),
        read="format('%s', mac)",
    ),
    Column("r4", "int4range", "string", ("'[1,10)'", "'(,)'", "'empty'"), read="format('%s', r4)"),
    Column(
        "tsr",
        "tstzrange",
        "string",
        ("'[2024-01-01 00:00+00,2024-02-01 00:00+00)'", "'(,)'", "'empty'"),
        read="format('%s', tsr)",
    ),
    Column("tv", "tsvector", "string", ("'a fat cat'", "'ü:1A'", "''"), read="format('%s', tv)"),
    Column(
        "bt",
        "bit(12)",
        "binary",
        ("B'101010101010'", "B'111111111111'", "B'000000000000'"),
        read="format('%s', bt)",
        expect=lambda bits: int(bits, 2),
        stored=bits_number,
    ),
    Column("b1", "bit(1)", "boolean", ("B'1'", "B'1'", "B'0'"), read="bt1_bool", expect=same),
    Column(
        "pt",
        "point",
        "string",
        ("'(1.5,2.5)'", "'(1e300,-1e300)'", "'(0,0)'"),
        read="array[pt[0], pt[1]]",
        stored=lambda s: [json.loads(s)["x"], json.loads(s)["y"]],
    ),
    Column("e", "mood", "string", ("'happy'", "'sad'", "'sad'"), read="e::text"),
    Column(
        "hs",
        "hstore",
        "string",
        ("'a=>1,b=>NULL'", '\'"k ☃"=>"v"\'', "''"),
        read="hstore_to_json(hs)::text",
        expect=json_value,
        stored=json_value,
    ),
    Column("ct", "citext", "string", ("'MiXeD'", "'ÄÖ'", "''"), read="ct::text"),
    Column("lt", "ltree", "string", ("'a.b.c'", "'x'", "''"), read="lt::text"),
    Column("o", "oid", "integer", ("4000000000", "4294967295", "0"), expect=lambda v: int(v)),
]
"""PostgreSQL 15's types as docs/interface.md lists them. ``b1`` is read through a cast."""

PG_REJECTED = {
    "dt": ("'infinity'", "INVALID_CHANGE_EVENT"),
    "ts": ("'-infinity'", "INVALID_CHANGE_EVENT"),
    "tz": ("'infinity'", "INVALID_CHANGE_EVENT"),
    "iv": ("'-178000000 years'", "INVALID_CHANGE_EVENT"),
}
"""Values no Delta column holds: column → (literal, the code of its transaction's outcome)."""


MARIADB_COLUMNS = [
    Column("ti", "tinyint", "integer", ("1", "127", "-128")),
    Column("tb", "tinyint(1)", "integer", ("1", "5", "-1")),
    Column("bo", "boolean", "boolean", ("true", "true", "false"), expect=bool),
    Column("si", "smallint", "integer", ("2", "32767", "-32768")),
    Column("mi", "mediumint", "integer", ("3", "8388607", "-8388608")),
    Column("i", "int", "integer", ("4", "2147483647", "-2147483648")),
    Column("iu", "int unsigned", "integer", ("5", "4294967295", "0")),
    Column("bi", "bigint", "integer", ("6", "9223372036854775807", "-9223372036854775808")),
    Column(
        "bu",
        "bigint unsigned",
        "{type: decimal, precision: 20, scale: 0}",
        ("7", "18446744073709551615", "0"),
    ),
    Column("f", "float", "number", ("1.5", "-3.4e38", "0")),
    Column("d", "double", "number", ("2.25", "1.7976931348623157e308", "-2.2250738585072014e-308")),
    Column(
        "n",
        "decimal(38,10)",
        "{type: decimal, precision: 38, scale: 10}",
        ("12.5", "9999999999999999999999999999.9999999999", "-0.0000000001"),
    ),
    Column(
        "n65",
        "decimal(65,30)",
        "string",
        ("1.5", "99999999999999999999999999999999999.999999999999999999999999999999", "0"),
        stored=Decimal,
    ),
    Column("b1", "bit(1)", "boolean", ("b'1'", "b'1'", "b'0'"), expect=lambda v: v == b"\x01"),
    Column(
        "b10",
        "bit(10)",
        "binary",
        ("b'1010101010'", "b'1111111111'", "b'0000000000'"),
        expect=lambda v: int.from_bytes(v, "big"),
        stored=bits_number,
    ),
    Column("c", "char(3)", "string", ("'ab'", "'abc'", "''")),
    Column("vc", "varchar(10)", "string", ("'héllo ☃'", "'0123456789'", "''")),
    Column("tx", "longtext", "string", ("'🙂 unicode'", "repeat('x', 100000)", "''")),
    Column("bn", "binary(4)", "binary", ("'ab'", "x'ffffffff'", "x'00000000'")),
    Column("vb", "varbinary(10)", "binary", ("x'00ff'", "x'ffffffffffffffffffff'", "''")),
    Column("bl", "longblob", "binary", ("x'00ff10'", "repeat(x'00ff', 50000)", "''")),
    Column("e", "enum('sad','happy')", "string", ("'happy'", "'sad'", "'sad'")),
    Column("s", "set('a','b','c')", "string", ("'a,c'", "'a,b,c'", "''")),
    Column("dt", "date", "date", ("'2024-02-29'", "'9999-12-31'", "'0001-01-01'")),
    Column(
        "dtt",
        "datetime",
        "datetime",
        ("'2024-02-29 10:11:12'", "'9999-12-31 23:59:59'", "'1000-01-01 00:00:00'"),
        expect=utc,
    ),
    Column(
        "dt6",
        "datetime(6)",
        "datetime",
        ("'1969-12-31 23:59:59.999999'", "'9999-12-31 23:59:59.999999'", "'0001-01-01 00:00:00'"),
        expect=utc,
    ),
    Column(
        "ts",
        "timestamp(6) NULL DEFAULT NULL",
        "datetime",
        ("'2024-02-29 10:11:12.123456'", "'2038-01-19 03:14:07.999999'", "'1970-01-01 00:00:01'"),
        expect=utc,
    ),
    Column("tm", "time", "string", ("'10:11:12'", "'838:59:59'", "'-838:59:59'"), expect=time_text),
    Column(
        "tm6",
        "time(6)",
        "string",
        ("'10:11:12.123456'", "'24:00:00.000001'", "'-00:00:00.000001'"),
        expect=time_text,
    ),
    Column("y", "year", "integer", ("2024", "2155", "0")),
    Column(
        "j",
        "json",
        "string",
        ('\'{"a": [1, {"b": null}], "c": "☃"}\'', "'[[[[[1]]]]]'", "'{}'"),
        expect=json_value,
        stored=json_value,
    ),
    Column(
        "g",
        "point",
        "string",
        (
            "ST_GeomFromText('POINT(1.5 2.5)')",
            "ST_GeomFromText('POINT(1e300 -1e300)')",
            "ST_GeomFromText('POINT(0 0)')",
        ),
        # The driver's value: MariaDB's SRID (4 bytes) and the WKB; Debezium's the WKB and x, y.
        expect=lambda v: v[4:],
        stored=lambda s: base64.b64decode(json.loads(s)["wkb"]),
    ),
    Column(
        "u",
        "uuid",
        "string",
        (
            "uuid()",
            "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
            "'00000000-0000-0000-0000-000000000000'",
        ),
        expect=str,
    ),
]
"""MariaDB 10.11's types as docs/interface.md lists them (``INET6`` is not: the connector
3.5.0 cannot parse a table that has one)."""

MARIADB_REJECTED = {"bo": ("5", "TYPE_MISMATCH")}


def dataset(columns: list[Column]) -> str:
    props = "".join(
        f"    {c.name}: {c.prop if c.prop.startswith('{') else f'{{type: {c.prop}}}'}\n"
        for c in columns
    )
    return (
        "types.Row:\n  properties:\n"
        f"{props}    sourcePosition: {{type: string}}\n  watermark: [sourcePosition]\n"
    )


class Database:
    """A source database of the scenario: its statements, its connector, its driver's rows."""

    name = ""
    columns: list[Column]
    rejected: dict[str, tuple[str, str]]

    def execute(self, statement: str) -> None:
        raise NotImplementedError

    def table(self) -> str:
        raise NotImplementedError

    def connector(self, workdir: Path, bootstrap: str, prefix: str) -> DebeziumConnect:
        """Its connector, not started."""
        raise NotImplementedError

    def ready(self, connect: DebeziumConnect) -> None:
        """Wait, once ``connect`` started, for what its first records need (nothing here)."""

    def rows(self) -> dict[str, dict[str, Any]]:
        """id → column → the driver's value (read as ``Column.read`` says), of the rows
        below id 10 (those above hold values the job rejects, and some no driver reads)."""
        raise NotImplementedError

    def create(self) -> None:
        body = ", ".join(f"{c.name} {c.sql}" for c in self.columns)
        self.execute(f"CREATE TABLE types (id int PRIMARY KEY, {body})")

    def insert(self, id_: int, values: list[str]) -> None:
        self.execute(f"INSERT INTO types VALUES ({id_}, {', '.join(values)})")


class Postgres(Database):
    name = "postgresql"
    columns = PG_COLUMNS
    rejected = PG_REJECTED

    def __init__(self, pg: PostgresCluster) -> None:
        self.pg = pg

    def execute(self, statement: str) -> None:
        self.pg.execute(statement)

    def table(self) -> str:
        return "public.types"

    def create(self) -> None:
        for extension in ("hstore", "citext", "ltree"):
            self.execute(f"CREATE EXTENSION {extension}")
        self.execute("CREATE TYPE mood AS ENUM ('sad', 'happy')")
        super().create()
        self.execute("ALTER TABLE types REPLICA IDENTITY FULL")

    def connector(self, workdir: Path, bootstrap: str, prefix: str) -> DebeziumConnect:
        return DebeziumPostgresConnect(
            workdir,
            bootstrap,
            self.pg,
            topic_prefix=prefix,
            tables=[self.table()],
            # The default a new user gets (the tests' other connectors send decimals as text).
            properties={"decimal.handling.mode": "precise"},
        )

    def ready(self, connect: DebeziumConnect) -> None:
        assert isinstance(connect, DebeziumPostgresConnect)
        wait_for_slot(self.pg, connect.slot_name)

    def rows(self) -> dict[str, dict[str, Any]]:
        reads = [(c.read or c.name).replace("bt1_bool", "b1::int::boolean") for c in self.columns]
        with self.pg.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, {', '.join(reads)} FROM types WHERE id < 10".encode())
            return {
                str(r[0]): dict(zip([c.name for c in self.columns], r[1:], strict=True))
                for r in cur.fetchall()
            }


class MariaDB(Database):
    name = "mariadb"
    columns = MARIADB_COLUMNS
    rejected = MARIADB_REJECTED

    def __init__(self, db: MariaDBServer) -> None:
        self.db = db

    def execute(self, statement: str) -> None:
        self.db.execute(statement)

    def table(self) -> str:
        return f"{self.db.database}.types"

    def create(self) -> None:
        body = ", ".join(f"{c.name} {c.sql}" for c in self.columns)
        self.execute(f"CREATE TABLE types (id int PRIMARY KEY, {body}) DEFAULT CHARSET=utf8mb4")

    def connector(self, workdir: Path, bootstrap: str, prefix: str) -> DebeziumConnect:
        return DebeziumMariaDBConnect(
            workdir,
            bootstrap,
            self.db,
            topic_prefix=prefix,
            tables=[self.table()],
            # An unsigned BIGINT above 2^63 - 1 wraps to a negative number with the default
            # `long` (docs/interface.md): exact as a decimal(20,0).
            # Debezium's time adjuster reads a year below 100 as a two-digit one (0001 → 2001):
            # MariaDB has already stored four digits (docs/interface.md).
            properties={
                "bigint.unsigned.handling.mode": "precise",
                "enable.time.adjuster": "false",
            },
        )

    def rows(self) -> dict[str, dict[str, Any]]:
        conn = pymysql.connect(
            host=self.db.host,
            port=self.db.port,
            user=self.db.user,
            password=self.db.password,
            database=self.db.database,
            init_command="SET time_zone = '+00:00'",
        )
        try:
            with conn.cursor() as cur:
                names = [c.name for c in self.columns]
                cur.execute(f"SELECT id, {', '.join(names)} FROM types WHERE id < 10")
                return {str(r[0]): dict(zip(names, r[1:], strict=True)) for r in cur.fetchall()}
        finally:
            conn.close()


@pytest.fixture(scope="module", params=KINDS)
def database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Database]:
    with running(request.param, tmp_path_factory) as server:
        if isinstance(server, PostgresCluster):
            yield Postgres(server)
        else:
            yield MariaDB(server)


def matches(column: Column, stored: Any, source: Any) -> bool:
    """Whether the stored value is the source's as the column's type lands (NULL as NULL)."""
    if stored is None or source is None:
        return stored is None and source is None
    have, want = column.stored(stored), column.expect(source)
    if isinstance(have, float) and isinstance(want, float) and math.isnan(want):
        return math.isnan(have)
    return bool(have == want)


def test_every_documented_type_lands_as_the_database_holds_it(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: LocalKafkaBroker,
    database: Database,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    db = database
    db.create()
    prefix = f"types{uuid.uuid4().hex[:6]}"
    connect = db.connector(tmp_path_factory.mktemp("connect"), kafka_broker.bootstrap, prefix)
    with connect:  # stopped when the block ends, however it ends
        db.ready(connect)
        # 1-3: typical, largest, smallest values; 4: NULLs; 5: inserted, then deleted.
        for id_, which in ((1, 0), (2, 1), (3, 2), (5, 0)):
            db.insert(id_, [c.values[which] for c in db.columns])
        db.insert(4, ["NULL"] * len(db.columns))
        # Rejected: one transaction each, a column holding a value the job refuses.
        bad_ids = {}
        for n, (column, (literal, _)) in enumerate(sorted(db.rejected.items()), start=10):
            db.insert(n, [literal if c.name == column else "NULL" for c in db.columns])
            bad_ids[str(n)] = column
        # Updates: NULLs → the largest values, the typical row → the smallest, and back.
        for id_, which in ((4, 1), (1, 2), (1, 0)):
            values = ", ".join(f"{c.name} = {c.values[which]}" for c in db.columns)
            db.execute(f"UPDATE types SET {values} WHERE id = {id_}")
        db.execute("DELETE FROM types WHERE id = 5")
        transactions = 5 + len(bad_ids) + 4
        read_topic(kafka_broker.bootstrap, f"{prefix}.transaction", expect=2 * transactions)

    ws.dataset("types", dataset(db.columns))
    feed = {
        "name": "types",
        "dataset": "types",
        "topic_prefix": prefix,
        "tables": {"types.Row": db.table()},
    }
    Job.create(spark, ws.feed_config(kafka_broker, prefix, feed)).run(once=True)

    outcomes = stored_outcomes(ws.root / "warehouse")
    assert len(outcomes) == transactions
    rejected = [o for o in outcomes if o["status"] == "REJECTED"]
    assert len(rejected) == len(bad_ids), rejected
    for outcome in rejected:
        message, code = outcome["error"]["message"], outcome["error"]["code"]
        [column] = [c for c in bad_ids.values() if f"'{c}'" in message or f"{c}:" in message]
        assert code == db.rejected[column][1], (column, message)
    assert {o["status"] for o in outcomes} - {"REJECTED"} == {"COMMITTED"}

    path = ws.root / "warehouse" / "types" / "types" / "Row"
    stored = {r["id"]: r for r in deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist()}
    source = db.rows()
    assert set(stored) == set(source) == {"1", "2", "3", "4"}
    wrong = [
        (id_, c.name, stored[id_][c.name], source[id_][c.name])
        for id_ in sorted(stored)
        for c in db.columns
        if not matches(c, stored[id_][c.name], source[id_][c.name])
    ]
    assert not wrong, wrong
