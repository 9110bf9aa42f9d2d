"""Actions that read another schema, a view, a query or a table (seed 000), each seed example a
test asserting the table as the seed prints it. Setup transactions share the micro-batch with the
transaction under test: the batch is cut into segments, so the result is the sequential one."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming.core.outcomes import Outcome, Status
from streaming.runtime.job import Job
from streaming.storage.schemas import current_schema
from streaming.storage.tables import read_table
from tests.support import Workspace, request

pytestmark = pytest.mark.spark

PETSTORE = (Path(__file__).parents[2] / "streaming" / "resources" / "petstore.yaml").read_text()
T0 = datetime(2023, 1, 1, tzinfo=UTC)
T1 = datetime(2023, 1, 2, tzinfo=UTC)


def rows(path: str, *columns: str) -> list[tuple[Any, ...]]:
    """A table's rows read by delta-rs, an independent Delta reader."""
    table = deltalake.DeltaTable(path).to_pyarrow_table(columns=list(columns)).to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in table)


def outcomes(spark: SparkSession, job: Job) -> dict[str, Outcome]:
    found = read_table(spark, job.layout.outcomes).orderBy("batch_id").collect()
    return {r["transaction_id"]: Outcome.from_json(r["outcome"]) for r in found}


def upsert(location: str) -> dict[str, Any]:
    return {"operation": "UPSERT", "locationUri": location, "format": "JSON"}


def write_objects(spark: SparkSession, job: Job, schema: str, *items: dict[str, Any]) -> None:
    """Pre-existing rows written straight into an object table (meta columns given)."""
    definition = job.datasets["petstore"].schemas[schema]
    props = definition.data_columns()
    data = [
        {**item, "hash": "seed", **{p: item.get(p) for p in props}}
        for item in items  # hash: the rows are pre-existing, not written by the engine
    ]
    df = spark.createDataFrame(data, current_schema(definition))
    df.write.format("delta").mode("append").save(job.layout.table("petstore", schema))


def write_rows(spark: SparkSession, job: Job, schema: str, *items: dict[str, Any]) -> None:
    definition = job.datasets["petstore"].schemas[schema]
    df = spark.createDataFrame(list(items), current_schema(definition))
    df.write.format("delta").mode("append").save(job.layout.table("petstore", schema))


@pytest.fixture
def pet(ws: Workspace) -> Workspace:
    ws.dataset("petstore", PETSTORE)
    return ws


def seed_dog_changes(ws: Workspace) -> str:
    ws.data(
        "changes/petstore/DogChange/part.json",
        {"id": "dog1", "status": "ready", "name": "Scooby"},
        {"id": "dog2", "status": "ready", "name": "Lassie"},
        {"id": "dog3", "status": "pending", "name": "Clifford"},
    )
    return request("tx-changes", upsert("./data/changes"))


def test_seed_upsert_from_other_schema_with_query(spark: SparkSession, pet: Workspace) -> None:
    pet.data("dogs/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby Doo"})
    pet.requests(
        request("tx-dogs", upsert("./data/dogs")),
        seed_dog_changes(pet),
        request(
            "tx-upsert",
            {
                "operation": "UPSERT",
                "target": "petstore.Dog",
                "source": "petstore.DogChange",
                "query": "withStatus",
                "arguments": {"inputStatus": "ready"},
            },
        ),
    )
    job = pet.run_once(spark)
    dog = job.layout.table("petstore", "petstore.Dog")
    assert rows(dog, "id", "version", "name") == [("dog1", 2, "Scooby"), ("dog2", 1, "Lassie")]
    counts = outcomes(spark, job)["tx-upsert"].actions[0]
    assert (counts.inserted, counts.updated) == (1, 1)


