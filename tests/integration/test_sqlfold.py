"""The fold on the JVM (``streaming.apply.sqlfold``) against the reference fold (``core.fold``).

Generated sequences — every change kind, PATCH column sets, the extended format's Missing and
Aggregate flags, REPLACE scopes' versions, watermarks with NULLs and ties, stored live rows,
tombstones and new keys, several changes per key — go through both, and their output rows
(effects, new state, history) must be identical, row for row."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.apply.objects import _fold_schema, _Folder
from streaming.apply.sqlfold import first_rows, fold_rows, supported
from streaming.core.fold import ChangeKind, fold

SEQUENCES = 600
DATA = StructType(
    [
        StructField("a", LongType()),
        StructField("b", StringType()),
        StructField("ts", LongType()),
    ]
)
PROPS = [f.name for f in DATA.fields]
AT = datetime(2026, 11, 24, 12, 0, 0)
KINDS = list(ChangeKind)


def _data(rnd: random.Random) -> dict[str, Any]:
    return {
        "a": rnd.choice([None, 1, 2, 3]),
        "b": rnd.choice([None, "x", "y"]),
        "ts": rnd.choice([None, 1, 2, 2, 3]),
    }


def _stored(rnd: random.Random, key: str, mark: StructType | None) -> dict[str, Any] | None:
    what = rnd.choice(["none", "live", "live", "tombstone"])
    if what == "none":
        return None
    version = rnd.randint(1, 5)
    row: dict[str, Any] = {"id": key, "s_version": None, "s_created": None, "s_updated": None}
    row |= {"s_data": None, "t_version": None}
    if what == "live":
        created = AT - timedelta(days=rnd.randint(2, 9))
        row |= {"s_version": version, "s_created": created, "s_data": _data(rnd)}
        row["s_updated"] = created + timedelta(hours=rnd.randint(0, 30))
    else:
        row["t_version"] = version
    if mark is not None:
        row["t_mark"] = (
            None if what == "live" or rnd.random() < 0.2 else {"ts": rnd.choice([None, 1, 2, 3])}
        )
    return row


def _change(rnd: random.Random, key: str, seq: int) -> dict[str, Any]:
    kind = rnd.choice(KINDS)
    row: dict[str, Any] = {
        "id": key,
        "__seq": seq,
        "__tx": f"tx{seq >> 32}",
        "__kind": kind.value,
        "__cols": None,
        "__flags": None,
        "__version": None,
        "__created": None,
        "data": _data(rnd),
    }
    if kind is ChangeKind.PATCH:
        row["__cols"] = rnd.sample(PROPS, rnd.randint(0, len(PROPS)))
    if kind is ChangeKind.DELETE and rnd.random() < 0.5:  # a JSON DELETE: ids only
        row["data"] = {p: None for p in PROPS}
    if kind in (ChangeKind.REPLACE, ChangeKind.REPLACE_DELETE):
        row["__version"] = rnd.randint(3, 15)
        if kind is ChangeKind.REPLACE_DELETE:
            row["data"] = None
        elif rnd.random() < 0.7:
            row["__created"] = AT - timedelta(days=rnd.randint(10, 20))
    if kind in (ChangeKind.UPSERT, ChangeKind.PATCH, ChangeKind.INSERT_IGNORE) and (
        rnd.random() < 0.3
    ):
        row["__flags"] = {p: rnd.choice([0, 1, 2, 3]) for p in rnd.sample(PROPS, 2)}
    return row


def generated(seed: int, mark: StructType | None) -> tuple[list[dict], list[dict]]:
    """SEQUENCES keys, each with a stored state (or none) and 1-6 changes in shuffled order."""
    rnd = random.Random(seed)
    changes: list[dict[str, Any]] = []
    stored: list[dict[str, Any]] = []
    for n in range(SEQUENCES):
        key = f"k{n:04d}"
        state = _stored(rnd, key, mark)
        if state is not None:
            stored.append(state)
        seqs = sorted(rnd.sample(range(1, 40), rnd.randint(1, 6)))
        changes.extend(_change(rnd, key, (s // 4) << 32 | s) for s in seqs)
    rnd.shuffle(changes)
    return changes, stored


def _plain(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _canonical(rows: list[dict[str, Any]], out: StructType) -> list[tuple]:
    return sorted(tuple(repr(_plain(row.get(f.name))) for f in out.fields) for row in rows)


def _reference(
    changes: list[dict[str, Any]], stored: list[dict[str, Any]], watermark: tuple[str, ...]
) -> list[dict[str, Any]]:
    folder = _Folder(watermark)
    by_key: dict[str, list[dict[str, Any]]] = {}
    for row in changes:
        by_key.setdefault(row["id"], []).append({**row, "__at": AT})
    states = {row["id"]: row for row in stored}
    out: list[dict[str, Any]] = []
    for key, group in by_key.items():
        state = folder.stored(states.get(key, {"s_version": None, "t_version": None}))
        out.extend(folder.output_rows(key, state, fold(state, [folder.change(r) for r in group])))
    return out


CHANGES = StructType(
    [
        StructField("id", StringType()),
        StructField("__seq", LongType()),
        StructField("__tx", StringType()),
        StructField("__kind", StringType()),
        StructField("__cols", ArrayType(StringType())),
        StructField("__flags", MapType(StringType(), LongType())),
        StructField("__version", LongType()),
        StructField("__created", TimestampType()),
        StructField("data", DATA),
    ]
)


def _sql_fold(
    spark: SparkSession,
    changes: list[dict[str, Any]],
    current: DataFrame | None,
    tombstones: DataFrame | None,
    *,
    watermark: tuple[str, ...],
    unique: bool,
    out: StructType,
) -> list[dict[str, Any]]:
    """The output rows of ``sqlfold.fold_rows`` over generated changes."""
    rows = fold_rows(
        spark.createDataFrame(changes, CHANGES),
        current,
        tombstones,
        unique=unique,
        data=DATA,
        watermark=watermark,
        at=AT,
        out=out,
    ).collect()
    return [r.asDict() for r in rows]


def _stored_frames(
    spark: SparkSession, stored: list[dict[str, Any]], mark: StructType | None
) -> tuple[DataFrame, DataFrame]:
    """The generated stored states as ``fold_rows``' live rows and tombstones."""
    stored_type = StructType(
        [
            StructField("id", StringType()),
            StructField("s_version", LongType()),
            StructField("s_created", TimestampType()),
            StructField("s_updated", TimestampType()),
            StructField("s_data", DATA),
            StructField("t_version", LongType()),
            *([StructField("t_mark", mark)] if mark else []),
        ]
    )
    both = spark.createDataFrame(stored, stored_type)
    return (
        both.where("s_version IS NOT NULL").select(
            "id", "s_version", "s_created", "s_updated", "s_data"
        ),
        both.where("t_version IS NOT NULL").select("id", "t_version", *(["t_mark"] * bool(mark))),
    )


