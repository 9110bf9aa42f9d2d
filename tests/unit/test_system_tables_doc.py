"""docs/interface.md names every column of the system tables, with its type (no Spark)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql.types import StructType

from streaming.storage.schemas import LEDGER_SCHEMA, OUTCOMES_SCHEMA, QUARANTINE_SCHEMA

DOC = Path(__file__).resolve().parents[2] / "docs" / "interface.md"
ROW = re.compile(r"^\| `(?P<name>[a-z_]+)` \| (?P<type>[a-z]+) \| (?P<meaning>.+) \|$")


def documented(table: str) -> list[tuple[str, str, str]]:
    """(column, type, meaning) rows of the table under ``### `<table>` ...`` (interface.md)."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith(f"### `{table}`"))
    found: list[tuple[str, str, str]] = []
    for line in lines[heading + 1 :]:
        if line.startswith("#"):
            break
        match = ROW.match(line)
        if match:
            found.append((match["name"], match["type"], match["meaning"]))
    return found


@pytest.mark.parametrize(
    ("table", "schema"),
    [
        ("_system/transactions", LEDGER_SCHEMA),
        ("_system/outcomes", OUTCOMES_SCHEMA),
        ("_system/quarantine", QUARANTINE_SCHEMA),
    ],
)
def test_readme_names_every_column_of_the_system_tables(table: str, schema: StructType) -> None:
    rows = documented(table)
    assert [(name, type_) for name, type_, _ in rows] == [
        (f.name, f.dataType.simpleString()) for f in schema.fields
    ]
    for (name, _, meaning), field in zip(rows, schema.fields, strict=True):
        assert ("not null" in meaning) == (not field.nullable), name
