"""The per-key fold of ``core.fold`` as one Spark SQL expression, run on the JVM.

``core.fold`` stays the definition (and the driver fold of small batches runs it); this module
says the same thing to Spark so a large wave folds without a Python worker: each key's changes
are collected into an array sorted by ``__seq``, and ``aggregate`` walks it with the key's
stored state as the start value — live row or tombstone, version, created/updated, watermark —
appending a history entry per inserted/updated/deleted change and an effect per change. The
result is the rows ``apply._Folder.output_rows`` gives (``__row_kind`` effect / state /
history), so counting and writing do not care which fold ran. A property test feeds both the
same generated sequences (``tests/integration/test_sqlfold.py``).

Known differences and limits:
- data equality (``unchanged``) is Spark's ``<=>`` on the row's struct, where NaN equals NaN;
  Python's ``==`` says NaN differs from itself (an update whose row holds a NaN and changes
  nothing is ``unchanged`` here, ``updated`` in ``core.fold``);
- a schema with a map-typed property cannot be compared in SQL at all: ``supported`` says
  no, and that table keeps the Python fold;
- ``aggregate`` copies the accumulated arrays on every step: a key with n changes in one batch
  costs O(n²) element copies (not measured beyond the tests' few changes per key; a batch that
  changes one key tens of thousands of times would feel it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    LongType,
    MapType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.core.fold import AGGREGATE, MISSING, ChangeKind
from streaming.storage.reuse import built_once

__all__ = ["first_rows", "fold_rows", "has_map", "supported"]


def has_map(dtype: DataType) -> bool:
    """Whether a map is anywhere in ``dtype`` (in arrays and structs too)."""
    if isinstance(dtype, MapType):
        return True
    if isinstance(dtype, ArrayType):
        return has_map(dtype.elementType)
    return isinstance(dtype, StructType) and any(has_map(f.dataType) for f in dtype.fields)


def supported(data: StructType) -> bool:
    """Whether rows of this type can be folded here: no map anywhere (maps do not compare)."""
    return not has_map(data)


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
    """``body(value)`` with ``value`` evaluated once (a lambda variable bound by ``transform``)."""
    return F.transform(F.array(value), body)[0]


def _none(dtype: DataType) -> Column:
    return F.lit(None).cast(dtype)


def fold_rows(
    changes: DataFrame,
    current: DataFrame | None,
    tombstones: DataFrame | None,
    *,
    unique: bool,
    data: StructType,
    watermark: tuple[str, ...],
    at: datetime,
    out: StructType,
) -> DataFrame:
    """Fold ``changes`` (``id``, ``__seq``, ``__tx``, ``__kind``, ``__cols``, ``__flags``,
    ``__version``, ``__created``, ``data``) per key over its stored state — its live row in
    ``current`` (``id``, ``s_version``, ``s_created``, ``s_updated``, ``s_data``), else its
    tombstone in ``tombstones`` (one row per key: ``id``, ``t_version`` and, with a watermark,
    ``t_mark``) — into rows of ``out`` (``apply._fold_schema``).

    ``current`` / ``tombstones`` None: that table holds no rows (a first load), nothing to
    join. ``unique``: no key has two changes, so none are grouped (no shuffle): each change is
    a sequence of one."""
    mark_type = StructType([data[c] for c in watermark]) if watermark else None
    exprs = built_once(
        changes.sparkSession,
        ("sql fold", data.json(), watermark, out.json(), unique),
        lambda: _fold_expressions(data, watermark, out, unique=unique),
    )
    if unique:
        keyed = changes.select("id", exprs.changes.alias("__changes"))
    else:
        keyed = changes.groupBy("id").agg(exprs.changes.alias("__changes"))
    if current is None:
        keyed = keyed.select(
            "*",
            _none(LongType()).alias("s_version"),
            _none(TimestampType()).alias("s_created"),
            _none(TimestampType()).alias("s_updated"),
            _none(data).alias("s_data"),
        )
    else:
        keyed = keyed.join(current, "id", "left")
    if tombstones is None:
        keyed = keyed.select(
            "*",
            _none(LongType()).alias("t_version"),
            *([_none(mark_type).alias("t_mark")] if mark_type else []),
        )
    else:
        keyed = keyed.join(tombstones, "id", "left")
    keyed = keyed.select("*", F.lit(at).cast("timestamp").alias("__at"))
    stored = F.col("s_version").isNotNull().alias("__stored")
    folded = keyed.select("id", exprs.fold.alias("f"), stored)
    return folded.select(F.inline(exprs.rows))


@dataclass(frozen=True)
class _FoldExpressions:
    """``fold_rows``' expressions, which depend on the schema only (``streaming.storage.reuse``):
    ``changes`` makes a key's changes an array sorted by ``__seq`` (an aggregate, or with
    ``unique`` the one change's array), ``fold`` folds it over the stored state from the joined
    columns (the commit time comes from ``__at``), ``rows`` makes the result output rows. The
    fold's state carries its effects and history entries as output rows already, so nothing
    maps them afterwards."""

    changes: Column
    fold: Column
    rows: Column


def _fold_expressions(
    data: StructType, watermark: tuple[str, ...], out: StructType, *, unique: bool
) -> _FoldExpressions:
    props = [f.name for f in data.fields]
    mark_type = StructType([data[c] for c in watermark]) if watermark else None
    acc_type = StructType(
        [
            StructField("live", BooleanType()),
            StructField("data", data),
            StructField("version", LongType()),
            StructField("created", TimestampType()),
            StructField("updated", TimestampType()),
            *([StructField("mark", mark_type)] if mark_type else []),
            StructField("moved", BooleanType()),
            StructField("history", ArrayType(out)),  # output rows, ``__row_kind`` history
            StructField("effects", ArrayType(out)),  # output rows, ``__row_kind`` effect
        ]
    )
    now, key = F.col("__at"), F.col("id")

    def mark_of(row: Column) -> Column:
        assert mark_type is not None
        return F.when(row.isNull(), _none(mark_type)).otherwise(
            F.struct(*[row[c].alias(c) for c in watermark])
        )

    # A change's fields, each from its column of the change rows.
    change_fields = {
        "seq": "__seq",
        "tx": "__tx",
        "kind": "__kind",
        "cols": "__cols",
        "flags": "__flags",
        "version": "__version",
        "created": "__created",
        "data": "data",
    }
    change = F.struct(*[F.col(column).alias(field) for field, column in change_fields.items()])
    if unique:
        changes = F.array(change)
    else:
        changes = F.array_sort(
            F.collect_list(change),
            lambda x, y: F.when(x["seq"] < y["seq"], -1).when(x["seq"] > y["seq"], 1).otherwise(0),
        )
    live = F.col("s_version").isNotNull()
    start = F.struct(
        live.alias("live"),
        F.when(live, F.col("s_data")).otherwise(_none(data)).alias("data"),
        F.coalesce(F.col("s_version"), F.col("t_version"), F.lit(0).cast("long")).alias("version"),
        F.col("s_created").alias("created"),
        F.col("s_updated").alias("updated"),
        *(
            [F.when(live, mark_of(F.col("s_data"))).otherwise(F.col("t_mark")).alias("mark")]
            if mark_type
            else []
        ),
        F.lit(False).alias("moved"),
        F.array().cast(ArrayType(out)).alias("history"),
        F.array().cast(ArrayType(out)).alias("effects"),
    ).cast(acc_type)

    def written(acc: Column, c: Column) -> Column:
        """The row change ``c`` writes over ``acc``'s: REPLACE its data; PATCH only its
        columns; the extended format's flags keep (Missing) or add to (Aggregate) the stored
        value. Built property by property, each from the change's and the stored value of
        that property only: an expression of each property that picked its field out of
        a struct of all of them would make the plan grow with the square of the properties
        (40 properties: seconds of analysis a batch)."""
        kind, flags, cols = c["kind"], c["flags"], c["cols"]

        def value(p: str) -> Column:
            old, add = acc["data"][p], c["data"][p]
            dtype = data[p].dataType
            flag = F.coalesce(flags[p], F.lit(0).cast("long"))
            if isinstance(dtype, NumericType):
                summed = old + add
            elif isinstance(dtype, StringType):
                summed = F.concat(old, add)
            else:
                summed = F.raise_error(F.lit(f"cannot aggregate values of {p} ({dtype})"))
            aggregated = (
                F.when(add.isNull(), old).when(old.isNull(), add).otherwise(summed.cast(dtype))
            )
            return (
                F.when(
                    (kind == ChangeKind.PATCH.value)
                    & cols.isNotNull()
                    & ~F.coalesce(F.array_contains(cols, p), F.lit(False)),
                    old,
                )
                .when(flags.isNull(), add)
                .when((flag.bitwiseAND(MISSING)) != 0, old)
                .when((flag.bitwiseAND(AGGREGATE)) != 0, aggregated)
                .otherwise(add)
                .alias(p)
            )

        # Most changes write their data as it is (a REPLACE_DELETE's is NULL: no row).
        whole = (kind == ChangeKind.REPLACE.value) | (
            flags.isNull() & (kind != ChangeKind.PATCH.value)
        )
        return F.when(c["data"].isNull() | whole, c["data"]).otherwise(
            F.struct(*[value(p) for p in props])
        )

    def effect(acc: Column, c: Column, new: Column) -> Column:
        kind, was = c["kind"], acc["live"]
        stale = (
            c["mark"].isNotNull() & acc["mark"].isNotNull() & (c["mark"] < acc["mark"])
            if mark_type
            else F.lit(False)
        )
        deletes = kind.isin(ChangeKind.DELETE.value, ChangeKind.REPLACE_DELETE.value)
        return (
            F.when(stale, "stale")
            .when(kind == ChangeKind.REPLACE.value, F.when(was, "updated").otherwise("inserted"))
            .when(deletes, F.when(was, "deleted").otherwise("skipped"))
            .when((kind == ChangeKind.INSERT_IGNORE.value) & was, "skipped")
            .when((kind == ChangeKind.PATCH.value) & ~was, "skipped")
            .when(~was, "inserted")
            .when(acc["data"].eqNullSafe(new), "unchanged")
            .otherwise("updated")
        )

    def step(acc: Column, c: Column, new: Column, eff: Column) -> Column:
        replace = c["kind"] == ChangeKind.REPLACE.value
        deleted = eff == "deleted"
        wrote = eff.isin("inserted", "updated")
        changed = wrote | deleted
        version = (
            F.when(replace, c["version"])
            .when(deleted, F.coalesce(c["version"], acc["version"] + 1))
            .otherwise(acc["version"] + 1)
        )
        created = (
            F.when(replace, F.coalesce(c["created"], now))
            .when(eff == "inserted", now)
            .otherwise(acc["created"])
        )
        entry = _row(
            out,
            __row_kind=F.lit("history"),
            id=key,
            version=version,
            created=created,
            updated=now,
            __deleted=deleted,
            __op=F.when(deleted, "d").when(eff == "inserted", "i").otherwise("u"),
            __tx=c["tx"],
            data=F.when(deleted, acc["data"]).otherwise(new),
        )
        # A delete of a key not live, newer than its watermark: the tombstone's watermark moves.
        marks = (
            c["kind"].isin(ChangeKind.DELETE.value, ChangeKind.REPLACE_DELETE.value)
            & (eff == "skipped")
            & c["mark"].isNotNull()
            & (acc["mark"].isNull() | (c["mark"] > acc["mark"]))
            if mark_type
            else F.lit(False)
        )
        fields = [
            F.when(changed, ~deleted).otherwise(acc["live"]).alias("live"),
            F.when(deleted, _none(data)).when(wrote, new).otherwise(acc["data"]).alias("data"),
            F.when(changed, version).otherwise(acc["version"]).alias("version"),
            F.when(changed, created).otherwise(acc["created"]).alias("created"),
            F.when(changed | marks, now).otherwise(acc["updated"]).alias("updated"),
        ]
        if mark_type:
            moved = F.when(replace, c["mark"]).otherwise(F.coalesce(c["mark"], acc["mark"]))
            fields.append(
                F.when(changed, moved).when(marks, c["mark"]).otherwise(acc["mark"]).alias("mark")
            )
        effect_row = _row(out, __row_kind=F.lit("effect"), id=key, __seq=c["seq"], __effect=eff)
        return F.struct(
            *fields,
            (acc["moved"] | marks).alias("moved"),
            F.when(changed, F.concat(acc["history"], F.array(entry)))
            .otherwise(acc["history"])
            .alias("history"),
            F.concat(acc["effects"], F.array(effect_row)).alias("effects"),
        )

    def merge(acc: Column, change: Column) -> Column:
        # The change is bound once per step, as a struct of its fields read once: it comes as
        # an element of the collected array, an UnsafeRow, and every field read of an
        # UnsafeRow in interpreted code costs Spark 4.2 a new SQLConf on an executor
        # (``TypeOps.apply``); an expression of ``change`` in place of ``c`` would also be
        # evaluated anew at each of its ~20 uses (with a watermark: all fields copied each
        # time). Profiled: that was ~40% of the fold's executor time.
        copied = F.struct(
            *[change[f].alias(f) for f in change_fields],
            *([mark_of(change["data"]).alias("mark")] if mark_type else []),
        )
        return _let(
            copied,
            lambda c: _let(
                written(acc, c),
                lambda new: _let(effect(acc, c, new), lambda eff: step(acc, c, new, eff)),
            ),
        )

    return _FoldExpressions(
        changes, F.aggregate("__changes", start, merge), _rows(out, mark_type is not None)
    )


def _row(out: StructType, **values: Column) -> Column:
    """A struct of ``out`` with ``values``, NULL in every other field."""
    return F.struct(
        *[
            (values[field.name] if field.name in values else _none(field.dataType)).alias(
                field.name
            )
            for field in out.fields
        ]
    )


def first_rows(
    changes: DataFrame, *, data: StructType, watermark: tuple[str, ...], at: datetime
) -> DataFrame:
    """What ``fold_rows`` gives for keys with nothing stored — no live row, no tombstone — and
    one change each (a first load whose ids the check job found unique), as a plain projection:
    one row per change, no ``aggregate``, no arrays, compiled code. It is ``fold_rows`` with
    the start state of a key never seen put in, simplified: no change is stale (no watermark
    stored), nothing is compared (nothing live), a MISSING flag leaves the property NULL and an
    AGGREGATE flag takes the change's value (there is nothing to add it to).

    Columns: ``id``, ``__seq``, ``__tx``, ``__effect`` (``inserted`` or ``skipped``), the new
    row's ``version``, ``created``, ``updated``, ``data`` and ``__op`` (``i``), ``__mark`` (with
    a watermark) and ``__deleted``: false for an inserted key, true for a skipped delete that
    leaves the key a tombstone at version 0 holding its watermark (``core.fold``), NULL where
    nothing changes (a skipped PATCH, a delete without a watermark)."""
    props = [f.name for f in data.fields]
    now = F.lit(at).cast("timestamp")
    kind = F.col("__kind")
    replace = kind == ChangeKind.REPLACE.value
    deletes = kind.isin(ChangeKind.DELETE.value, ChangeKind.REPLACE_DELETE.value)
    skipped = deletes | (kind == ChangeKind.PATCH.value)
    flags = F.col("__flags")
    flagged = F.when(flags.isNull(), F.col("data")).otherwise(
        F.struct(
            *[
                F.when(
                    (F.coalesce(flags[p], F.lit(0).cast("long")).bitwiseAND(MISSING)) != 0,
                    _none(data[p].dataType),
                )
                .otherwise(F.col("data")[p])
                .alias(p)
                for p in props
            ]
        )
    )
    mark = (
        F.when(F.col("data").isNull(), _none(StructType([data[c] for c in watermark]))).otherwise(
            F.struct(*[F.col("data")[c].alias(c) for c in watermark])
        )
        if watermark
        else None
    )
    # A delete with a watermark of a key never seen keeps that watermark as its tombstone.
    moved = deletes & mark.isNotNull() if mark is not None else F.lit(False)
    return changes.select(
        "id",
        "__seq",
        "__tx",
        F.when(skipped, "skipped").otherwise("inserted").alias("__effect"),
        F.when(skipped, F.lit(0).cast("long"))
        .when(replace, F.col("__version"))
        .otherwise(F.lit(1).cast("long"))
        .alias("version"),
        F.when(skipped, _none(TimestampType()))
        .when(replace, F.coalesce(F.col("__created"), now))
        .otherwise(now)
        .alias("created"),
        now.alias("updated"),
        F.when(skipped, _none(data)).when(replace, F.col("data")).otherwise(flagged).alias("data"),
        F.when(moved, True).when(skipped, _none(BooleanType())).otherwise(False).alias("__deleted"),
        F.lit("i").alias("__op"),
        *([mark.alias("__mark")] if mark is not None else []),
    )


def _rows(out: StructType, marked: bool) -> Column:
    """Each key's output rows as an array of ``out`` structs: its effects, then — if it
    changed (a history entry, or its tombstone's watermark moved) — its new state (with
    ``__stored``: whether the key had a live row before) and its history entries."""
    f = F.col("f")
    state = _row(
        out,
        __row_kind=F.lit("state"),
        id=F.col("id"),
        version=f["version"],
        created=f["created"],
        updated=f["updated"],
        __deleted=~f["live"],
        __stored=F.col("__stored"),
        data=f["data"],
        **({"__mark": f["mark"]} if marked else {}),
    )
    changed = (F.size(f["history"]) > 0) | f["moved"]
    return F.when(changed, F.concat(f["effects"], F.array(state), f["history"])).otherwise(
        f["effects"]
    )