def test_seed_patch_from_query_schema(spark: SparkSession, pet: Workspace) -> None:
    pet.data(
        "dogs/petstore/Dog/part.json",
        {"id": "dog1", "name": "Scooby Doo", "age": 5},
        {"id": "dog2", "name": "Médor", "age": 3},
        {"id": "dog3", "name": "Corniaud", "age": None},
    )
    pet.requests(
        request("tx-dogs", upsert("./data/dogs")),
        request(
            "tx-patch",
            {"operation": "PATCH", "target": "petstore.Dog", "source": "petstore.NextDogAge"},
        ),
    )
    job = pet.run_once(spark)
    assert rows(job.layout.table("petstore", "petstore.Dog"), "id", "version", "name", "age") == [
        ("dog1", 2, "Scooby Doo", 6),
        ("dog2", 2, "Médor", 4),
        ("dog3", 1, "Corniaud", None),
    ]


def test_seed_insert_ignore_from_other_schema(spark: SparkSession, pet: Workspace) -> None:
    pet.data("dogs/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby Doo"})
    pet.data(
        "changes/petstore/DogChange/part.json",
        {"id": "dog1", "name": "Scooby"},
        {"id": "dog2", "name": "Lassie"},
        {"id": "dog3", "name": "Clifford"},
    )
    pet.requests(
        request("tx-dogs", upsert("./data/dogs")),
        request("tx-changes", upsert("./data/changes")),
        request(
            "tx-ignore",
            {
                "operation": "INSERT_IGNORE",
                "target": "petstore.Dog",
                "source": "petstore.DogChange",
            },
        ),
    )
    job = pet.run_once(spark)
    assert rows(job.layout.table("petstore", "petstore.Dog"), "id", "version", "name") == [
        ("dog1", 1, "Scooby Doo"),
        ("dog2", 1, "Lassie"),
        ("dog3", 1, "Clifford"),
    ]
    counts = outcomes(spark, job)["tx-ignore"].actions[0]
    assert (counts.inserted, counts.skipped) == (2, 1)


def test_seed_using_queries_in_transactions(spark: SparkSession, pet: Workspace) -> None:
    """DogQuery (``WHERE name=${name}``) with name=Lassie selects dog2 only: upserting it back
    into Dog changes nothing (dog2 stays version 1) and dog1 is not touched."""
    pet.data(
        "dogs/petstore/Dog/part.json",
        {"id": "dog1", "name": "Scooby Doo"},
        {"id": "dog2", "name": "Lassie"},
    )
    pet.requests(
        request("tx-dogs", upsert("./data/dogs")),
        request(
            "tx-query",
            {
                "operation": "UPSERT",
                "target": "petstore.Dog",
                "source": "petstore.DogQuery",
                "arguments": {"name": "Lassie"},
            },
        ),
    )
    job = pet.run_once(spark)
    assert rows(job.layout.table("petstore", "petstore.Dog"), "id", "version", "name") == [
        ("dog1", 1, "Scooby Doo"),
        ("dog2", 1, "Lassie"),
    ]
    counts = outcomes(spark, job)["tx-query"].actions[0]
    assert (counts.inserted, counts.updated, counts.unchanged) == (0, 0, 1)


def test_seed_refresh_with_query_then_the_whole_view(spark: SparkSession, pet: Workspace) -> None:
    job = Job.create(spark, pet.config())
    write_rows(spark, job, "petstore.DogChangeStats", {"id": "ready", "total": 5})
    write_rows(spark, job, "petstore.DogChangeStats", {"id": "pending", "total": 4})
    refresh: dict[str, Any] = {"operation": "REFRESH", "target": "petstore.DogChangeStats"}
    pet.requests(
        seed_dog_changes(pet),
        request(
            "tx-refresh-ready",
            {**refresh, "query": "withStatus", "arguments": {"inputStatus": "ready"}},
        ),
    )
    job.run(once=True)
    stats = job.layout.table("petstore", "petstore.DogChangeStats")
    assert rows(stats, "id", "total") == [("pending", 4), ("ready", 2)]
    pet.requests(request("tx-refresh-all", refresh))
    job.run(once=True)
    assert rows(stats, "id", "total") == [("pending", 1), ("ready", 2)]
    counts = outcomes(spark, job)["tx-refresh-all"].actions[0]
    assert (counts.updated, counts.unchanged) == (1, 1)


