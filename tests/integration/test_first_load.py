"""A first load (issue 13): changes into a current table that holds no rows are appended, not
merged — a key's change a projection when the key has no other, only repeated keys folded — and
give exactly what the fold gives when the table may hold rows — rows, versions, hashes,
history, tombstones and outcome counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.apply import objects as apply_module
from streaming.apply import sqlfold
from streaming.inputs import loads as loads_module
from tests.support import Workspace
from tests.support.dms import ORDER, config, dms_workspace, order, outcomes

pytestmark = pytest.mark.spark

UNIQUE = [order(f"o{i:02d}", 100 + i % 7, "new", "I", amount=i) for i in range(30)]
# A delete of a key never seen: skipped, and the key's tombstone keeps its watermark.
UNIQUE_AND_A_DELETE = [*UNIQUE[:20], order("o40", 100, "ghost", "D")]
REPEATED = [
    *UNIQUE[:10],
    order("o01", 300, "paid", "U"),  # updated twice, the later one older: stale
    order("o01", 200, "late", "U"),
    order("o02", 300, "new", "D"),  # inserted, then deleted: a tombstone
    order("o03", 103, "new", "U", amount=3),  # the same row again: unchanged
    order("o40", 100, "ghost", "D"),  # a delete of a key never seen: skipped
    order("o04", None, "null-ts", "U"),  # NULL is the smallest watermark: stale
]


def _table(path: Path, *columns: str) -> list[tuple[Any, ...]]:
    rows = deltalake.DeltaTable(str(path)).to_pyarrow_table(columns=list(columns)).to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in rows)


def _load(
    spark: SparkSession,
    root: Path,
    *files: list[dict[str, Any]],
    folded: bool = False,
    repeated_max: int | None = None,
) -> dict[str, Any]:
    """DMS files into an empty table in one batch through the large path (as loads too big
    for the driver fold), as a first load or — ``folded`` — as if the table held rows (its
    stored rows are read and joined, every key folded; new keys are appended either way)."""
    folds: list[str] = []

    def fold_rows(*args: Any, unique: bool, **kwargs: Any) -> Any:
        folds.append("ungrouped" if unique else "grouped")
        return sqlfold.fold_rows(*args, unique=unique, **kwargs)

    def first_rows(*args: Any, **kwargs: Any) -> Any:
        folds.append("first rows")
        return sqlfold.first_rows(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)
        # The file (one row group) is spread over two tasks, as a big full-load file is.
        patch.setattr(loads_module, "SPREAD_MIN_ROWS", 5)
        patch.setattr(apply_module, "fold_rows", fold_rows)
        patch.setattr(apply_module, "first_rows", first_rows)
        if folded:
            patch.setattr(apply_module, "holds_no_rows", lambda *_: False)
        if repeated_max is not None:
            patch.setattr(apply_module, "REPEATED_KEYS_MAX", repeated_max)
        ws = Workspace(root)
        zone = dms_workspace(ws)
        for number, rows in enumerate(files, start=1):
            zone.drop("sales.Order", f"LOAD{number:08d}.parquet", rows, ORDER)
        ws.run_once(spark, config(ws))
    # The changes stay cached until history is appended, then the batch releases them.
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()
    warehouse = root / "warehouse" / "sales"
    table = warehouse / "sales" / "Order"
    operations = [c["operation"] for c in deltalake.DeltaTable(str(table)).history()]
    fresh = [
        r["created"] == r["updated"]
        for r in deltalake.DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    ]
    counts = [o.actions[0] for o in outcomes(spark, ws)]
    file_count = len(deltalake.DeltaTable(str(table)).file_uris())
    return {
        "folds": folds,
        "operation": operations[0],
        "files": file_count,
        "current": _table(table, "id", "version", "hash", "status", "amount", "ts"),
        "fresh": all(fresh),
        "history": _table(
            warehouse / "_history" / "sales" / "Order",
            "id",
            "version",
            "__op",
            "__deleted",
            "hash",
            "status",
            "__transaction_id",
        ),
        "tombstones": _table(warehouse / "_tombstones" / "sales" / "Order", "id", "version"),
        "counts": tuple(
            sum(getattr(c, effect) for c in counts)
            for effect in ("inserted", "updated", "deleted", "skipped", "stale")
        ),
    }


@pytest.mark.parametrize(
    "rows",
    [UNIQUE, UNIQUE_AND_A_DELETE, REPEATED],
    ids=["unique-keys", "unique-keys-and-a-delete", "repeated-keys"],
)
def test_a_first_load_appends_what_the_fold_would_write(
    spark: SparkSession, tmp_path: Path, rows: list[dict[str, Any]]
) -> None:
    appended = _load(spark, tmp_path / "append", rows)
    merged = _load(spark, tmp_path / "merge", rows, folded=True)
    # No key was in the table: both append their rows, neither MERGEs.
    assert appended["operation"] == merged["operation"] == "WRITE"
    # The check job counted the file's repeated ids: a file without any into an empty table
    # is a projection per row (``first_rows``), into a table with rows a fold ungrouped; with
    # some, the keys changed once are projected and only the repeated ones folded.
    if rows is REPEATED:
        assert (appended["folds"], merged["folds"]) == (["first rows", "grouped"], ["grouped"])
    else:
        assert (appended["folds"], merged["folds"]) == (["first rows"], ["ungrouped"])
    assert appended["fresh"] and merged["fresh"]
    if len(rows) > 20:  # spread over two tasks, each writes its file
        assert appended["files"] == 2
    for part in ("current", "history", "tombstones", "counts"):
        assert appended[part] == merged[part], part
    if rows is REPEATED:
        assert appended["counts"] == (10, 1, 1, 1, 2)
        assert ("o02", 2) in appended["tombstones"]
    elif rows is UNIQUE_AND_A_DELETE:
        assert appended["counts"] == (20, 0, 0, 1, 0)
        assert appended["tombstones"] == [("o40", 0)]
        assert len(appended["current"]) == len(appended["history"]) == 20
    else:
        assert appended["counts"] == (30, 0, 0, 0, 0)
        assert len(appended["current"]) == len(appended["history"]) == 30


def test_a_first_load_with_more_repeated_keys_than_the_limit_folds_every_key(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Past ``REPEATED_KEYS_MAX`` repeated keys (their ids would be broadcast) every key is
    folded, as into a table with rows — the same rows, history, tombstones and counts."""
    split = _load(spark, tmp_path / "split", REPEATED)
    whole = _load(spark, tmp_path / "whole", REPEATED, repeated_max=0)
    assert (split["folds"], whole["folds"]) == (["first rows", "grouped"], ["grouped"])
    for part in ("current", "history", "tombstones", "counts"):
        assert split[part] == whole[part], part


def test_two_files_of_unique_keys_fold_the_shared_key_and_load_as_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two loads of one table in a wave: each file's ids are unique, but a key may be in both
    (the check job does not count their distinct ids: nothing uses it), so the repeated keys
    are found by a job of their own and only they are folded."""
    first, second = UNIQUE[:20], [order("o05", 200, "paid", "U"), *UNIQUE[20:]]
    loaded = _load(spark, tmp_path / "two", first, second)
    assert loaded["folds"] == ["first rows", "grouped"]
    assert loaded["counts"] == (30, 1, 0, 0, 0)
    assert ("o05", 2, "paid") in [
        row[:3]
        for row in _table(
            tmp_path / "two" / "warehouse" / "sales" / "sales" / "Order", "id", "version", "status"
        )
    ]
