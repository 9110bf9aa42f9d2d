"""The metrics endpoint of a running job (``metrics.enabled``; streaming/runtime/metrics.py),
scraped over HTTP between micro-batches: each value is what the batches did, counted from their
outcomes, the Delta logs of the tables, the landing folder and the clock."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections import Counter
from pathlib import Path

import deltalake
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import SparkSession

from streaming.core.outcomes import Outcome, Status
from streaming.runtime.job import Job
from tests.support import Workspace, request, upsert
from tests.support.cdc import cdc_env, run_cdc
from tests.support.datasets import DOG_CAT, DOG_CAT_TABLES
from tests.support.ports import HOST, free_port, retry_on_port_clash

pytestmark = pytest.mark.spark

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(job: Job) -> Samples:
    """Every sample the job's endpoint serves now: (name, sorted labels) → value."""
    assert job.exporter is not None
    url = f"http://{HOST}:{job.exporter.port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode("utf-8")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def labelled(samples: Samples, name: str) -> dict[tuple[str, ...], float]:
    """The samples of ``name``, by their label values (in label name order)."""
    return {
        tuple(v for _, v in labels): value
        for (sample, labels), value in samples.items()
        if sample == name
    }


def versions(ws: Workspace) -> dict[str, int]:
    return {
        name: deltalake.DeltaTable(str(Path(ws.root, "warehouse", *parts))).version()
        for name, parts in DOG_CAT_TABLES.items()
    }


