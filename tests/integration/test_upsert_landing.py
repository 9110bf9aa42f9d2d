"""Seed 000's first example (UPSERT from a location), end to end through the landing folder.

Real Spark, real Delta tables; delta-rs reads the results as an independent Delta reader.
"""

from __future__ import annotations

import json

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.cli.main import main
from streaming.core.layout import Layout
from streaming.core.outcomes import Outcome, Status
from streaming.storage.tables import read_table
from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG

pytestmark = pytest.mark.spark

SEED_ROWS = [
    {"id": "dog1", "name": "Scooby"},
    {"id": "dog2", "name": "Lassie"},
    {"id": "dog3", "name": "Clifford"},
]
SEED_RESULT = [("dog1", 2, "Scooby"), ("dog2", 1, "Lassie"), ("dog3", 1, "Clifford")]


def rows_by_delta_rs(path: str, *columns: str) -> list[tuple[object, ...]]:
    table = deltalake.DeltaTable(path).to_pyarrow_table(columns=list(columns)).to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in table)


def outcomes(spark: SparkSession, layout: Layout) -> dict[str, Outcome]:
    """Each outcome row by ``<transaction id>@<batch id>``; two rows of one key fail."""
    rows = read_table(spark, layout.outcomes).orderBy("batch_id").collect()
    keys = [f"{r['transaction_id']}@{r['batch_id']}" for r in rows]
    found = {key: Outcome.from_json(r["outcome"]) for key, r in zip(keys, rows, strict=True)}
    assert len(found) == len(rows), sorted(keys)
    return found


def seed_workspace(ws: Workspace) -> None:
    ws.dataset("petstore", DOG)
    ws.data("ingest0/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby Doo"})
    ws.data("ingest1/petstore/Dog/anyfile.json", *SEED_ROWS)


def test_seed_upsert_from_s3_location_example(spark: SparkSession, ws: Workspace) -> None:
    """Pre-existing dog1 v1 "Scooby Doo"; UPSERT dog1/dog2/dog3 → dog1 v2, dog2 v1, dog3 v1."""
    seed_workspace(ws)
    ws.requests(request("tx-0000", upsert("./data/ingest0")))
    job = ws.run_once(spark)
    dogs = job.layout.table("petstore", "petstore.Dog")
    assert rows_by_delta_rs(dogs, "id", "version", "name") == [("dog1", 1, "Scooby Doo")]

    ws.requests(request("tx-0001", upsert("./data/ingest1")))
    job = ws.run_once(spark)
    assert rows_by_delta_rs(dogs, "id", "version", "name") == SEED_RESULT
    outcome = outcomes(spark, job.layout)["tx-0001@1"]
    assert outcome.status is Status.COMMITTED
    (action,) = outcome.actions
    assert (action.target, action.inserted, action.updated, action.unchanged) == (
        "petstore.Dog",
        2,
        1,
        0,
    )
    assert outcome.table_versions == {"petstore.Dog": deltalake.DeltaTable(dogs).version()}

    history = job.layout.history("petstore", "petstore.Dog")
    assert rows_by_delta_rs(history, "id", "version", "name", "__op", "__transaction_id") == [
        ("dog1", 1, "Scooby Doo", "i", "tx-0000"),
        ("dog1", 2, "Scooby", "u", "tx-0001"),
        ("dog2", 1, "Lassie", "i", "tx-0001"),
        ("dog3", 1, "Clifford", "i", "tx-0001"),
    ]
    meta = deltalake.DeltaTable(dogs).to_pyarrow_table().to_pylist()
    created = {r["id"]: (r["created"], r["updated"]) for r in meta}
    assert created["dog1"][0] < created["dog1"][1]  # created kept, updated moved
    assert created["dog2"][0] == created["dog2"][1]
    assert all(len(r["hash"]) == 64 for r in meta)


def test_seed_upsert_grouped_in_one_batch_equals_one_at_a_time(
    spark: SparkSession, ws: Workspace
) -> None:
    seed_workspace(ws)
    ws.requests(request("tx-0000", upsert("./data/ingest0")))
    ws.requests(request("tx-0001", upsert("./data/ingest1")))
    job = ws.run_once(spark)
    assert len(job.sink.history) == 1  # both transactions in one micro-batch
    dogs = job.layout.table("petstore", "petstore.Dog")
    assert rows_by_delta_rs(dogs, "id", "version", "name") == SEED_RESULT
    found = outcomes(spark, job.layout)
    assert found["tx-0000@0"].actions[0].inserted == 1
    assert (found["tx-0001@0"].actions[0].inserted, found["tx-0001@0"].actions[0].updated) == (2, 1)


