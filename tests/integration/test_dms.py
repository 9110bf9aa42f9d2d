"""DMS change files (Op = I/U/D) in the landing zone, with watermarks and tombstone keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from streaming.core.outcomes import Status
from streaming.inputs import loads as loads_module
from streaming.storage.maintain import all_tables
from tests.support import Workspace
from tests.support.dms import ORDER, Zone, config, current, dms_workspace, order, outcomes

pytestmark = pytest.mark.spark


def test_full_load_then_cdc_file_then_the_same_file_again_is_duplicate(
    spark: SparkSession, ws: Workspace
) -> None:
    zone = dms_workspace(ws)
    zone.drop(
        "sales.Order",
        "LOAD00000001.parquet",
        [order("o1", 100, "new"), order("o2", 100, "new"), order("o3", 100, "new")],
        ORDER,
    )
    job = ws.run_once(spark, config(ws))
    orders = job.layout.table("sales", "sales.Order")
    assert current(orders, "id", "version", "status") == [
        ("o1", 1, "new"),
        ("o2", 1, "new"),
        ("o3", 1, "new"),
    ]

    cdc = [
        order("o1", 200, "paid", "U"),
        order("o2", 200, "new", "D"),
        order("o4", 150, "new", "I"),
    ]
    zone.drop("sales.Order", "20240101-0001.parquet", cdc, ORDER)
    ws.run_once(spark, config(ws))
    assert current(orders, "id", "version", "status", "ts") == [
        ("o1", 2, "paid", 200),
        ("o3", 1, "new", 100),
        ("o4", 1, "new", 150),
    ]
    cdc_outcome = outcomes(spark, ws)[-1]
    assert cdc_outcome.transaction_id == "dms:sales/sales/Order/20240101-0001.parquet"
    counts = cdc_outcome.actions[0]
    assert (counts.inserted, counts.updated, counts.deleted) == (1, 1, 1)

    # Dropped again under the same name: Spark's file source lists a path once per checkpoint;
    # a fresh checkpoint (a reprocessing) sees every file again, and the ledger refuses them.
    version = deltalake.DeltaTable(orders).version()
    zone.drop("sales.Order", "20240101-0001.parquet", cdc, ORDER)
    ws.run_once(spark, ws.config(landing={"dms": "./landing/dms"}, query_name="reprocess"))
    assert deltalake.DeltaTable(orders).version() == version
    tid = "dms:sales/sales/Order/20240101-0001.parquet"
    seen = [o for o in outcomes(spark, ws) if o.transaction_id == tid]
    assert sorted(o.status.value for o in seen) == ["COMMITTED", "DUPLICATE"]
    duplicate = next(o for o in seen if o.status is Status.DUPLICATE)
    assert duplicate.actions[0].updated == 1  # the original counts


def test_out_of_order_changes_within_and_across_files_keep_the_newest(
    spark: SparkSession, ws: Workspace
) -> None:
    zone = dms_workspace(ws)
    zone.drop(
        "sales.Order",
        "a.parquet",
        [order("o1", 100, "new"), order("o5", 100, "new"), order("o6", 5, "new")],
        ORDER,
    )
    # one file: o1 three times, out of order; o5 deleted at 500
    zone.drop(
        "sales.Order",
        "b.parquet",
        [
            order("o1", 300, "shipped", "U"),
            order("o1", 200, "paid", "U"),
            order("o1", 300, "shipped-again", "U"),
            order("o5", 500, "new", "D"),
        ],
        ORDER,
    )
    # a later file with older changes: an update of o1, a late update of deleted o5, a NULL ts
    zone.drop(
        "sales.Order",
        "c.parquet",
        [
            order("o1", 250, "late", "U"),
            order("o5", 400, "resurrected?", "U"),
            order("o6", None, "null-ts", "U"),
        ],
        ORDER,
    )
    job = ws.run_once(spark, config(ws))
    orders = job.layout.object_table("sales", "sales.Order")
    assert current(orders.current, "id", "status", "ts") == [
        ("o1", "shipped-again", 300),
        ("o6", "new", 5),
    ]
    assert current(orders.tombstones, "id", "version") == [("o5", 2)]
    by_file = {
        o.transaction_id.rsplit("/", 1)[-1]: o.actions[0]
        for o in outcomes(spark, ws)
        if o.transaction_id
    }
    assert (
        by_file["b.parquet"].updated,
        by_file["b.parquet"].stale,
        by_file["b.parquet"].deleted,
    ) == (2, 1, 1)
    assert by_file["c.parquet"].stale == 3

    # the same late update in a later batch still cannot resurrect o5
    zone.drop("sales.Order", "d.parquet", [order("o5", 450, "again?", "U")], ORDER)
    ws.run_once(spark, config(ws))
    assert "o5" not in [r[0] for r in current(orders.current, "id")]
    assert outcomes(spark, ws)[-1].actions[0].stale == 1


def test_composite_watermark_and_tombstone_key(spark: SparkSession, ws: Workspace) -> None:
    zone = dms_workspace(ws)
    types = {
        "ID": pa.string(),
        "STATE": pa.string(),
        "DAY": pa.int64(),
        "SEQ": pa.int64(),
        "GONE": pa.string(),
    }

    def ship(id_: str, day: int, seq: int, state: str, gone: str = "N") -> dict[str, Any]:
        return {"ID": id_, "STATE": state, "DAY": day, "SEQ": seq, "GONE": gone}

    zone.drop(
        "sales.Shipment",
        "1.parquet",
        [ship("s1", 1, 9, "packed"), ship("s2", 1, 1, "packed")],
        types,
    )
    zone.drop(
        "sales.Shipment",
        "2.parquet",
        [
            ship("s1", 2, 0, "sent"),  # (2, 0) > (1, 9): newer
            ship("s1", 1, 10, "stale"),  # (1, 10) < (2, 0): stale
            ship("s2", 1, 2, "packed", gone="Y"),  # the tombstone key deletes it
        ],
        types,
    )
    job = ws.run_once(spark, config(ws))
    shipments = job.layout.table("sales", "sales.Shipment")
    assert current(shipments, "id", "version", "state", "day", "seq") == [("s1", 2, "sent", 2, 0)]
    # every table the job wrote is valid Delta for an independent reader
    for path in all_tables(job.layout, job.datasets):
        deltalake.DeltaTable(path).to_pyarrow_table()


def test_schema_column_format_and_mapping_apply_to_dms_files(
    spark: SparkSession, ws: Workspace
) -> None:
    ws.dataset(
        "sales",
        "sales.Item:\n  properties:\n    unitPrice: {type: integer}\n    label: {type: string}\n"
        "  columnFormat: LOWER_SNAKE\n  columnMapping: {label: ITEM_TEXT}\n",
    )
    zone = Zone(ws)
    types = {"id": pa.string(), "unit_price": pa.int64(), "ITEM_TEXT": pa.string()}
    zone.drop(
        "sales.Item", "1.parquet", [{"id": "i1", "unit_price": 7, "ITEM_TEXT": "bolt"}], types
    )
    job = ws.run_once(spark, config(ws))
    items = job.layout.table("sales", "sales.Item")
    assert current(items, "id", "unitPrice", "label") == [("i1", 7, "bolt")]


@pytest.mark.parametrize("fold", ["driver", "executors"])
def test_a_delete_newer_than_the_insert_after_it_keeps_the_key_deleted(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch, fold: str
) -> None:
    """Seed 001: the row with the largest watermark is read. A delete of a key not yet in the
    table, with a newer TS than the insert that follows it in the file, is ``skipped`` (nothing
    to delete) but its TS is kept as the key's tombstone: the older insert is ``stale``, in
    this batch and in a later one (found by the W2 benchmark's plain one-MERGE)."""
    from streaming.apply import objects as apply_module

    if fold == "executors":
        monkeypatch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)
    zone = dms_workspace(ws)
    zone.drop(
        "sales.Order",
        "20240101-0001.parquet",
        [
            order("o1", 300, "gone", "D"),
            order("o1", 100, "new", "I"),
            order("o1", 200, "paid", "U"),
            order("o2", 100, "new", "I"),
        ],
        ORDER,
    )
    job = ws.run_once(spark, config(ws))
    orders = job.layout.table("sales", "sales.Order")
    tombstones = job.layout.tombstones("sales", "sales.Order")
    assert current(orders, "id", "version") == [("o2", 1)]
    assert current(tombstones, "id", "version") == [("o1", 0)]
    counts = outcomes(spark, ws)[-1].actions[0]
    assert (counts.inserted, counts.skipped, counts.stale) == (1, 1, 2)

    zone.drop("sales.Order", "20240101-0002.parquet", [order("o1", 250, "late", "U")], ORDER)
    ws.run_once(spark, config(ws))
    assert current(orders, "id", "version") == [("o2", 1)]
    assert outcomes(spark, ws)[-1].actions[0].stale == 1

    zone.drop("sales.Order", "20240101-0003.parquet", [order("o1", 400, "back", "I")], ORDER)
    ws.run_once(spark, config(ws))
    assert current(orders, "id", "version", "status") == [("o1", 1, "back"), ("o2", 1, "new")]

    # Only a tombstone's watermark moves: the current table gets no commit.
    version = deltalake.DeltaTable(orders).version()
    zone.drop("sales.Order", "20240101-0004.parquet", [order("o7", 500, "gone", "D")], ORDER)
    ws.run_once(spark, config(ws))
    assert deltalake.DeltaTable(orders).version() == version
    assert ("o7", 0) in current(tombstones, "id", "version")
    assert outcomes(spark, ws)[-1].actions[0].skipped == 1


