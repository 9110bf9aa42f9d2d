"""``tables.deletion_vectors``: the current tables' MERGEs mark the rows they replace in deletion
vectors instead of rewriting their files, and give the same tables as without them; startup
switches an existing table; ``cdc maintain --optimize`` purges the vectors. Read with delta-rs
(DataFusion's ``QueryBuilder``, which applies the vectors), not with Spark."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from streaming.apply import objects as apply_module
from streaming.core.outcomes import Outcome, Status
from streaming.storage.evolution import DELETION_VECTORS_PROPERTY
from streaming.storage.maintain import maintain
from streaming.storage.tables import read_table
from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG_AGE

pytestmark = pytest.mark.spark

KEYS = 40


def _rows(path: str, *columns: str) -> list[tuple[Any, ...]]:
    """The table's live rows as delta-rs reads them, deletion vectors applied."""
    table = deltalake.DeltaTable(path)
    query = f"SELECT {', '.join(columns)} FROM t ORDER BY {', '.join(columns)}"
    batches = deltalake.QueryBuilder().register("t", table).execute(query).read_all()
    return [tuple(r[c] for c in columns) for r in pa.table(batches).to_pylist()]


def _vectors(path: str, version: int | None = None) -> int:
    """Live data files of the table's ``version`` (None: the latest) that carry a deletion
    vector, from the Delta log itself (every commit's add and remove actions; a file is its
    path and vector: a MERGE adds a file again with a vector and removes it without)."""
    live: set[tuple[str, str]] = set()
    for commit in sorted(Path(path, "_delta_log").glob("*.json")):
        if version is not None and int(commit.stem) > version:
            break
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if kind in action:
                    vector = action[kind].get("deletionVector")
                    key = (action[kind]["path"], json.dumps(vector, sort_keys=True))
                    (live.add if kind == "add" else live.discard)(key)
    return sum(1 for _, vector in live if vector != "null")


def _property(path: str) -> str | None:
    return deltalake.DeltaTable(path).metadata().configuration.get(DELETION_VECTORS_PROPERTY)


def _two_batches(spark: SparkSession, root: Path, *, vectors: bool, large: bool) -> str:
    """A first batch inserting ``KEYS`` pets, a second updating every fourth, deleting every
    fifth and inserting two; the current table's path."""
    ws = Workspace(root)
    ws.dataset("petstore", DOG_AGE)
    cfg = ws.config(tables={"deletion_vectors": vectors})
    ws.data(
        "seed/petstore/Dog/part.json",
        *[{"id": f"p{n:02d}", "name": "a", "age": n} for n in range(KEYS)],
    )
    ws.requests(request("seed", upsert("./data/seed")))
    with pytest.MonkeyPatch.context() as patch:
        if large:  # the executors' fold and its MERGE without an insert clause
            patch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)
        job = ws.run_once(spark, cfg)
        changed = [{"id": f"p{n:02d}", "name": "b", "age": n + 100} for n in range(0, KEYS, 4)]
        changed += [{"id": f"q{n}", "name": "new", "age": n} for n in range(2)]
        ws.data("change/petstore/Dog/part.json", *changed)
        ws.data("gone/petstore/Dog/part.json", *[{"id": f"p{n:02d}"} for n in range(1, KEYS, 5)])
        ws.requests(
            request("change", upsert("./data/change")),
            request(
                "gone", {"operation": "DELETE", "locationUri": "./data/gone", "format": "JSON"}
            ),
        )
        ws.run_once(spark, cfg)
    return job.layout.object_table("petstore", "petstore.Dog").current


@pytest.fixture(scope="module")
def two_batches(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[bool, bool], str]:
    """``_two_batches`` once for each (vectors, large): the current tables' paths. The tests
    only read them (the maintenance test works on a copy)."""
    root = tmp_path_factory.mktemp("deletion-vectors")
    return {
        (vectors, large): _two_batches(
            spark, root / f"vectors-{vectors}-large-{large}", vectors=vectors, large=large
        )
        for vectors in (True, False)
        for large in (False, True)
    }


