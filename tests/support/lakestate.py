"""What the job's Delta tables hold, read with delta-rs (the independent reader), as the
end-to-end tests compare it with a source database: the rows of each object table, at its latest
version or at the versions the ledger recorded for a batch (the consistent read after it).

    state = delta_state(warehouse, {"shop.Customer": ("name", "balance")})
    after = consistent(warehouse, COLUMNS)   # as of the last batch the ledger holds
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import deltalake

__all__ = ["State", "consistent", "delta_state", "source_state", "versions_per_batch"]

State = dict[str, dict[str, tuple[Any, ...]]]
"""schema → id → the row's values (the columns asked for), in Python's types."""

Value = Callable[[str, Any], Any]
"""(column, value as delta-rs read it) → the value compared."""


def _as_read(_: str, value: Any) -> Any:
    return value


def delta_state(
    warehouse: Path,
    columns: Mapping[str, Sequence[str]],
    versions: Mapping[str, int] | None = None,
    *,
    value: Value = _as_read,
    dataset: str = "shop",
) -> State:
    """Each schema's rows (``columns``: schema → the columns compared) at ``versions``
    (schema → version; a schema not named: version 0; None: the latest). A table not created
    yet holds no rows."""
    state: State = {}
    for schema, names in columns.items():
        path = warehouse / dataset / Path(*schema.split("."))
        version = None if versions is None else versions.get(schema, 0)
        rows = (
            deltalake.DeltaTable(str(path), version=version).to_pyarrow_table().to_pylist()
            if path.exists()
            else []
        )
        state[schema] = {r["id"]: tuple(value(c, r[c]) for c in names) for r in rows}
    return state


def source_state(
    read_table: Callable[[str], Sequence[Mapping[str, Any]]],
    tables: Mapping[str, str],
    columns: Mapping[str, Sequence[str]],
    *,
    value: Value = _as_read,
) -> State:
    """The source database's side, in the same terms: each schema's rows (``tables``: schema →
    ``<db schema>.<table>``; ``read_table``: a table's rows by its name), ids as text."""
    state: State = {}
    for schema, table in tables.items():
        rows = read_table(table.split(".")[1])
        state[schema] = {str(r["id"]): tuple(value(c, r[c]) for c in columns[schema]) for r in rows}
    return state


def versions_per_batch(warehouse: Path) -> dict[int, dict[str, int]]:
    """batch → schema → the version the ledger recorded for it by that batch (the consistent
    read after the batch: the highest version of each table over the batches up to it)."""
    ledger = deltalake.DeltaTable(str(warehouse / "_system" / "transactions"))
    by_batch: dict[int, dict[str, int]] = {}
    for row in ledger.to_pyarrow_table().to_pylist():
        versions = by_batch.setdefault(row["batch_id"], {})
        for schema, version in json.loads(row["table_versions"]).items():
            versions[schema] = max(versions.get(schema, 0), version)
    running: dict[str, int] = {}
    out: dict[int, dict[str, int]] = {}
    for batch in sorted(by_batch):
        for schema, version in by_batch[batch].items():
            running[schema] = max(running.get(schema, 0), version)
        out[batch] = dict(running)
    return out


def consistent(
    warehouse: Path, columns: Mapping[str, Sequence[str]], *, value: Value = _as_read
) -> State | None:
    """The tables as of the last batch the ledger holds (None before the first)."""
    if not (warehouse / "_system" / "transactions").exists():
        return None
    batches = versions_per_batch(warehouse)
    if not batches:
        return None
    return delta_state(warehouse, columns, batches[max(batches)], value=value)