def _wave(spark: SparkSession, ws: Workspace, *, together: bool) -> dict[str, Any]:
    """Five DMS files of sales.Order in one batch — three of one Parquet schema, one with a
    column more, one that is not Parquet — read together where they can be or each alone."""
    read: list[list[int]] = []
    original = loads_module._read_together

    def read_together(spark: SparkSession, group: Any, reader: Any) -> Any:
        read.append(sorted(load.ordinal for load in group))
        return original(spark, group, reader)

    zone = dms_workspace(ws)
    zone.drop(
        "sales.Order",
        "1.parquet",
        [order("o1", 100, "new", "I"), order("o2", 100, "new", "I")],
        ORDER,
    )
    zone.drop(
        "sales.Order",
        "2.parquet",
        [
            order("o1", 300, "paid", "U"),
            order("o2", 200, "gone", "D"),
            order("o1", 200, "late", "U"),
        ],
        ORDER,
    )
    extra = zone.drop(
        "sales.Order", "3.parquet", [order("o3", 100, "new", "I")], {**ORDER, "NOTE": pa.string()}
    )
    (extra.parent / "4.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    zone.drop(
        "sales.Order",
        "5 b%.parquet",  # a name a URI encodes
        [order("o2", 300, "back", "U"), order("o4", 1, "new", "I")],
        ORDER,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loads_module, "_read_together", read_together)
        if not together:
            patch.setattr(
                loads_module, "_dms_together", lambda spark, loads, reader: ([], list(loads))
            )
        job = ws.run_once(spark, config(ws))
    orders = job.layout.object_table("sales", "sales.Order")
    return {
        "read together": read,
        "current": current(orders.current, "id", "version", "status", "hash"),
        "history": current(orders.history, "id", "version", "__op", "__transaction_id"),
        "tombstones": current(orders.tombstones, "id", "version"),
        "outcomes": sorted(
            (
                o.transaction_id.rsplit("/", 1)[-1],
                o.status.value,
                o.error.code if o.error else None,
                tuple(getattr(o.actions[0], e) for e in ("inserted", "updated", "deleted", "stale"))
                if o.actions
                else None,
            )
            for o in outcomes(spark, ws)
            if o.transaction_id
        ),
    }


def test_dms_files_of_one_table_and_schema_are_read_by_one_scan(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 13 item 3: a wave's DMS files of one table whose Parquet schemas are equal are read
    by one scan, each row still its own file's (transaction, order); a file of another schema
    and a file that is not Parquet are read alone, and the result is the same as reading every
    file alone."""
    together = _wave(spark, Workspace(tmp_path / "together"), together=True)
    alone = _wave(spark, Workspace(tmp_path / "alone"), together=False)
    assert len(together["read together"]) == 1 and len(together["read together"][0]) == 3
    assert alone["read together"] == []
    for part in ("current", "history", "tombstones", "outcomes"):
        assert together[part] == alone[part], part
    by_file = {name: rest for name, *rest in together["outcomes"]}
    assert by_file["4.parquet"][:2] == ["REJECTED", "UNREADABLE_DATA"]
    assert by_file["2.parquet"] == ["COMMITTED", None, (0, 1, 1, 1)]
    assert by_file["5 b%.parquet"] == ["COMMITTED", None, (2, 0, 0, 0)]
    assert [row[:3] for row in together["current"]] == [
        ("o1", 2, "paid"),
        ("o2", 3, "back"),
        ("o3", 1, "new"),
        ("o4", 1, "new"),
    ]
