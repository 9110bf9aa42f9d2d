"""A transaction whose second table fails changes neither table; the batch's other transactions
commit (docs/architecture.md, "All or nothing": restore the segment, then isolate the failing
transaction)."""

from __future__ import annotations

import os
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core.layout import Layout
from streaming.core.outcomes import Outcome, Status
from streaming.runtime.batch import apply as apply_step
from streaming.runtime.batch.state import SinkState
from streaming.storage.tables import read_table
from tests.support import Workspace, request

pytestmark = pytest.mark.spark

DATASET = """\
petstore.Dog:
  properties: {name: {type: string}, age: {type: integer}}
petstore.Cat:
  properties: {name: {type: string}}
petstore.Zoo:
  type: view
  materialized: true
  primaryKey: [id]
  sql: SELECT name AS id, 1 / (age - age) AS total FROM @{dog}
  using: {dog: petstore.Dog}
  properties: {id: {type: string}, total: {type: integer}}
"""


def upsert(location: str) -> dict[str, Any]:
    return {"operation": "UPSERT", "locationUri": location, "format": "JSON"}


def test_second_table_failing_changes_neither_table_and_others_commit(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws.dataset("petstore", DATASET)
    ws.data("dogs/petstore/Dog/part.json", {"id": "dog1", "name": "Rex", "age": 3})
    for name in ("a", "bad", "c"):
        ws.data(f"{name}/petstore/Cat/part.json", {"id": f"cat-{name}", "name": name})
    ws.requests(request("tx-dogs", upsert("./data/dogs")))
    ws.run_once(spark)
    # Cat is written before Zoo (tables are written in path order); Zoo's SQL divides by zero.
    refresh = {"operation": "REFRESH", "target": "petstore.Zoo"}
    ws.requests(
        request("tx-a", upsert("./data/a")),
        request("tx-bad", upsert("./data/bad"), refresh),
        request("tx-c", upsert("./data/c")),
    )
    held: list[int] = []  # the batch's cached change rows when each wave is loaded
    load = apply_step.load_rows

    def spy(wiring: Any, state: SinkState, *args: Any) -> Any:
        held.append(len(state.held))
        return load(wiring, state, *args)

    monkeypatch.setattr(apply_step, "load_rows", spy)
    job = ws.run_once(spark)
    # The rows of an attempt that failed are released before the next: the whole segment's,
    # then tx-a's kept (for history) while tx-bad is tried alone, tx-bad's released.
    assert held == [0, 0, 1, 1]
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()

    cats = deltalake.DeltaTable(job.layout.table("petstore", "petstore.Cat")).to_pyarrow_table()
    assert sorted(cats.column("id").to_pylist()) == ["cat-a", "cat-c"]
    assert (
        deltalake.DeltaTable(job.layout.table("petstore", "petstore.Zoo"))
        .to_pyarrow_table()
        .num_rows
        == 0
    )
    found = {
        r["transaction_id"]: Outcome.from_json(r["outcome"])
        for r in read_table(spark, job.layout.outcomes).collect()
    }
    assert found["tx-a"].status is Status.COMMITTED and found["tx-c"].status is Status.COMMITTED
    bad = found["tx-bad"]
    assert bad.status is Status.FAILED and bad.error is not None
    assert bad.error.code == "APPLY_FAILED" and "DIVIDE_BY_ZERO" in bad.error.message
    ledger = read_table(spark, job.layout.ledger).select("transaction_id").collect()
    assert sorted(r[0] for r in ledger) == ["tx-a", "tx-c", "tx-dogs"]


# The text Spark 4.2 gave when a 1M-event batch's check ran the driver's 2g heap out (local mode;
# tests/integration/test_feed_driver_memory.py, once in three runs): before, the sink restored the
# segment and tried each of its transactions alone, marking those that met it again FAILED.
BROADCAST_OOM = (
    "An error occurred while calling o1602.collectToPython.\n"
    ": java.util.concurrent.ExecutionException: org.apache.spark.util.SparkFatalException: "
    "org.apache.spark.SparkException: Not enough memory to build and broadcast the table to all "
    "worker nodes. As a workaround, you can either disable broadcast by setting "
    "spark.sql.autoBroadcastJoinThreshold to -1 or increase the spark driver memory\n"
    "\tat org.apache.spark.sql.execution.exchange.BroadcastExchangeExec.doExecuteBroadcast"
)


def test_a_jvm_out_of_memory_fails_the_batch_not_its_transactions(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streaming.core.errors import OutOfMemory
    from streaming.inputs import loads

    ws.dataset("petstore", DATASET)
    for name in ("a", "b"):
        ws.data(f"{name}/petstore/Cat/part.json", {"id": f"cat-{name}", "name": name})
    ws.requests(request("tx-a", upsert("./data/a")), request("tx-b", upsert("./data/b")))
    check = loads.check_loads
    calls: list[int] = []

    def out_of_memory(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        raise RuntimeError(BROADCAST_OOM)

    monkeypatch.setattr(loads, "check_loads", out_of_memory)
    with pytest.raises(OutOfMemory) as raised:
        ws.run_once(spark)
    assert raised.value.code == "OUT_OF_MEMORY"
    assert "Not enough memory to build and broadcast the table" in raised.value.message
    assert "spark.driver.memory" in raised.value.message
    assert calls == [1]  # the batch stopped at once: no transaction tried alone
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()
    cfg = ws.config()
    layout = Layout(cfg.warehouse, cfg.checkpoints)
    for table in (layout.outcomes, layout.ledger):  # none FAILED, none recorded
        assert not os.path.exists(table) or not read_table(spark, table).collect()

    monkeypatch.setattr(loads, "check_loads", check)  # memory enough: the replay applies both
    job = ws.run_once(spark)
    found = {
        r["transaction_id"]: Outcome.from_json(r["outcome"]).status
        for r in read_table(spark, job.layout.outcomes).collect()
    }
    assert found == {"tx-a": Status.COMMITTED, "tx-b": Status.COMMITTED}
    cats = deltalake.DeltaTable(job.layout.table("petstore", "petstore.Cat")).to_pyarrow_table()
    assert sorted(cats.column("id").to_pylist()) == ["cat-a", "cat-b"]