@pytest.mark.parametrize(
    "watermark", [(), ("ts",), ("ts", "b")], ids=["no-watermark", "ts", "ts-and-b"]
)
def test_sql_fold_equals_reference_fold(spark: SparkSession, watermark: tuple[str, ...]) -> None:
    mark = StructType([DATA[c] for c in watermark]) if watermark else None
    changes, stored = generated(len(watermark) + 7, mark)
    kinds = {row["__kind"] for row in changes}
    assert kinds == {k.value for k in ChangeKind}
    assert sum(1 for row in changes if row["__flags"]) > 100
    out = _fold_schema(DATA, mark)
    expected = _reference(changes, stored, watermark)
    effects = {r["__effect"] for r in expected if r["__row_kind"] == "effect"}
    assert effects == {"inserted", "updated", "deleted", "unchanged", "skipped"} | (
        {"stale"} if watermark else set()
    )
    with_history = {r["id"] for r in expected if r["__row_kind"] == "history"}
    moved = [r for r in expected if r["__row_kind"] == "state" and r["id"] not in with_history]
    assert bool(moved) == bool(watermark)  # tombstones whose watermark a skipped delete moved
    found = _sql_fold(
        spark,
        changes,
        *_stored_frames(spark, stored, mark),
        watermark=watermark,
        unique=False,
        out=out,
    )
    assert len(found) == len(expected)
    assert _canonical(found, out) == _canonical(expected, out)


@pytest.mark.parametrize("unique", [False, True], ids=["grouped", "unique"])
@pytest.mark.parametrize("watermark", [(), ("ts", "b")], ids=["no-watermark", "ts-and-b"])
def test_sql_fold_of_one_change_per_key_over_stored_state(
    spark: SparkSession, watermark: tuple[str, ...], unique: bool
) -> None:
    """One change per key, grouped or not (``unique``: no key given twice, nothing grouped):
    every change kind over a live row, a tombstone or nothing gives what the reference fold
    gives."""
    rnd = random.Random(31 + len(watermark))
    mark = StructType([DATA[c] for c in watermark]) if watermark else None
    changes, stored = [], []
    for n in range(SEQUENCES):
        key = f"k{n:04d}"
        state = _stored(rnd, key, mark)
        if state is not None:
            stored.append(state)
        changes.append(_change(rnd, key, (n % 7) << 32 | n))
    expected = _reference(changes, stored, watermark)
    effects = {r["__effect"] for r in expected if r["__row_kind"] == "effect"}
    assert effects == {"inserted", "updated", "deleted", "unchanged", "skipped"} | (
        {"stale"} if watermark else set()
    )
    out = _fold_schema(DATA, mark)
    found = _sql_fold(
        spark,
        changes,
        *_stored_frames(spark, stored, mark),
        watermark=watermark,
        unique=unique,
        out=out,
    )
    assert _canonical(found, out) == _canonical(expected, out)


