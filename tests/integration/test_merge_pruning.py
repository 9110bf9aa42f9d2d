"""The MERGE into a current table rewrites only the files that hold a key the batch changes
(issue 6: "the MERGE must not rewrite files that no change touches"). Read with delta-rs, so the
check does not trust Spark's own account of the table."""

from __future__ import annotations

import itertools
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deltalake
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from streaming.apply.objects import MERGE_BROADCAST_MAX_BYTES, broadcast_limit
from streaming.core.layout import Layout
from streaming.storage.commits import session_conf
from streaming.storage.tables import read_table
from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG_AGE

pytestmark = pytest.mark.spark

RANGES = 4
PER_RANGE = 50


def _files(path: str, version: int) -> dict[str, set[str]]:
    """Each data file of the table at ``version`` → the ids it holds."""
    table = deltalake.DeltaTable(path, version=version)
    files = table.get_add_actions(flatten=True).column("path").to_pylist()
    return {
        f: set(pq.read_table(os.path.join(path, f), columns=["id"]).column("id").to_pylist())
        for f in files
    }


def _seed_ranges(spark: SparkSession, ws: Workspace) -> tuple[str, dict[str, set[str]]]:
    """Four batches, each inserting its own id range (``r<range>-<n>``): insert-only MERGEs add
    files and remove none. The current table's path, and its files → their ids."""
    ws.dataset("petstore", DOG_AGE)
    for r in range(RANGES):
        rows = [{"id": f"r{r}-{n:03d}", "name": "x", "age": n} for n in range(PER_RANGE)]
        ws.data(f"seed{r}/petstore/Dog/part.json", *rows)
        ws.requests(request(f"seed-{r}", upsert(f"./data/seed{r}")))
        job = ws.run_once(spark)
    path = job.layout.object_table("petstore", "petstore.Dog").current
    return path, _files(path, deltalake.DeltaTable(path).version())


@dataclass(frozen=True)
class Seeded:
    """A workspace seeded by ``_seed_ranges``: its root, and its current table's files → ids."""

    root: Path
    files: dict[str, set[str]]


