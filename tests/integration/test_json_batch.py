"""JSON-lines loads of a micro-batch are read together (``streaming.inputs.jsonfiles``): what a
one-load-at-a-time read did must still hold per load, and the number of Spark jobs must not grow
with the number of transactions in the batch."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core.outcomes import Outcome, Status
from streaming.inputs import loads as loads_module
from streaming.storage.tables import read_table
from tests.support import Workspace, request, upsert

pytestmark = pytest.mark.spark

PET = """\
petstore.Pet:
  properties:
    name: {type: string}
    age: {type: integer}
    weight: {type: number}
    vaccinated: {type: boolean}
    tags: {type: array, items: {type: string}}
    price: {type: decimal, precision: 38, scale: 10}
    born: {type: datetime}
"""


def current(path: str) -> dict[str, dict[str, Any]]:
    table = deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()
    return {r["id"]: r for r in table}


def outcomes(spark: SparkSession, ws: Workspace) -> dict[str, Outcome]:
    """Each outcome row by transaction id; two rows of one transaction fail."""
    rows = read_table(spark, f"{ws.config().warehouse}/_system/outcomes").collect()
    found = {r["transaction_id"]: Outcome.from_json(r["outcome"]) for r in rows}
    assert len(found) == len(rows), sorted(r["transaction_id"] for r in rows)
    return found


def patch(location: str) -> dict[str, Any]:
    return {"operation": "PATCH", "locationUri": location, "format": "JSON"}


def test_values_keep_their_json_types_and_each_load_its_own_columns(
    spark: SparkSession, ws: Workspace
) -> None:
    ws.dataset("petstore", PET)
    ws.data(
        "a/petstore/Pet/part.json",
        {"id": "p1", "name": "Rex", "age": 3, "weight": 4.5, "vaccinated": True, "tags": ["x"]},
        "",  # blank lines hold no record
        '[{"id": "p2", "name": "Tom", "age": "7", "weight": 9.5}, {"id": 3, "name": "Numeric id"}]',
        # 38 digits exact, and instants every reader must read (issue 57): Parquet INT96 read
        # as nanoseconds (delta-rs, pandas) overflowed outside 1677-2262.
        {
            "id": "p4",
            "price": "99999999999999999999999999.9999999999",
            "born": "0001-01-01T00:00:00Z",
        },
        '{"id": "p5", "price": -0.0000000001, "born": "9999-12-31T23:59:59.999999Z"}',
    )
    ws.data("b/petstore/Pet/part.json", {"id": "p1", "age": 4}, {"id": "p2", "weight": None})
    ws.data("c/petstore/Pet/part.json", {"id": "p9", "name": "Dup"}, {"id": "p9", "name": "Dup"})
    ws.data("d/petstore/Pet/part.json", '{"id": "p8", "name": "A", "name": "B"}')
    ws.data("e/petstore/Pet/part.json", {"id": "p7", "name": {"first": "Obj"}})
    ws.data("f/petstore/Pet/part.json", {"id": "p6", "tags": "not-a-list"})
    # One digit more than the scale: rounding it would change the value; a JSON number, text.
    ws.data("g/petstore/Pet/part.json", '{"id": "p10", "price": 1.00000000001}')
    ws.data("h/petstore/Pet/part.json", {"id": "p11", "price": "2.00000000005"})
    ws.requests(
        request("t-a", upsert("./data/a")),
        # PATCH writes only the columns its file has: age of p1; weight of p2 (to null).
        request("t-b", patch("./data/b")),
        request("t-c", upsert("./data/c")),
        request("t-d", upsert("./data/d")),
        request("t-e", upsert("./data/e")),
        request("t-f", upsert("./data/f")),
        request("t-g", upsert("./data/g")),
        request("t-h", upsert("./data/h")),
        # The same files read by a second transaction of the same batch.
        request("t-a2", upsert("./data/a")),
    )
    job = ws.run_once(spark)

    got = outcomes(spark, ws)
    status = {tid: (o.status, o.error.code if o.error else None) for tid, o in got.items()}
    assert status == {
        "t-a": (Status.COMMITTED, None),
        "t-b": (Status.COMMITTED, None),
        "t-c": (Status.REJECTED, "DUPLICATE_ID"),
        "t-d": (Status.REJECTED, "CORRUPT_RECORD"),  # a repeated key is ambiguous
        "t-e": (Status.REJECTED, "TYPE_MISMATCH"),  # an object is not a string
        "t-f": (Status.REJECTED, "TYPE_MISMATCH"),  # a string is not an array
        "t-g": (Status.REJECTED, "TYPE_MISMATCH"),  # 11 digits after the point: never rounded
        "t-h": (Status.REJECTED, "TYPE_MISMATCH"),
        "t-a2": (Status.COMMITTED, None),
    }
    for tid in ("t-g", "t-h"):
        error = got[tid].error
        assert error is not None and "'price'" in error.message, error
        assert "decimal(38,10), at most 28 digits before the point and 10 after" in error.message
    rows = current(job.layout.object_table("petstore", "petstore.Pet").current)
    assert set(rows) == {"p1", "p2", "3", "p4", "p5"}
    p4, p5 = rows["p4"], rows["p5"]
    assert p4["price"] == Decimal("99999999999999999999999999.9999999999")
    assert p5["price"] == Decimal("-0.0000000001")
    assert p4["born"] == datetime(1, 1, 1, tzinfo=UTC)
    assert p5["born"] == datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    p1, p2, p3 = rows["p1"], rows["p2"], rows["3"]
    assert (p1["name"], p1["age"], p1["weight"], p1["vaccinated"], p1["tags"]) == (
        "Rex",
        3,  # t-a2 wrote the file's values again after t-b's PATCH
        4.5,
        True,
        ["x"],
    )
    assert (p1["version"], p2["version"], p3["version"]) == (3, 3, 1)
    assert (p2["name"], p2["age"], p2["weight"]) == ("Tom", 7, 9.5)  # "7" fits an integer
    assert p3["name"] == "Numeric id"
    counts = {a.target: (a.inserted, a.updated) for a in got["t-b"].actions}
    assert counts == {"petstore.Pet": (0, 2)}


def _jobs(spark: SparkSession) -> int:
    scheduler = spark.sparkContext._jsc.sc().dagScheduler()  # type: ignore[union-attr]
    return int(scheduler.nextJobId())


@dataclass(frozen=True)
class Batch:
    """One batch of one-row transactions into one table: the Spark jobs its run started, its
    outcomes (one per row) and the table after it."""

    jobs: int
    outcomes: list[tuple[str, Status]]
    ages: dict[str, Any]


def _batch(spark: SparkSession, root: Path, transactions: int) -> Batch:
    ws = Workspace(root)
    ws.dataset("petstore", PET)
    lines = []
    for n in range(transactions):
        ws.data(f"t{n}/petstore/Pet/part.json", {"id": f"p{n % 3}", "age": n})
        lines.append(request(f"tx{n}", upsert(f"./data/t{n}")))
    ws.requests(*lines)
    # The tables and the stream's first batch cost the same whatever the batch holds.
    before = _jobs(spark)
    job = ws.run_once(spark)
    jobs = _jobs(spark) - before
    rows = read_table(spark, job.layout.outcomes).collect()
    found = sorted((r["transaction_id"], Outcome.from_json(r["outcome"]).status) for r in rows)
    table = current(job.layout.object_table("petstore", "petstore.Pet").current)
    return Batch(jobs, found, {k: r["age"] for k, r in table.items()})


SIZES = (4, 40)


@pytest.fixture(scope="module")
def batches(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Batch]:
    """A batch of 4 transactions and one of 40, each in a workspace of its own, run once for
    the module's tests whichever of them runs."""
    root = tmp_path_factory.mktemp("json-batches")
    return {n: _batch(spark, root / str(n), n) for n in SIZES}