def test_seed_merge_action_example(spark: SparkSession, pet: Workspace) -> None:
    job = Job.create(spark, pet.config())
    write_rows(spark, job, "petstore.DogChangeStats", {"id": "ready", "total": 5})
    write_objects(
        spark,
        job,
        "petstore.DogChangeStatsAudit",
        {"id": "ready", "version": 1, "created": T0, "updated": T0, "total": 2},
        {"id": "pending", "version": 1, "created": T0, "updated": T0, "total": 5},
    )
    pet.requests(
        request(
            "tx-merge",
            {
                "operation": "MERGE",
                "source": "petstore.DogChangeStats",
                "target": "petstore.DogChangeStatsAudit",
            },
        )
    )
    job.run(once=True)
    paths = job.layout.object_table("petstore", "petstore.DogChangeStatsAudit")
    assert rows(paths.current, "id", "version", "total") == [("ready", 2, 5)]
    assert rows(paths.history, "id", "version", "total", "__deleted") == [
        ("pending", 2, 5, True),
        ("ready", 2, 5, False),
    ]
    counts = outcomes(spark, job)["tx-merge"].actions[0]
    assert (counts.updated, counts.deleted) == (1, 1)


def test_seed_replace_action_example(spark: SparkSession, pet: Workspace) -> None:
    """Version = max in the batch scope (2) + 10 = 12 by the seed's written rule (its table
    prints 11); created = the scope's minimum; Raffles gets a tombstone with its data."""
    job = Job.create(spark, pet.config())
    pet.data(
        "years/petstore/DogWithYear/part.json",
        {"id": "1", "name": "Toodles", "yearOfBirth": 2021},
        {"id": "2", "name": "Geoff", "yearOfBirth": 2020},
        {"id": "3", "name": "Minnie", "yearOfBirth": 2021},
        {"id": "4", "name": "Jimmie", "yearOfBirth": 2021},
    )
    write_objects(
        spark,
        job,
        "petstore.DogYearStatus",
        *[
            {"id": i, "name": n, "yearOfBirth": y, "status": s, "version": v}
            | {"created": c, "updated": c}
            for i, n, y, s, v, c in [
                ("1", "Toodles", 2021, "arrived", 1, T0),
                ("2", "Geoff", 2020, "arrived", 1, T0),
                ("4", "Jimmie", 2021, "adopted", 2, T1),
                ("5", "Raffles", 2021, "unknown", 1, T1),
            ]
        ],
    )
    pet.requests(
        request("tx-years", upsert("./data/years")),
        request(
            "tx-replace",
            {
                "operation": "REPLACE",
                "target": "petstore.DogYearStatus",
                "source": "petstore.AdoptedDogs",
                "query": "byYear",
                "arguments": {"inputYear": 2021},
            },
        ),
    )
    job.run(once=True)
    paths = job.layout.object_table("petstore", "petstore.DogYearStatus")
    columns = ("id", "name", "yearOfBirth", "status", "version", "created")
    now = outcomes(spark, job)["tx-replace"].committed_at
    assert rows(paths.current, *columns) == [
        ("1", "Toodles", 2021, "adopted", 12, T0),
        ("2", "Geoff", 2020, "arrived", 1, T0),
        ("3", "Minnie", 2021, "adopted", 12, T0),
        ("4", "Jimmie", 2021, "adopted", 12, T0),
    ]
    updated = {r[0]: r[1] for r in rows(paths.current, "id", "updated")}
    assert updated["1"] == updated["3"] == updated["4"] == now != updated["2"]
    tombstone = [r for r in rows(paths.history, *columns, "updated", "__deleted") if r[-1]]
    assert tombstone == [("5", "Raffles", 2021, "unknown", 12, T1, now, True)]


