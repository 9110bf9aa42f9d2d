"""The batch's SCD2 tables merged (``apply.scd2``) once its current tables are all written,
before the ledger records their versions; the history appends that can go beside them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial

from pyspark.sql import SparkSession

from streaming.apply.objects import TableResult
from streaming.apply.scd2 import merge_scd2
from streaming.core.catalog import SchemaDef
from streaming.runtime.batch.apply import HistoryItem, union
from streaming.runtime.batch.record import call, history_append
from streaming.runtime.batch.state import SinkState
from streaming.runtime.batch.wiring import SinkWiring
from streaming.storage.commits import BatchCommit

__all__ = ["merge_scd2_tables", "scd2_schemas"]


def merge_scd2_tables(
    wiring: SinkWiring,
    state: SinkState,
    history: Sequence[HistoryItem],
    commit: BatchCommit,
) -> tuple[dict[tuple[str, str], int], list[HistoryItem]]:
    """One MERGE per SCD2 table of the batch's history rows (``apply.scd2``), before the
    ledger records its version: (dataset, schema) → the SCD2 table's version after it, and
    the history items still to append (``batch.record``).

    The MERGEs of SCD2 tables whose rows were all folded on the driver run side by side,
    each in a session of the pool (their sources are rows computed there), with the history
    appends (independent writes, once per batch each: none is left to ``batch.record``). The
    other MERGEs then one after the other, each through the session its rows come from (the
    MERGE's idempotency keys are that session's conf)."""
    parts: dict[str, list[TableResult]] = defaultdict(list)
    for result, paths, _ in history:
        if paths.scd2 is not None and result.history is not None:
            parts[paths.scd2].append(result)
    schemas = scd2_schemas(wiring, state)
    on_driver = {p: all(r.on_driver for r in results) for p, results in parts.items()}

    def merge(spark: SparkSession, path: str) -> tuple[str, int]:
        rows = union([r.history for r in parts[path] if r.history is not None])
        version = merge_scd2(
            spark if on_driver[path] else rows.sparkSession,
            rows,
            schemas[path][1],
            path,
            commit,
            on_driver=on_driver[path],
        )
        return path, version

    local = sorted(p for p, driver in on_driver.items() if driver)
    rest = list(history)
    done: list[tuple[str, int]] = []
    if local:
        tasks: list[Callable[[SparkSession], tuple[str, int] | None]] = [
            *(partial(history_append, item=item) for item in rest),
            *(partial(merge, path=path) for path in local),
        ]
        done = [d for d in wiring.sessions.map(call, tasks) if d is not None]
        rest = []
    done += [merge(wiring.spark, p) for p in sorted(set(parts) - set(local))]
    versions: dict[tuple[str, str], int] = {}
    for path, version in done:
        dataset, schema = schemas[path]
        versions[(dataset, schema.name)] = version
    return versions, rest


def scd2_schemas(wiring: SinkWiring, state: SinkState) -> dict[str, tuple[str, SchemaDef]]:
    """SCD2 table path → (dataset, schema)."""
    return {
        wiring.layout.scd2(name, schema.name): (name, schema)
        for name, dataset in state.datasets.items()
        for schema in dataset.object_schemas()
        if schema.scd2 is not None
    }