def test_sql_fold_of_one_change_per_key_into_empty_tables(spark: SparkSession) -> None:
    """A first load: no stored rows or tombstones to join, no key given twice (no grouping)."""
    rnd = random.Random(11)
    changes = [_change(rnd, f"k{n:04d}", 1 << 32 | n) for n in range(SEQUENCES)]
    watermark = ("ts",)
    out = _fold_schema(DATA, StructType([DATA["ts"]]))
    expected = _reference(changes, [], watermark)
    assert {r["__effect"] for r in expected if r["__row_kind"] == "effect"} == {
        "inserted",
        "skipped",
    }
    found = _sql_fold(spark, changes, None, None, watermark=watermark, unique=True, out=out)
    assert _canonical(found, out) == _canonical(expected, out)


def _as_fold_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A row of ``sqlfold.first_rows`` as the rows ``fold_rows`` gives for its key: the effect,
    then — if the key changed — its new state and its history entry."""
    out = [
        {
            "__row_kind": "effect",
            "id": row["id"],
            "__seq": row["__seq"],
            "__effect": row["__effect"],
        }
    ]
    if row["__deleted"] is None:
        return out
    written = {k: row[k] for k in ("id", "version", "created", "updated", "__deleted", "data")}
    out.append({"__row_kind": "state", **written, "__stored": False, "__mark": row.get("__mark")})
    if row["__effect"] == "inserted":
        out.append({"__row_kind": "history", **written, "__op": row["__op"], "__tx": row["__tx"]})
    return out


@pytest.mark.parametrize(
    "watermark", [(), ("ts",), ("ts", "b")], ids=["no-watermark", "ts", "ts-and-b"]
)
def test_first_rows_equal_the_reference_fold_of_one_change_into_nothing(
    spark: SparkSession, watermark: tuple[str, ...]
) -> None:
    """``first_rows`` (a first load of unique keys, a projection) gives, for every change kind,
    flags and watermark, what the reference fold gives for a key with nothing stored."""
    rnd = random.Random(23 + len(watermark))
    changes = [_change(rnd, f"k{n:04d}", (n % 5) << 32 | n) for n in range(SEQUENCES)]
    assert {row["__kind"] for row in changes} == {k.value for k in ChangeKind}
    mark = StructType([DATA[c] for c in watermark]) if watermark else None
    out = _fold_schema(DATA, mark)
    expected = _reference(changes, [], watermark)
    rows = first_rows(
        spark.createDataFrame(changes, CHANGES), data=DATA, watermark=watermark, at=AT
    ).collect()
    found = [r for row in rows for r in _as_fold_rows(_plain(row))]
    assert {r["__effect"] for r in found if r["__row_kind"] == "effect"} == {"inserted", "skipped"}
    moved = [r for r in found if r["__row_kind"] == "state" and r["__deleted"]]
    assert bool(moved) == bool(watermark)  # deletes that leave a tombstone with a watermark
    assert _canonical(found, out) == _canonical(expected, out)


def _fold_size(spark: SparkSession, properties: int) -> int:
    """The leaves of the expressions of ``fold_rows``' plan (as built, before analysis) for a
    schema of ``properties`` longs, counted as Spark's analyser walks them: a subexpression
    used twice counts twice."""
    data = StructType([StructField(f"p{i}", LongType()) for i in range(properties)])
    changes = StructType(
        [*(f for f in CHANGES.fields if f.name != "data"), StructField("data", data)]
    )
    rows = fold_rows(
        spark.createDataFrame([], changes),
        None,
        None,
        unique=False,
        data=data,
        watermark=(),
        at=AT,
        out=_fold_schema(data, None),
    )
    leaves, plans = 0, [rows._jdf.queryExecution().logical()]
    while plans:
        plan = plans.pop()
        expressions = plan.expressions()
        leaves += sum(
            expressions.apply(i).collectLeaves().size() for i in range(expressions.size())
        )
        children = plan.children()
        plans.extend(children.apply(i) for i in range(children.size()))
    return leaves


def test_the_fold_grows_linearly_with_the_properties(spark: SparkSession) -> None:
    """Each property's new value is an expression of that property alone. Picking it out of a
    struct of every property's value made the plan grow with the square of the properties:
    a batch into an 80-property table spent ~100 s analysing and compiling the fold."""
    small, large = _fold_size(spark, 12), _fold_size(spark, 24)
    assert large / small < 2.5, (small, large)


def test_a_schema_with_a_map_is_left_to_the_python_fold() -> None:
    assert supported(DATA)
    assert not supported(
        StructType([StructField("tags", ArrayType(MapType(StringType(), StringType())))])
    )