@pytest.mark.parametrize("large", [False, True], ids=["driver fold", "executors' fold"])
def test_merges_give_the_same_table_with_deletion_vectors(
    two_batches: dict[tuple[bool, bool], str], large: bool
) -> None:
    """The executors' fold's MERGE marks the rows it replaces; the driver fold's (a few keys)
    rewrites their files even on a table with vectors on (``apply._merge``)."""
    marked = two_batches[(True, large)]
    rewritten = two_batches[(False, large)]

    assert _property(marked) == "true"
    assert _property(rewritten) == "false"
    if large:
        assert _vectors(marked) >= 1, "the second batch's MERGE marked rows instead of rewriting"
    else:
        assert _vectors(marked) == 0
    assert _vectors(rewritten) == 0
    columns = ("id", "version", "name", "age", "hash")
    rows = _rows(marked, *columns)
    assert rows == _rows(rewritten, *columns)
    ids = [r[0] for r in rows]
    deleted = {f"p{n:02d}" for n in range(1, KEYS, 5)}
    assert ids == sorted({f"p{n:02d}" for n in range(KEYS)} - deleted | {"q0", "q1"})
    by_id = {r[0]: r for r in rows}
    assert by_id["p04"][1:4] == (2, "b", 104)  # updated: version 2
    assert by_id["p02"][1:4] == (1, "a", 2)  # untouched


def test_maintain_purges_the_vectors_and_keeps_the_rows(
    spark: SparkSession, two_batches: dict[tuple[bool, bool], str], tmp_path: Path
) -> None:
    """On a copy of the table the executors' fold marked (a Delta table is its folder: data
    files, vector files and log, all named relative to it)."""
    path = str(tmp_path / "current")
    shutil.copytree(two_batches[(True, True)], path)
    columns = ("id", "version", "name", "age", "hash")
    before = _rows(path, *columns)
    assert before == _rows(two_batches[(True, True)], *columns)
    assert _vectors(path) >= 1

    maintain(spark, [path], optimize=True, vacuum_hours=None, current={path})

    assert _vectors(path) == 0
    assert _rows(path, *columns) == before


def test_startup_switches_an_existing_tables_vectors(spark: SparkSession, tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.dataset("petstore", DOG_AGE)
    job = ws.run_once(spark)
    path = job.layout.object_table("petstore", "petstore.Dog").current
    history = job.layout.object_table("petstore", "petstore.Dog").history
    assert _property(path) == "false"

    ws.run_once(spark, ws.config(tables={"deletion_vectors": True}))
    assert _property(path) == "true"
    assert _property(history) == "false"  # append-only: the session default, left as it is

    ws.run_once(spark, ws.config(tables={"deletion_vectors": False}))
    assert _property(path) == "false"


FAILING_VIEW = """\
petstore.Zoo:
  type: view
  materialized: true
  primaryKey: [id]
  sql: SELECT name AS id, 1 / (age - age) AS total FROM @{pet}
  using: {pet: petstore.Dog}
  properties: {id: {type: string}, total: {type: integer}}
"""


def test_a_failed_transaction_restores_a_table_its_merge_marked(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The MERGE marks rows, a later table of the transaction fails (the view divides by zero),
    and the segment is restored: the table reads as before, without the MERGE's vectors."""
    ws = Workspace(tmp_path)
    ws.dataset("petstore", DOG_AGE + FAILING_VIEW)
    cfg = ws.config(tables={"deletion_vectors": True})
    ws.data(
        "seed/petstore/Dog/part.json", *[{"id": f"p{n}", "name": "a", "age": n} for n in range(8)]
    )
    ws.requests(request("seed", upsert("./data/seed")))
    job = ws.run_once(spark, cfg)
    path = job.layout.object_table("petstore", "petstore.Dog").current
    columns = ("id", "version", "name", "age", "hash")
    before = _rows(path, *columns)

    ws.data("change/petstore/Dog/part.json", {"id": "p1", "name": "b", "age": 1})
    ws.requests(
        request("bad", upsert("./data/change"), {"operation": "REFRESH", "target": "petstore.Zoo"})
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)  # the MERGE that marks rows
        ws.run_once(spark, cfg)

    merges = [c for c in deltalake.DeltaTable(path).history() if c["operation"] == "MERGE"]
    assert merges, "the transaction's MERGE was committed before the view failed"
    assert _vectors(path, merges[0]["version"]) >= 1
    assert _rows(path, *columns) == before
    assert _vectors(path) == 0
    outcomes = read_table(spark, job.layout.outcomes).collect()
    failed = [Outcome.from_json(r["outcome"]) for r in outcomes if r["transaction_id"] == "bad"]
    assert [o.status for o in failed] == [Status.FAILED]
