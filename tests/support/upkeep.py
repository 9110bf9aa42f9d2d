"""What the upkeep tests share (tests/integration/test_upkeep.py, and the crash in the middle of
upkeep in tests/integration/test_crash_points.py): a run of small transactions on ``DOG`` and
the tables it writes, read back with delta-rs."""

from __future__ import annotations

import deltalake

from tests.support import Workspace, request, upsert

TABLES = {
    "current": ("petstore", "petstore", "Dog"),
    "history": ("petstore", "_history", "petstore", "Dog"),
    "tombstones": ("petstore", "_tombstones", "petstore", "Dog"),
    "ledger": ("_system", "transactions"),
    "outcomes": ("_system", "outcomes"),
    "quarantine": ("_system", "quarantine"),
}


def table(ws: Workspace, name: str) -> deltalake.DeltaTable:
    return deltalake.DeltaTable(str(ws.root.joinpath("warehouse", *TABLES[name])))


def transactions(ws: Workspace, count: int, per_file: int = 1) -> dict[str, str | None]:
    """``count`` transactions, ``per_file`` to a landing file (a batch each, at
    ``max_files_per_trigger: 1``): upserts of two dogs (one new, one renamed), every third a
    delete of an earlier dog. The dogs' expected names (None: deleted)."""
    expected: dict[str, str | None] = {}
    lines: list[str] = []
    for n in range(count):
        tid = f"tx-{n:02d}"
        if n % 3 == 2:
            ws.data(f"{tid}/petstore/Dog/part.json", {"id": f"dog-{n - 2:02d}"})
            action = {"operation": "DELETE", "locationUri": f"./data/{tid}", "format": "JSON"}
            expected[f"dog-{n - 2:02d}"] = None
        else:
            rows = [{"id": f"dog-{n:02d}", "name": f"Rex {n}"}, {"id": "dog-keep", "name": f"K{n}"}]
            ws.data(f"{tid}/petstore/Dog/part.json", *rows)
            action = upsert(f"./data/{tid}")
            expected.update({r["id"]: r["name"] for r in rows})
        lines.append(request(tid, action))
        if len(lines) == per_file or n == count - 1:
            ws.requests(*lines)
            lines = []
    return expected


def live_rows(ws: Workspace) -> dict[str, str]:
    rows = table(ws, "current").to_pyarrow_table(columns=["id", "name"]).to_pylist()
    return {r["id"]: r["name"] for r in rows}


def committed_once(ws: Workspace, count: int) -> None:
    outcomes = table(ws, "outcomes").to_pyarrow_table().to_pylist()
    assert sorted((o["transaction_id"], o["status"]) for o in outcomes) == [
        (f"tx-{n:02d}", "COMMITTED") for n in range(count)
    ]
    ledger = table(ws, "ledger").to_pyarrow_table(columns=["transaction_id"]).to_pylist()
    assert sorted(r["transaction_id"] for r in ledger) == [f"tx-{n:02d}" for n in range(count)]