def test_delete_pointing_at_itself_with_a_query(spark: SparkSession, ws: Workspace) -> None:
    """Seed 000: DELETE with source = target and a query deletes the rows the query selects."""
    ws.dataset(
        "my",
        """\
my.Entity:
  properties: {fkId: {type: string}, label: {type: string}}
  queries:
    byFkId:
      arguments: [{name: idArg, type: string}]
      expression: fkId == idArg
""",
    )
    ws.data(
        "e/my/Entity/part.json",
        {"id": "e1", "fkId": "a", "label": "one"},
        {"id": "e2", "fkId": "b", "label": "two"},
        {"id": "e3", "fkId": "a", "label": "three"},
    )
    delete = {
        "operation": "DELETE",
        "source": "my.Entity",
        "target": "my.Entity",
        "query": "byFkId",
        "arguments": {"idArg": "a"},
    }
    ws.requests(request("tx-e", upsert("./data/e"), dataset="my"))
    ws.requests(request("tx-del", delete, dataset="my"))
    job = ws.run_once(spark)
    assert rows(job.layout.table("my", "my.Entity"), "id", "fkId") == [("e2", "b")]
    assert outcomes(spark, job)["tx-del"].actions[0].deleted == 2


def test_upsert_from_external_table_and_from_a_delta_path(
    spark: SparkSession, pet: Workspace
) -> None:
    external = "\n".join(
        [
            PETSTORE,
            "petstore.ExternalDogs:",
            "  type: external",
            "  location: data/external",
            "  format: json",
            "  properties: {name: {type: string}}",
        ]
    )
    pet.dataset("petstore", external)
    pet.data("external/part.json", {"id": "dog7", "name": "Rex"})
    spark.createDataFrame([("dog8", "Fido")], "id string, name string").write.format("delta").save(
        str(pet.root / "data" / "table")
    )
    pet.requests(
        request(
            "tx-external",
            {"operation": "UPSERT", "source": "petstore.ExternalDogs", "target": "petstore.Dog"},
        ),
        request(
            "tx-delta",
            {
                "operation": "UPSERT",
                "locationUri": f"delta://{pet.root / 'data' / 'table'}",
                "target": "petstore.Dog",
            },
        ),
    )
    job = pet.run_once(spark)
    assert rows(job.layout.table("petstore", "petstore.Dog"), "id", "version", "name") == [
        ("dog7", 1, "Rex"),
        ("dog8", 1, "Fido"),
    ]


def test_insert_record_and_delete_record(spark: SparkSession, ws: Workspace) -> None:
    ws.dataset(
        "logs",
        """\
logs.Event:
  type: record
  properties: {kind: {type: string}, n: {type: integer}}
  queries:
    ofKind:
      arguments: [{name: wanted, type: string}]
      expression: kind == wanted
""",
    )
    ws.data("ev/logs/Event/part.json", {"kind": "a", "n": 1}, {"kind": "b", "n": 2})
    insert = {"operation": "INSERT_RECORD", "locationUri": "./data/ev", "format": "JSON"}
    ws.requests(
        request("tx-ins1", insert, dataset="logs"),
        request("tx-ins2", insert, dataset="logs"),
        request(
            "tx-del",
            {
                "operation": "DELETE_RECORD",
                "target": "logs.Event",
                "query": "ofKind",
                "arguments": {"wanted": "a"},
            },
            dataset="logs",
        ),
    )
    job = ws.run_once(spark)
    assert rows(job.layout.table("logs", "logs.Event"), "kind", "n") == [("b", 2), ("b", 2)]
    found = outcomes(spark, job)
    assert found["tx-ins2"].actions[0].inserted == 2
    assert found["tx-del"].actions[0].deleted == 2


