"""``cdc status`` after runs with a known mix of outcomes; the progress listener and JSON logs.

Batch 0: tx-1 COMMITTED, a malformed line REJECTED. Batch 1: tx-1 again (DUPLICATE), tx-2
COMMITTED. ``cdc status --json`` counts them, lists both batches and the ledger's latest version
of petstore.Dog, which is the table's version as delta-rs reads it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.cli.main import main
from streaming.core.config import LogConfig
from streaming.runtime.job import Job
from streaming.runtime.logs import configure_logging
from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG

pytestmark = pytest.mark.spark


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_status_counts_a_known_mix(
    spark: SparkSession,
    ws: Workspace,
    capsys: pytest.CaptureFixture[str],
    restore_logging: None,
) -> None:
    ws.dataset("petstore", DOG)
    ws.data("a/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby"})
    ws.data("b/petstore/Dog/part.json", {"id": "dog2", "name": "Lassie"})
    cfg = ws.config(log={"format": "json"})
    config_file = ws.root / "cdc.yaml"
    config_file.write_text(cfg.model_dump_json())

    configure_logging(LogConfig(format="json"))
    ws.requests(request("tx-1", upsert("./data/a")), '{"transactionId": "tx-bad", "actions": [')
    first = ws.run_once(spark, cfg)
    ws.requests(request("tx-1", upsert("./data/a")), request("tx-2", upsert("./data/b")))
    second = ws.run_once(spark, cfg)

    # The listener saw each run's batch; in JSON mode its lines carry the structured fields.
    assert [e["batchId"] for e in first.listener.entries] == [0]
    assert [e["batchId"] for e in second.listener.entries] == [1]
    assert second.listener.entries[0]["inputRows"] == 1  # one landing file
    logged = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line[:1] == "{"]
    progress = [e for e in logged if e.get("event") == "query_progress"]
    assert [e["batchId"] for e in progress] == [0, 1]
    assert {e["logger"] for e in progress} == {"streaming.runtime.observe"}, progress

    assert main(["status", "--config", str(config_file), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["outcomes"] == {"COMMITTED": 2, "REJECTED": 1, "FAILED": 0, "DUPLICATE": 1}
    assert [
        (b["batchId"], b["transactions"], b["COMMITTED"], b["REJECTED"], b["DUPLICATE"])
        for b in status["batches"]
    ] == [(1, 2, 1, 0, 1), (0, 2, 1, 1, 0)]
    assert all(b["at"] for b in status["batches"]), status["batches"]
    assert status["transactions"] == 2
    dogs = deltalake.DeltaTable(first.layout.table("petstore", "petstore.Dog"))
    assert [(t["dataset"], t["table"], t["version"], t["batchId"]) for t in status["tables"]] == [
        ("petstore", "petstore.Dog", dogs.version(), 1)
    ]

    assert main(["status", "--config", str(config_file)]) == 0
    text = capsys.readouterr().out
    assert "outcomes by status" in text and "last batches" in text
    assert "ledger: 2 committed transaction(s)" in text


def test_a_stopped_jobs_listener_hears_no_later_query(spark: SparkSession, ws: Workspace) -> None:
    """A job started with ``start`` and ended with ``stop`` leaves no listener behind: one left
    attached logged every later query of the same name a second time."""
    ws.dataset("petstore", DOG)
    ws.data("a/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby"})
    ws.data("b/petstore/Dog/part.json", {"id": "dog2", "name": "Lassie"})
    cfg = ws.config()
    ws.requests(request("tx-1", upsert("./data/a")))
    first = Job.create(spark, cfg)
    query = first.start(once=True)
    query.awaitTermination()
    first.stop(query)
    assert [e["batchId"] for e in first.listener.entries] == [0]

    ws.requests(request("tx-2", upsert("./data/b")))
    second = ws.run_once(spark, cfg)
    assert [e["batchId"] for e in second.listener.entries] == [1]
    assert [e["batchId"] for e in first.listener.entries] == [0]