@pytest.fixture(scope="module")
def seeded_ranges(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    """The four seeding batches, once for the module; tests that change the table change a copy
    (``_copy_of``)."""
    ws = Workspace(tmp_path_factory.mktemp("seeded"))
    _, files = _seed_ranges(spark, ws)
    assert sum(len(ids) for ids in files.values()) == RANGES * PER_RANGE
    assert len(files) >= RANGES
    return Seeded(ws.root, files)


def _copy_of(seeded: Seeded, root: Path) -> tuple[Workspace, str]:
    """A workspace at ``root`` whose warehouse is a copy of the seeded one (its tables, ledger
    and outcomes; Delta names its files relative to the table), with a landing folder and a
    checkpoint of its own: the job's first batch reads only what the test drops. The workspace
    and its current table's path."""
    ws = Workspace(root)
    ws.dataset("petstore", DOG_AGE)
    shutil.copytree(seeded.root / "warehouse", root / "warehouse")
    cfg = ws.config()
    path = Layout(cfg.warehouse, cfg.checkpoints).table("petstore", "petstore.Dog")
    assert _files(path, deltalake.DeltaTable(path).version()) == seeded.files
    return ws, path


def _upsert_and_delete(
    spark: SparkSession, ws: Workspace, rows: list[dict[str, Any]], gone: str
) -> None:
    """One batch: an UPSERT of ``rows`` and a DELETE of the key ``gone``."""
    ws.data("change/petstore/Dog/part.json", *rows)
    ws.data("gone/petstore/Dog/part.json", {"id": gone})
    ws.requests(
        request("update", upsert("./data/change")),
        request("delete", {"operation": "DELETE", "locationUri": "./data/gone", "format": "JSON"}),
    )
    ws.run_once(spark)


def test_merge_rewrites_only_the_files_its_changes_touch(
    spark: SparkSession, seeded_ranges: Seeded, tmp_path: Path
) -> None:
    ws, path = _copy_of(seeded_ranges, tmp_path)
    seeded = seeded_ranges.files

    # One batch updating a key of range 1 and deleting a key of range 2.
    _upsert_and_delete(spark, ws, [{"id": "r1-007", "name": "changed", "age": 1}], "r2-011")
    after = _files(path, deltalake.DeltaTable(path).version())

    touched = {f for f, ids in seeded.items() if ids & {"r1-007", "r2-011"}}
    removed = set(seeded) - set(after)
    assert removed == touched, (sorted(removed), sorted(touched))
    # Untouched files are the same files, unchanged; the touched ones are rewritten.
    assert {f: seeded[f] for f in set(seeded) - touched} == {
        f: ids for f, ids in after.items() if f in seeded
    }
    all_ids = set().union(*after.values())
    assert "r2-011" not in all_ids and "r1-007" in all_ids
    assert len(all_ids) == RANGES * PER_RANGE - 1


@pytest.mark.parametrize("pushdown", [True, False])
def test_the_stored_rows_of_a_batch_are_those_of_its_keys(
    spark: SparkSession, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch, pushdown: bool
) -> None:
    """The driver fold reads only its keys' stored rows: as a filter Delta skips files with (up
    to ``KEY_PUSHDOWN_MAX`` keys), else as a broadcast semi-join; both read the same rows."""
    from streaming.apply import objects as apply

    path = str(tmp_path)
    spark.createDataFrame([(f"k{i}", i) for i in range(40)], "id string, n int").repartition(
        4
    ).write.format("delta").save(path)
    if not pushdown:
        monkeypatch.setattr(apply, "KEY_PUSHDOWN_MAX", 0)
    keys = ["k3", "k17", "k39", "absent"]
    rows = apply._of_keys(spark, spark.read.format("delta").load(path), keys).collect()
    assert sorted((r["id"], r["n"]) for r in rows) == [("k17", 17), ("k3", 3), ("k39", 39)]


def test_maintain_cluster_gives_each_file_its_own_id_range_so_a_merge_rewrites_one(
    spark: SparkSession, ws: Workspace
) -> None:
    """Rows in random id order (three batches of keys spread over the whole id range: every
    file spans it, no MERGE can skip one). ``cdc maintain --cluster`` Z-orders the current table
    by id: afterwards the files' id ranges do not overlap, the rows are those before (versions and
    hashes too), and a batch that changes one key rewrites one file."""
    from streaming.storage.maintain import current_tables, maintain

    ws.dataset("petstore", DOG_AGE)
    numbers = random.Random(7).sample(range(1_000_000), 3 * 20_000)
    for b in range(3):
        rows = [
            {"id": f"k{n:06d}", "name": random.Random(n).randbytes(20).hex(), "age": n % 90}
            for n in numbers[b::3]
        ]
        ws.data(f"seed{b}/petstore/Dog/part.json", *rows)
        ws.requests(request(f"seed-{b}", upsert(f"./data/seed{b}")))
        job = ws.run_once(spark)
    paths = job.layout.object_table("petstore", "petstore.Dog")
    table = deltalake.DeltaTable(paths.current)
    before = _files(paths.current, table.version())
    ranges = sorted((min(ids), max(ids)) for ids in before.values())
    assert any(a[1] > b[0] for a, b in itertools.pairwise(ranges)), ranges  # they overlap
    rows = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: str(r["id"]))  # "k…"

    done = maintain(
        spark,
        [paths.current, paths.history, paths.tombstones],
        optimize=False,
        vacuum_hours=None,
        current=current_tables(job.layout, job.datasets),
        cluster=True,
        current_file_mib=1,
    )
    table = deltalake.DeltaTable(paths.current)
    assert table.history(1)[0]["operation"] == "OPTIMIZE"
    assert "zOrderBy" in str(table.history(1)[0]["operationParameters"])
    clustered = _files(paths.current, table.version())
    assert done[0].files_after == len(clustered) >= 3
    ranges = sorted((min(ids), max(ids)) for ids in clustered.values())
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges)), ranges  # disjoint
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == rows

    key = f"k{numbers[12_345]:06d}"
    ws.data("change/petstore/Dog/part.json", {"id": key, "name": "changed", "age": 1})
    ws.requests(request("update-one", upsert("./data/change")))
    ws.run_once(spark)
    after = _files(paths.current, deltalake.DeltaTable(paths.current).version())
    removed = set(clustered) - set(after)
    assert removed == {f for f, ids in clustered.items() if key in ids}
    assert len(removed) == 1