def test_resent_transaction_is_duplicate_and_changes_nothing(
    spark: SparkSession, ws: Workspace
) -> None:
    seed_workspace(ws)
    ws.requests(request("tx-0001", upsert("./data/ingest1")))
    job = ws.run_once(spark)
    dogs = job.layout.table("petstore", "petstore.Dog")
    version = deltalake.DeltaTable(dogs).version()

    ws.requests(request("tx-0001", upsert("./data/ingest1")))
    job = ws.run_once(spark)
    assert deltalake.DeltaTable(dogs).version() == version
    dup = outcomes(spark, job.layout)["tx-0001@1"]
    assert dup.status is Status.DUPLICATE
    assert dup.actions[0].inserted == 3  # the original outcome's counts are repeated


def test_transaction_id_reused_with_other_content_is_rejected(
    spark: SparkSession, ws: Workspace
) -> None:
    seed_workspace(ws)
    ws.requests(request("tx-0001", upsert("./data/ingest1")))
    ws.run_once(spark)
    ws.requests(request("tx-0001", upsert("./data/ingest0")))
    job = ws.run_once(spark)
    reused = outcomes(spark, job.layout)["tx-0001@1"]
    assert reused.status is Status.REJECTED
    assert reused.error is not None and reused.error.code == "TRANSACTION_ID_REUSED"
    dogs = job.layout.table("petstore", "petstore.Dog")
    assert ("dog1", 1, "Scooby") in rows_by_delta_rs(dogs, "id", "version", "name")


def test_malformed_line_is_rejected_and_quarantined_while_other_lines_commit(
    spark: SparkSession, ws: Workspace
) -> None:
    seed_workspace(ws)
    broken = '{"transactionId": "tx-broken", "actions": ['
    ws.requests(
        request("tx-0000", upsert("./data/ingest0")),
        broken,
        request("tx-0001", upsert("./data/ingest1")),
    )
    job = ws.run_once(spark)
    found = outcomes(spark, job.layout)
    assert found["tx-broken@0"].status is Status.REJECTED
    assert found["tx-broken@0"].error is not None
    assert found["tx-broken@0"].error.code == "INVALID_JSON"
    assert found["tx-broken@0"].source.endswith("0001.jsonl:2")
    assert found["tx-0001@0"].status is Status.COMMITTED
    dogs = job.layout.table("petstore", "petstore.Dog")
    assert rows_by_delta_rs(dogs, "id", "version", "name") == SEED_RESULT
    quarantined = deltalake.DeltaTable(job.layout.quarantine).to_pyarrow_table().to_pylist()
    assert [(q["error_code"], q["payload"]) for q in quarantined] == [
        ("INVALID_JSON", broken.encode())
    ]


def test_cli_show_and_results_read_what_the_job_wrote(
    spark: SparkSession, ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_workspace(ws)
    cfg = ws.config()
    ws.requests(request("tx-0000", upsert("./data/ingest0")))
    ws.run_once(spark, cfg)
    ws.requests(request("tx-0001", upsert("./data/ingest1")))
    ws.run_once(spark, cfg)
    config_file = ws.root / "cdc.yaml"
    config_file.write_text(cfg.model_dump_json())
    capsys.readouterr()

    assert main(["show", "petstore", "petstore.Dog", "--config", str(config_file), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["id"], r["version"], r["name"]) for r in rows] == SEED_RESULT

    assert (
        main(["show", "petstore", "petstore.Dog", "--config", str(config_file), "--version", "1"])
        == 0
    )
    table = capsys.readouterr().out
    assert "Scooby Doo" in table and "Lassie" not in table  # time travel to tx-0000's commit

    assert (
        main(["show", "petstore", "petstore.Dog", "--history", "--config", str(config_file)]) == 0
    )
    assert capsys.readouterr().out.count("| dog1 ") == 2

    assert main(["results", "--config", str(config_file)]) == 0
    printed = capsys.readouterr().out
    assert "tx-0000" in printed and "petstore.Dog +2 ~1 -0 =0 skip 0" in printed