@pytest.mark.parametrize("transactions", SIZES)
def test_a_batch_of_one_row_transactions_commits_each_once(
    batches: dict[int, Batch], transactions: int
) -> None:
    batch = batches[transactions]
    expected = sorted((f"tx{n}", Status.COMMITTED) for n in range(transactions))
    assert batch.outcomes == expected  # one outcome row per transaction
    assert batch.ages == {f"p{n % 3}": n for n in range(transactions)}  # the last one wins


def test_spark_jobs_per_batch_do_not_grow_with_its_transactions(
    batches: dict[int, Batch],
) -> None:
    """A batch of 40 one-row transactions into one table starts as many Spark jobs as a batch
    of 4: the grouped path has no per-transaction job (issue 6)."""
    jobs = {n: batch.jobs for n, batch in batches.items()}
    assert jobs[4] > 0
    # Slack of 2: Spark lists more than 32 paths with a job of its own.
    assert jobs[40] <= jobs[4] + 2, jobs


def test_the_rows_applied_are_the_rows_checked(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wave's rows are cached by the check job, so folding and writing read them from
    there, not from the files again (issue 6: cached batch inputs). A file rewritten between
    the check and the write does not change what is applied."""
    ws.dataset("petstore", PET)
    data = ws.data("a/petstore/Pet/part.json", {"id": "p1", "name": "Rex"})
    checked = loads_module.check_loads

    def check_then_rewrite(loaded: Any, *args: Any) -> Any:
        errors = checked(loaded, *args)
        data.write_text(data.read_text().replace("Rex", "Max"))  # same size, other value
        return errors

    monkeypatch.setattr(loads_module, "check_loads", check_then_rewrite)
    ws.requests(request("t-1", upsert("./data/a")))
    job = ws.run_once(spark)
    assert "Max" in data.read_text()
    rows = current(job.layout.object_table("petstore", "petstore.Pet").current)
    assert {k: r["name"] for k, r in rows.items()} == {"p1": "Rex"}