def _files_read(df: DataFrame) -> int:
    """Data files the scan of ``df`` read after Delta's skipping (its ``numFiles`` metric)."""
    df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    return sum(
        int(leaves.apply(i).metrics().get("numFiles").get().value())
        for i in range(leaves.size())
        if leaves.apply(i).metrics().contains("numFiles")
    )


@pytest.mark.parametrize("fold", ["driver", "executors"])
def test_a_batch_of_many_keys_reads_and_merges_only_the_id_spans_of_its_keys(
    spark: SparkSession,
    seeded_ranges: Seeded,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fold: str,
) -> None:
    """More keys than a filter lists (``KEY_PUSHDOWN_MAX``, here 0) on the driver, or the
    executors' fold: the files' id ranges (Delta's statistics) give the spans that can hold the
    batch's keys, and the stored-row read and the MERGE name only those: the files of ranges 1
    and 3, not 0 and 2; a new key beyond every range needs none. The rows are what they must be."""
    from streaming.apply import objects as apply

    monkeypatch.setattr(apply, "KEY_PUSHDOWN_MAX", 0)
    if fold == "executors":
        monkeypatch.setattr(apply, "DRIVER_FOLD_MAX_ROWS", 0)
    ws, path = _copy_of(seeded_ranges, tmp_path)
    seeded = seeded_ranges.files

    chosen: list[Any] = []
    spans_of = apply._spans

    def spy(*args: Any, **kwargs: Any) -> Any:
        chosen.append(spans_of(*args, **kwargs))
        return chosen[-1]

    monkeypatch.setattr(apply, "_spans", spy)
    changed = [
        {"id": "r1-007", "name": "changed", "age": 1},
        {"id": "r1-040", "name": "changed", "age": 2},
        {"id": "r9-000", "name": "new", "age": 3},
    ]
    before = deltalake.DeltaTable(path).version()  # the seeded table the batch reads
    _upsert_and_delete(spark, ws, changed, "r3-011")

    (within,) = chosen  # one batch, one table: asked once
    assert within and all(low[:2] == high[:2] in ("r1", "r3") for low, high in within), within
    for key in ("r1-007", "r1-040", "r3-011"):
        assert any(low <= key <= high for low, high in within), key
    inside = {
        f
        for f, ids in seeded.items()
        if any(low <= min(ids) and max(ids) <= high for low, high in within)
    }
    read = apply._within(read_table(spark, path, before), within)
    assert _files_read(read) == len(inside) < len(seeded)
    assert _files_read(read_table(spark, path, before)) == len(seeded)

    # The executors' fold MERGEs the stored keys, then appends the new one (two commits).
    after = _files(path, deltalake.DeltaTable(path).version())
    touched = {f for f, ids in seeded.items() if ids & {"r1-007", "r1-040", "r3-011"}}
    assert set(seeded) - set(after) == touched
    table = deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()
    rows = {r["id"]: (r["version"], r["name"]) for r in table}
    assert rows["r1-007"] == rows["r1-040"] == (2, "changed")
    assert rows["r9-000"] == (1, "new") and "r3-011" not in rows
    assert rows["r0-000"] == rows["r2-049"] == (1, "x")
    assert len(table) == len(rows) == RANGES * PER_RANGE  # one row per key