def commits_between(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(after[name] - before[name] for name in before)


def expected_from_outcomes(ws: Workspace) -> tuple[dict[tuple[str, ...], float], Counter[str]]:
    """What the outcomes table says the batches did: rows of COMMITTED transactions by
    (action, dataset, table), and transactions by status."""
    table = deltalake.DeltaTable(str(ws.root / "warehouse" / "_system" / "outcomes"))
    outcomes = [Outcome.from_json(r["outcome"]) for r in table.to_pyarrow_table().to_pylist()]
    rows: Counter[tuple[str, ...]] = Counter()
    for o in outcomes:
        if o.status is Status.COMMITTED:
            for a in o.actions:
                for action in ("inserted", "updated", "deleted", "unchanged", "skipped", "stale"):
                    if getattr(a, action):
                        rows[(action, o.dataset or "", a.target)] += getattr(a, action)
    return dict(rows), Counter(o.status.value for o in outcomes)


def test_a_scrape_between_batches_shows_what_they_did(spark: SparkSession, ws: Workspace) -> None:
    ws.dataset("petstore", DOG_CAT)
    ws.data(
        "one/petstore/Dog/part.json", {"id": "dog1", "name": "Rex"}, {"id": "dog2", "name": "Fido"}
    )
    ws.data("one/petstore/Cat/part.json", {"id": "cat1", "name": "Tom"})
    ws.data("two/petstore/Dog/part.json", {"id": "dog2"})
    ws.data("three/petstore/Dog/part.json", {"id": "dog1", "name": "Rex II"}, {"id": "dog3"})
    delete = {"operation": "DELETE", "locationUri": "./data/two", "format": "JSON"}
    ws.requests(
        request("tx-1", upsert("./data/one")),  # Dog: 2 inserted; Cat: 1 inserted
        request("tx-2", delete),  # Dog: 1 deleted
        '{"transactionId": "tx-3", ',  # REJECTED (INVALID_JSON)
    )

    def create() -> Job:
        metrics = {"enabled": True, "host": HOST, "port": free_port()}
        return Job.create(spark, ws.config(metrics=metrics))

    job = retry_on_port_clash(create)
    try:
        # Before any batch: nothing counted, every status there at 0, the landing file waiting.
        started = scrape(job)
        assert labelled(started, "cdc_transactions_total") == {(s.value,): 0.0 for s in Status}
        assert labelled(started, "cdc_batch_duration_seconds_count") == {(): 0.0}
        assert labelled(started, "cdc_landing_unread_files") == {("transactions",): 1.0}

        before, jobs_before, t0 = versions(ws), _next_job(spark), time.time()
        job.run(once=True)
        t1 = time.time()
        first = scrape(job)
        t2 = time.time()

        rows, statuses = expected_from_outcomes(ws)
        assert rows == {
            ("inserted", "petstore", "petstore.Dog"): 2,
            ("deleted", "petstore", "petstore.Dog"): 1,
            ("inserted", "petstore", "petstore.Cat"): 1,
        }
        assert labelled(first, "cdc_rows_total") == rows
        assert statuses == {"COMMITTED": 2, "REJECTED": 1}
        assert labelled(first, "cdc_transactions_total") == {
            (s.value,): float(statuses[s.value]) for s in Status
        }
        assert labelled(first, "cdc_batch_duration_seconds_count") == {(): 1.0}
        (seconds,) = labelled(first, "cdc_batch_duration_seconds_sum").values()
        assert float(str(job.sink.history[-1]["seconds"])) <= seconds + 0.001 <= t1 - t0 + 0.001
        commits = commits_between(before, versions(ws))
        assert commits > 0
        assert labelled(first, "cdc_delta_commits_total") == {(): commits}
        # The batch's own count (its progress line): the jobs between its start and end.
        (jobs,) = labelled(first, "cdc_spark_jobs_total").values()
        assert jobs == job.sink.history[-1]["sparkJobs"]
        assert 0 < jobs <= _next_job(spark) - jobs_before
        (last,) = labelled(first, "cdc_last_batch_timestamp_seconds").values()
        assert t0 <= last <= t1
        (since,) = labelled(first, "cdc_seconds_since_last_batch").values()
        assert t1 - last <= since <= t2 - last
        assert labelled(first, "cdc_landing_unread_files") == {("transactions",): 0.0}

        # Two files land: both wait until a batch takes them.
        ws.data("four/petstore/Cat/part.json", {"id": "cat2", "name": "Kit"})
        ws.requests(request("tx-1", upsert("./data/one")))  # again: DUPLICATE, its counts too
        ws.requests(
            request("tx-4", upsert("./data/three")),  # Dog: 1 updated, 1 inserted
            request("tx-5", upsert("./data/four")),  # Cat: 1 inserted
        )
        waiting = scrape(job)
        assert labelled(waiting, "cdc_landing_unread_files") == {("transactions",): 2.0}
        assert labelled(waiting, "cdc_seconds_since_last_batch")[()] >= since

        before = versions(ws)
        job.run(once=True)
        second = scrape(job)

        rows, statuses = expected_from_outcomes(ws)
        assert rows == {
            ("inserted", "petstore", "petstore.Dog"): 3,
            ("updated", "petstore", "petstore.Dog"): 1,
            ("deleted", "petstore", "petstore.Dog"): 1,
            ("inserted", "petstore", "petstore.Cat"): 2,
        }
        assert labelled(second, "cdc_rows_total") == rows
        assert statuses == {"COMMITTED": 4, "REJECTED": 1, "DUPLICATE": 1}
        assert labelled(second, "cdc_transactions_total") == {
            (s.value,): float(statuses[s.value]) for s in Status
        }
        assert labelled(second, "cdc_batch_duration_seconds_count") == {(): 2.0}
        added = commits_between(before, versions(ws))
        assert added > 0
        assert labelled(second, "cdc_delta_commits_total") == {(): commits + added}
        assert labelled(second, "cdc_landing_unread_files") == {("transactions",): 0.0}
        assert labelled(second, "cdc_last_batch_timestamp_seconds")[()] > last
    finally:
        job.close()
    assert job.exporter is None


def _next_job(spark: SparkSession) -> int:
    scheduler = spark.sparkContext._jsc.sc().dagScheduler()  # type: ignore[union-attr]
    return int(scheduler.nextJobId())


def test_cdc_run_with_the_metrics_port_taken_stops_at_startup_saying_what_to_do(
    ws: Workspace,
) -> None:
    """``cdc run``: exit 2 with the code and what to do; it consumed nothing (no checkpoint)."""
    ws.dataset("petstore", DOG_CAT)
    ws.requests(request("tx-1", upsert("./data/one")))
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = ws.config(metrics={"enabled": True, "host": HOST, "port": port})
        (ws.root / "cdc.json").write_text(cfg.model_dump_json())
        done = run_cdc(
            "run", "--once", "--config", "cdc.json", cwd=ws.root, env=cdc_env(drop=("CDC_",))
        )
    assert done.returncode == 2, done.stderr[-2000:]
    assert (
        f"cdc: error [METRICS_PORT_IN_USE]: metrics.port {port} on {HOST} is in use" in done.stderr
    ), done.stderr[-2000:]
    assert "set metrics.port (CDC_METRICS__PORT) to a free port" in done.stderr
    assert not (ws.root / "checkpoints").exists()
    assert not (ws.root / "warehouse").exists()