def test_source_in_another_dataset(spark: SparkSession, pet: Workspace) -> None:
    pet.dataset("shelter", "shelter.Arrival:\n  properties: {name: {type: string}}\n")
    pet.data("arrivals/shelter/Arrival/part.json", {"id": "dog5", "name": "Bella"})
    pet.requests(
        request("tx-arrivals", upsert("./data/arrivals"), dataset="shelter"),
        request(
            "tx-copy",
            {
                "operation": "UPSERT",
                "source": "shelter.Arrival",
                "sourceDatasetId": "shelter",
                "target": "petstore.Dog",
            },
        ),
    )
    job = pet.run_once(spark)
    assert rows(job.layout.table("petstore", "petstore.Dog"), "id", "name") == [("dog5", "Bella")]


def test_invalid_second_action_applies_nothing(spark: SparkSession, pet: Workspace) -> None:
    pet.data("dogs/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby"})
    pet.requests(
        request(
            "tx-bad",
            upsert("./data/dogs"),
            {"operation": "UPSERT", "target": "petstore.Dog", "source": "petstore.Nope"},
        )
    )
    job = pet.run_once(spark)
    bad = outcomes(spark, job)["tx-bad"]
    assert bad.status is Status.REJECTED and bad.error is not None
    assert bad.error.code == "UNKNOWN_SCHEMA"
    assert rows(job.layout.table("petstore", "petstore.Dog"), "id") == []


HOSTILE = ("x' OR '1'='1", "1; DROP TABLE dog --", "Lassie' --")


def test_sql_looking_arguments_match_as_plain_values(spark: SparkSession, pet: Workspace) -> None:
    """``${arg}`` (a Spark parameter) and a query argument (a literal): matched as values. Each
    hostile value has a dog of that name and a DELETE of each kind in one job: were one read as
    SQL, it would delete Scooby and Lassie too (``OR '1'='1``, a comment cutting the condition)
    or fail the batch (``DROP``). (Three runs, one a value, until 2026-12-07: 56 s of the suite.)"""
    pet.data(
        "dogs/petstore/Dog/part.json",
        {"id": "dog1", "name": "Scooby"},
        {"id": "dog2", "name": "Lassie"},
        *({"id": f"hostile{n}", "name": hostile} for n, hostile in enumerate(HOSTILE)),
    )
    pet.requests(
        request("tx-dogs", upsert("./data/dogs")),
        seed_dog_changes(pet),
        *(
            request(
                f"tx-query-{n}",
                {
                    "operation": "DELETE",
                    "target": "petstore.Dog",
                    "source": "petstore.DogQuery",
                    "arguments": {"name": hostile},
                },
            )
            for n, hostile in enumerate(HOSTILE)
        ),
        *(
            request(
                f"tx-named-{n}",
                {
                    "operation": "DELETE",
                    "target": "petstore.DogChange",
                    "source": "petstore.DogChange",
                    "query": "withStatus",
                    "arguments": {"inputStatus": hostile},
                },
            )
            for n, hostile in enumerate(HOSTILE)
        ),
    )
    job = pet.run_once(spark)
    found = outcomes(spark, job)
    assert {tid: o.status for tid, o in found.items()} == {
        tid: Status.COMMITTED
        for tid in [
            "tx-dogs",
            "tx-changes",
            *(f"tx-{kind}-{n}" for kind in ("query", "named") for n in range(len(HOSTILE))),
        ]
    }
    # each DELETE by DogQuery removed exactly its own hostile dog
    assert [found[f"tx-query-{n}"].actions[0].deleted for n in range(len(HOSTILE))] == [1, 1, 1]
    assert rows(job.layout.table("petstore", "petstore.Dog"), "id") == [("dog1",), ("dog2",)]
    # no DogChange has a hostile status: each named-query DELETE selected nothing
    assert [found[f"tx-named-{n}"].actions[0].skipped for n in range(len(HOSTILE))] == [0, 0, 0]
    assert len(rows(job.layout.table("petstore", "petstore.DogChange"), "id")) == 3
    ledger = read_table(spark, job.layout.ledger)
    assert ledger.where(F.col("transaction_id").startswith("tx-named-")).count() == len(HOSTILE)