def test_id_ranges_come_from_the_snapshot_held_at_that_version(
    spark: SparkSession, tmp_path: os.PathLike[str]
) -> None:
    """Each file's id range from Delta's statistics; None for a table of one file (the checksum
    says so), for a version this process does not hold, and for ids longer than Delta keeps."""
    from streaming.storage.log import id_ranges

    path = str(tmp_path)
    rows = [(f"k{i:02d}", i) for i in range(30)]
    spark.createDataFrame(rows[:10], "id string, n int").coalesce(1).write.format("delta").save(
        path
    )
    assert id_ranges(spark, path, 0) is None  # one file
    for part in (rows[10:20], rows[20:]):
        spark.createDataFrame(part, "id string, n int").coalesce(1).write.format("delta").mode(
            "append"
        ).save(path)
    assert sorted(id_ranges(spark, path, 2) or []) == [
        ("k00", "k09"),
        ("k10", "k19"),
        ("k20", "k29"),
    ]
    assert id_ranges(spark, path, 1) is None  # not the version held
    long = "x" * 40
    spark.createDataFrame([(long, 1)], "id string, n int").write.format("delta").mode(
        "append"
    ).save(path)
    assert id_ranges(spark, path, 3) is None  # a maximum Delta cut short


def test_one_of_selects_what_isin_selects_and_delta_skips_files_with_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``one_of`` (the keys of a batch as one string, split in the JVM) is ``isin``: the same
    rows, for ids with quotes, backslashes, commas, spaces, a newline and non-ASCII letters, and
    the same file skipping (Delta checks a long list by its smallest and largest value, so the
    odd ids, which sort outside range 2, make it read more files — with ``isin`` too); empty ids
    and ids holding the separator take ``isin`` itself. ``loads._ordinal_in`` compares longs
    through it."""
    from streaming.inputs.loads import _ordinal_in
    from streaming.storage.tables import one_of

    path = str(tmp_path / "t")
    odd = ["it's", "back\\slash", "comma,id", "ünï", "a b", "\\u0041", 'q"q', "x\ny"]
    for r in range(RANGES):
        ids = [f"r{r}-{n:03d}" for n in range(PER_RANGE)]
        if r == 2:
            ids += [*odd, "", "nul\x00id"]
        spark.createDataFrame([(i,) for i in ids], "id string").coalesce(1).write.format(
            "delta"
        ).mode("append").save(path)
    table = read_table(spark, path)
    in_range = [f"r2-{n:03d}" for n in range(0, PER_RANGE, 5)]
    for keys, files in (
        (in_range, 1),
        ([*in_range, *odd, "absent"], RANGES),
        ([*in_range, "", "nul\x00id"], 3),  # isin's own way; "" sorts first: ranges 0-2
    ):
        got, isin = table.where(one_of(table["id"], keys)), table.where(table["id"].isin(keys))
        assert _files_read(got) == _files_read(isin) == files  # first: a second run resets it
        assert (
            sorted(r["id"] for r in got.collect())
            == sorted(r["id"] for r in isin.collect())
            == sorted(k for k in keys if k != "absent")
        )
    numbers = spark.range(40).withColumnRenamed("id", "n")
    wanted = [0, 3, 9, 10, 11, 21, 30, 39, 77]
    assert sorted(r["n"] for r in numbers.where(_ordinal_in(numbers["n"], wanted)).collect()) == [
        0,
        3,
        9,
        10,
        11,
        21,
        30,
        39,
    ]


def test_the_broadcast_limit_follows_the_driver_heap_and_the_sessions_switch(
    spark: SparkSession,
) -> None:
    """A large batch broadcasts its MERGE source up to 64 MiB, at most a sixteenth of the
    driver's heap, and never when the session turns broadcast joins off."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    heap = int(jvm.java.lang.Runtime.getRuntime().maxMemory())
    assert broadcast_limit(spark) == min(MERGE_BROADCAST_MAX_BYTES, heap // 16) > 0
    with session_conf(spark, {"spark.sql.autoBroadcastJoinThreshold": "-1"}):
        assert broadcast_limit(spark) == -1
    assert broadcast_limit(spark) > 0
