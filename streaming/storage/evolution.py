"""Schema evolution at startup (docs/interface.md, "Schema evolution"): every schema's tables
follow its definition.

A dataset definition changes over time; the tables written under the old definition stay. At
startup every table of every schema — the current table, and for objects the history and the
tombstones — is compared with what the definition asks for (``compare``, pure):

- an added property, or a field added inside an object property (also inside the objects of an
  array or a map), is added to the table as a nullable column (``ALTER TABLE ADD COLUMNS``, at
  its place in the definition's order). Old rows read NULL; their hashes stay as they were (the
  hash is the SHA-256 of the JSON of the properties, which leaves NULLs out);
- a removed property keeps its column: it is no longer written (an update keeps the stored value,
  an insert writes NULL) and a warning says so at every start;
- anything else — a type changed, narrowed or widened (no type widening is readable by both
  Delta and delta-rs 1.6.6: ``widening_problem``), a field removed inside an object property, a
  NOT NULL column added or left behind (an object turned into a record or back), a name that
  differs from its column only in case, a changed watermark or tombstone key — refuses the start
  with :class:`IncompatibleSchemaChange`, naming dataset, schema, property, the old and the new
  type, and what to do. Nothing is altered then, and the query never starts: queued input stays
  queued and is applied once the definition is fixed.

Each change is one commit whose ``userMetadata`` is ``{"cdcSchemaEvolution": {...}}`` (dataset,
schema, what was added or recorded). The CDC keys a current table was written with are recorded in
its table properties ``cdc.watermark`` and ``cdc.tombstone`` (JSON).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StructType,
    TimestampNTZType,
)

from streaming.core.catalog import Dataset, SchemaDef
from streaming.core.codes import Code
from streaming.core.errors import ConfigError
from streaming.core.layout import Layout
from streaming.storage.commits import session_conf
from streaming.storage.log import table_state
from streaming.storage.schemas import (
    CURRENT_TABLE_PROPERTIES,
    HISTORY_TABLE_PROPERTIES,
    SPARK_TYPES,
    current_schema,
    history_schema,
    scd2_schema,
    tombstones_schema,
)
from streaming.storage.tables import ensure_table

__all__ = [
    "COMMIT_KEY",
    "DELETION_VECTORS_PROPERTY",
    "DELTA_RS_READS_TYPE_WIDENING",
    "TOMBSTONE_PROPERTY",
    "WATERMARK_PROPERTY",
    "AddedColumn",
    "Found",
    "IncompatibleSchemaChange",
    "Mismatch",
    "RecordedKeys",
    "Role",
    "SchemaPlan",
    "TableChanges",
    "TableSpec",
    "apply_changes",
    "apply_plan",
    "compare",
    "delta_widens",
    "find_table",
    "key_mismatches",
    "key_properties",
    "plan_evolution",
    "plan_schema",
    "recorded_keys",
    "refusal",
    "schema_tables",
    "type_name",
    "widening_problem",
]

log = logging.getLogger(__name__)

WATERMARK_PROPERTY = "cdc.watermark"
"""Table property of a current object table: the watermark columns (JSON list) it was written by."""
TOMBSTONE_PROPERTY = "cdc.tombstone"
"""Table property of a current object table: the tombstone key (JSON object or null)."""
DELETION_VECTORS_PROPERTY = "delta.enableDeletionVectors"
"""Table property of a current table: whether DML marks replaced rows in deletion vectors; set
from ``tables.deletion_vectors`` at startup (absent: off, as the session's default is)."""
COMMIT_KEY = "cdcSchemaEvolution"
"""The key of an evolution commit's ``userMetadata`` (never ``cdc``: that marks batch commits)."""

DELTA_RS_READS_TYPE_WIDENING = False
"""delta-rs 1.6.6 refuses every table with the ``typeWidening`` reader feature ("The table has set
these reader features: {'typeWidening'} but these are not yet supported by the deltalake
reader"), and Delta widens a column's type only with that feature. So no widening is applied."""

Role = Literal["current", "history", "tombstones", "scd2"]


class IncompatibleSchemaChange(ConfigError):
    """A dataset definition changed in a way its tables cannot follow; the job does not start."""

    code = Code.INCOMPATIBLE_SCHEMA_CHANGE


# -- the comparison (pure) --------------------------------------------------------------------
@dataclass(frozen=True)
class AddedColumn:
    """A column (or nested field) to add: its Delta path, type and place."""

    path: tuple[str, ...]
    """e.g. ("owner", "phone"); inside arrays and maps Delta's ``element`` / ``value``."""
    type: DataType
    after: str | None
    """The field it follows in its struct; None = first."""

    @property
    def name(self) -> str:
        return ".".join(self.path)

    def ddl(self) -> str:
        place = f"AFTER `{self.after}`" if self.after is not None else "FIRST"
        quoted = ".".join(f"`{p}`" for p in self.path)
        return f"{quoted} {self.type.simpleString()} {place}"


@dataclass(frozen=True)
class Mismatch:
    """A difference the table cannot follow."""

    where: str
    """The property, as the YAML spells its path (``owner.phone``, ``tags.items``)."""
    what: str
    why: str
    fix: str


@dataclass
class TableChanges:
    added: list[AddedColumn] = field(default_factory=list)
    unwritten: list[str] = field(default_factory=list)
    """Columns of removed properties: they stay and are no longer written."""
    mismatches: list[Mismatch] = field(default_factory=list)


def type_name(dtype: DataType) -> str:
    """A Spark type in the dataset definition's words (``integer``, ``array of string``)."""
    names = {t: n for n, t in SPARK_TYPES.items()}  # the later name wins: timestamp
    if dtype in names:
        return names[dtype]
    if isinstance(dtype, ArrayType):
        return f"array of {type_name(dtype.elementType)}"
    if isinstance(dtype, MapType):
        return f"map of {type_name(dtype.valueType)}"
    if isinstance(dtype, StructType):
        return "object"
    return dtype.simpleString()


_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


def _digits(dtype: DataType) -> int:
    """Decimal digits an integral type needs (Delta's minimum decimal precision for it)."""
    return 20 if isinstance(dtype, LongType) else 10


def delta_widens(old: DataType, new: DataType) -> bool:
    """Whether Delta's type widening (Delta 4.x, the ``typeWidening`` table feature) changes
    ``old`` to ``new`` in place: byte → short → int → long; byte/short/int → double; an integral
    type → a decimal with enough integer digits; float → double; decimal(p, s) → decimal(p + k1,
    s + k2) with k1 ≥ k2 ≥ 0; date → timestamp_ntz."""
    if old == new:
        return False
    if isinstance(old, _INTEGRAL) and isinstance(new, _INTEGRAL):
        return _INTEGRAL.index(type(new)) > _INTEGRAL.index(type(old))
    if isinstance(old, (ByteType, ShortType, IntegerType)) and isinstance(new, DoubleType):
        return True
    if isinstance(old, _INTEGRAL) and isinstance(new, DecimalType):
        return new.precision - new.scale >= _digits(old)
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        more, scale = new.precision - old.precision, new.scale - old.scale
        return more >= scale >= 0
    return isinstance(old, DateType) and isinstance(new, TimestampNTZType)


def widening_problem(old: DataType, new: DataType) -> str:
    """Why a column of type ``old`` cannot become ``new``."""
    if delta_widens(old, new) and not DELTA_RS_READS_TYPE_WIDENING:
        return (
            f"Delta widens {old.simpleString()} to {new.simpleString()} only with the "
            "typeWidening table feature, which delta-rs (1.6.6) and other readers cannot read"
        )
    return f"Delta cannot change a {old.simpleString()} column to {new.simpleString()} in place"


def compare(have: StructType, want: StructType) -> TableChanges:
    """What it takes for a table of schema ``have`` to hold rows of schema ``want``."""
    out = TableChanges()
    _compare_struct(have, want, (), (), out)
    return out


def _compare_struct(
    have: StructType,
    want: StructType,
    path: tuple[str, ...],
    where: tuple[str, ...],
    out: TableChanges,
) -> None:
    by_name = {f.name.lower(): f for f in have.fields}
    wanted = {f.name.lower() for f in want.fields}
    previous: str | None = None
    for new in want.fields:
        old = by_name.get(new.name.lower())
        spot = ".".join((*where, new.name))
        if old is None:
            if new.nullable:
                out.added.append(AddedColumn((*path, new.name), new.dataType, previous))
            else:
                out.mismatches.append(
                    Mismatch(
                        spot,
                        "a NOT NULL column is missing from the table",
                        "a column added to a table with rows must be nullable: did the schema "
                        "change from a record into an object?",
                        "put back the schema's previous type, or define it under a new name",
                    )
                )
            previous = new.name
            continue
        previous = old.name
        if old.name != new.name:
            out.mismatches.append(
                Mismatch(
                    spot,
                    f"renamed from {old.name!r} to {new.name!r}",
                    "Delta column names ignore case, so the column cannot be renamed this way",
                    f"spell it {old.name!r} again",
                )
            )
            continue
        _compare_type(old.dataType, new.dataType, (*path, old.name), (*where, new.name), out)
    for old in have.fields:
        if old.name.lower() in wanted:
            continue
        spot = ".".join((*where, old.name))
        if not old.nullable:
            out.mismatches.append(
                Mismatch(
                    spot,
                    "a NOT NULL column is no longer written",
                    "the table holds columns the schema no longer has: did the schema change "
                    "from an object into a record?",
                    "put back the schema's previous type, or define it under a new name",
                )
            )
        elif path:
            out.mismatches.append(
                Mismatch(
                    spot,
                    "removed from inside an object property",
                    "Delta's MERGE writes an object whole and refuses one that lacks a field of "
                    "the stored object",
                    f"keep {spot!r} in the definition (it may stay empty)",
                )
            )
        else:
            out.unwritten.append(old.name)


def _compare_type(
    old: DataType,
    new: DataType,
    path: tuple[str, ...],
    where: tuple[str, ...],
    out: TableChanges,
) -> None:
    if isinstance(old, StructType) and isinstance(new, StructType):
        _compare_struct(old, new, path, where, out)
    elif isinstance(old, ArrayType) and isinstance(new, ArrayType):
        _compare_type(old.elementType, new.elementType, (*path, "element"), (*where, "items"), out)
    elif isinstance(old, MapType) and isinstance(new, MapType) and old.keyType == new.keyType:
        _compare_type(old.valueType, new.valueType, (*path, "value"), (*where, "values"), out)
    elif old != new:
        spot = ".".join(where)
        out.mismatches.append(
            Mismatch(
                spot,
                f"type changed from {type_name(old)} to {type_name(new)}",
                widening_problem(old, new),
                f"put back the type {type_name(old)} for {spot!r}, or add the new type as a "
                f"property of another name and stop writing {spot!r}",
            )
        )


@dataclass(frozen=True)
class RecordedKeys:
    """The CDC keys a schema's tables were written with; None where they are not known (tables
    of an older version of this job): then the definition's keys are recorded."""

    watermark: list[str] | None
    tombstone: dict[str, str | None] | None
    tombstone_known: bool


def recorded_keys(properties: Mapping[str, str], tombstones: StructType | None) -> RecordedKeys:
    """The keys of a current table's properties; without them the watermark is that of the
    tombstones table's ``watermark`` column (absent: none)."""
    watermark: list[str] | None = None
    if WATERMARK_PROPERTY in properties:
        watermark = list(json.loads(properties[WATERMARK_PROPERTY]))
    elif tombstones is not None:
        names = {f.name: f.dataType for f in tombstones.fields}
        mark = names.get("watermark")
        watermark = [f.name for f in mark.fields] if isinstance(mark, StructType) else []
    known = TOMBSTONE_PROPERTY in properties
    tombstone = json.loads(properties[TOMBSTONE_PROPERTY]) if known else None
    return RecordedKeys(watermark, tombstone, known)


def key_properties(schema: SchemaDef) -> dict[str, str]:
    """The table properties recording ``schema``'s CDC keys."""
    tombstone = schema.tombstone.model_dump() if schema.tombstone else None
    return {
        WATERMARK_PROPERTY: json.dumps(schema.watermark),
        TOMBSTONE_PROPERTY: json.dumps(tombstone, sort_keys=True),
    }


def key_mismatches(schema: SchemaDef, recorded: RecordedKeys) -> list[Mismatch]:
    """A watermark or tombstone key that differs from the one the tables were written with."""
    out: list[Mismatch] = []
    if recorded.watermark is not None and recorded.watermark != schema.watermark:
        out.append(
            Mismatch(
                "watermark",
                f"changed from {recorded.watermark} to {schema.watermark}",
                "the stored rows and tombstones were compared by the old watermark: with "
                "another one a late change could overwrite newer data or resurrect a deleted key",
                f"put back `watermark: {recorded.watermark}`; for other keys define a schema "
                "under a new name (new tables) and load it from the start",
            )
        )
    tombstone = schema.tombstone.model_dump() if schema.tombstone else None
    if recorded.tombstone_known and recorded.tombstone != tombstone:
        out.append(
            Mismatch(
                "tombstone",
                f"changed from {json.dumps(recorded.tombstone)} to {json.dumps(tombstone)}",
                "the rows already loaded were judged deleted or live by the old tombstone key",
                f"put back the tombstone key {json.dumps(recorded.tombstone)}; for another key "
                "define a schema under a new name and load it from the start",
            )
        )
    return out


# -- a schema's tables ------------------------------------------------------------------------
@dataclass(frozen=True)
class TableSpec:
    """One table of a schema: where it is, what it holds, the properties it is created with."""

    role: Role
    path: str
    schema: StructType
    properties: Mapping[str, str]


def schema_tables(
    layout: Layout,
    dataset: str,
    schema: SchemaDef,
    *,
    deletion_vectors: bool = False,
    properties: Mapping[str, str] | None = None,
) -> list[TableSpec]:
    """The tables the job writes for ``schema`` (none for views that are not materialized,
    query and external schemas). ``deletion_vectors``: the current table has them on
    (``tables.deletion_vectors``; the others are append-only). ``properties``: on every table
    when it is created (upkeep's retention: ``runtime.upkeep``)."""
    extra = dict(properties or {})
    vectors = {**extra, DELETION_VECTORS_PROPERTY: str(deletion_vectors).lower()}
    if schema.is_object:
        scd2 = (
            [TableSpec("scd2", layout.scd2(dataset, schema.name), scd2_schema(schema), extra)]
            if schema.scd2 is not None
            else []
        )
        return [
            TableSpec(
                "current",
                layout.table(dataset, schema.name),
                current_schema(schema),
                {**CURRENT_TABLE_PROPERTIES, **key_properties(schema), **vectors},
            ),
            TableSpec(
                "tombstones",
                layout.tombstones(dataset, schema.name),
                tombstones_schema(schema),
                extra,
            ),
            TableSpec(
                "history",
                layout.history(dataset, schema.name),
                history_schema(schema),
                {**HISTORY_TABLE_PROPERTIES, **extra},
            ),
            *scd2,
        ]
    if schema.is_record or schema.materialized:
        return [
            TableSpec(
                "current", layout.table(dataset, schema.name), current_schema(schema), vectors
            )
        ]
    return []


@dataclass(frozen=True)
class Found:
    """An existing table: its schema and properties."""

    schema: StructType
    properties: Mapping[str, str]


@dataclass
class SchemaPlan:
    """What startup does to one schema's tables."""

    dataset: str
    schema: SchemaDef
    tables: list[TableSpec]
    create: list[TableSpec] = field(default_factory=list)
    changes: dict[str, TableChanges] = field(default_factory=dict)
    """table path → the columns to add (and the columns left unwritten)."""
    record: dict[str, dict[str, str]] = field(default_factory=dict)
    """table path → the properties to set: key properties (tables of an older version), the
    deletion vectors' switch (``tables.deletion_vectors`` changed)."""
    problems: list[str] = field(default_factory=list)


def plan_schema(
    dataset: str, schema: SchemaDef, tables: Sequence[TableSpec], found: Mapping[str, Found]
) -> SchemaPlan:
    """Compare ``schema``'s definition with its existing tables (``found``, by path)."""
    plan = SchemaPlan(dataset, schema, list(tables))
    mismatches: dict[Mismatch, list[Role]] = {}
    for table in tables:
        existing = found.get(table.path)
        if existing is None:
            plan.create.append(table)
            continue
        changes = compare(existing.schema, table.schema)
        plan.changes[table.path] = changes
        for mismatch in changes.mismatches:
            mismatches.setdefault(mismatch, []).append(table.role)
    by_role = {t.role: t for t in tables}
    current = found.get(by_role["current"].path) if "current" in by_role else None
    if schema.is_object and current is not None:
        tomb = found.get(by_role["tombstones"].path)
        recorded = recorded_keys(current.properties, tomb.schema if tomb else None)
        for mismatch in key_mismatches(schema, recorded):
            mismatches.setdefault(mismatch, []).append("current")
        missing = {k: v for k, v in key_properties(schema).items() if k not in current.properties}
        if missing:
            plan.record[by_role["current"].path] = missing
    if current is not None:
        wanted = by_role["current"].properties[DELETION_VECTORS_PROPERTY]
        if current.properties.get(DELETION_VECTORS_PROPERTY, "false") != wanted:
            switch = {DELETION_VECTORS_PROPERTY: wanted}
            plan.record.setdefault(by_role["current"].path, {}).update(switch)
    for mismatch, roles in mismatches.items():
        plan.problems.append(
            f"dataset {dataset}, schema {schema.name}, {mismatch.where}: {mismatch.what} "
            f"(table{'s' if len(roles) > 1 else ''}: {', '.join(roles)}) — {mismatch.why}. "
            f"To fix: {mismatch.fix}"
        )
    return plan


def refusal(plans: Sequence[SchemaPlan]) -> IncompatibleSchemaChange | None:
    """The error naming every incompatible change, if there is one."""
    problems = [p for plan in plans for p in plan.problems]
    if not problems:
        return None
    lines = "\n".join(f"  - {p}" for p in problems)
    return IncompatibleSchemaChange(
        "dataset definitions changed in ways their tables cannot follow; the job did not start "
        "and consumed no input (it stays queued and is applied once the definitions are fixed):"
        f"\n{lines}"
    )


# -- Spark ------------------------------------------------------------------------------------
def find_table(spark: SparkSession, path: str) -> Found | None:
    """The schema and properties of the Delta table at ``path``; None if there is none."""
    state = table_state(spark, path)
    return Found(*state) if state is not None else None


@contextmanager
def _commit_metadata(spark: SparkSession, meta: Mapping[str, object]) -> Iterator[None]:
    key = "spark.databricks.delta.commitInfo.userMetadata"
    with session_conf(spark, {key: json.dumps({COMMIT_KEY: meta})}):
        yield


def apply_plan(spark: SparkSession, plan: SchemaPlan) -> None:
    """Create the schema's missing tables, add the columns, record the keys: one commit each."""
    for table in plan.create:
        ensure_table(spark, table.path, table.schema, dict(table.properties))
    apply_changes(spark, plan)


def apply_changes(spark: SparkSession, plan: SchemaPlan) -> None:
    """Add the columns and record the keys of a plan whose missing tables exist (``create``
    made by the caller): one commit each, in this thread — the commits' metadata is the
    session's conf."""
    where = {"dataset": plan.dataset, "schema": plan.schema.name}
    for path, changes in plan.changes.items():
        for column in changes.unwritten:
            log.warning(
                "%s %s: column %s of %s is no longer in the definition: it is kept, not written",
                plan.dataset,
                plan.schema.name,
                column,
                path,
            )
        if not changes.added:
            continue
        added = [{"column": c.name, "type": c.type.simpleString()} for c in changes.added]
        with _commit_metadata(spark, {**where, "added": added}):
            spark.sql(
                f"ALTER TABLE delta.`{path}` ADD COLUMNS "
                f"({', '.join(c.ddl() for c in changes.added)})"
            )
        log.info("%s %s: added to %s: %s", plan.dataset, plan.schema.name, path, added)
    for path, properties in plan.record.items():
        with _commit_metadata(spark, {**where, "recorded": properties}):
            pairs = ", ".join(f"'{k}' = '{_sql_string(v)}'" for k, v in properties.items())
            spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({pairs})")


def _sql_string(text: str) -> str:
    """``text`` for a single-quoted Spark SQL literal."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def plan_evolution(
    spark: SparkSession,
    datasets: Mapping[str, Dataset],
    layout: Layout,
    *,
    deletion_vectors: bool = False,
    properties: Mapping[str, str] | None = None,
) -> list[SchemaPlan]:
    """What bringing every schema's tables to its definition (and the current tables' deletion
    vectors to ``deletion_vectors``) takes, read from the tables; refused (raised) before
    anything is changed when a change is not additive. ``properties``: on the tables it
    creates. Apply with ``apply_plan`` (or create the plans' tables, then ``apply_changes``)."""
    plans: list[SchemaPlan] = []
    for name, dataset in datasets.items():
        for schema in dataset.schemas.values():
            tables = schema_tables(
                layout, name, schema, deletion_vectors=deletion_vectors, properties=properties
            )
            if not tables:
                continue
            found = {t.path: f for t in tables if (f := find_table(spark, t.path)) is not None}
            plans.append(plan_schema(name, schema, tables, found))
    error = refusal(plans)
    if error is not None:
        raise error
    return plans
