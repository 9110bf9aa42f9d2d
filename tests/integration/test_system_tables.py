"""The example in docs/interface.md that reads ``_system/outcomes`` with Spark SQL and delta-rs, run
as written against a warehouse the job filled (one COMMITTED, one REJECTED transaction)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG

pytestmark = pytest.mark.spark

DOC = Path(__file__).resolve().parents[2] / "docs" / "interface.md"
MARKER = "<!-- docs-test: system-tables -->"


def readme_example() -> str:
    text = DOC.read_text(encoding="utf-8")
    block = re.search(re.escape(MARKER) + r"\n```python\n(.*?)\n```", text, re.DOTALL)
    assert block is not None, f"docs/interface.md has no python block under {MARKER}"
    return block.group(1)


def test_readme_reads_the_outcomes_with_spark_sql_and_delta_rs(
    spark: SparkSession, ws: Workspace
) -> None:
    ws.dataset("petstore", DOG)
    ws.data("in/petstore/Dog/part.json", {"id": "dog1", "name": "Rex"}, {"id": "dog2"})
    ws.requests(
        request("tx-good", upsert("./data/in")),
        request("tx-bad", upsert("./data/in", target="petstore.Cat")),
    )
    job = ws.run_once(spark)
    warehouse = job.layout.warehouse.rstrip("/")
    code = (
        readme_example()
        .replace('"warehouse/', f'"{warehouse}/')
        .replace("`warehouse/", f"`{warehouse}/")
    )
    assert warehouse in code
    scope: dict[str, Any] = {"spark": spark}
    exec(compile(code, "docs/interface.md", "exec"), scope)

    rows = [tuple(r) for r in scope["rows"]]
    assert rows == [
        ("tx-bad", "REJECTED", "UNKNOWN_SCHEMA", 0, None),
        ("tx-good", "COMMITTED", None, 0, 2),
    ]
    events = {e["transactionId"]: e for e in scope["events"]}
    assert events["tx-good"]["actions"][0]["inserted"] == 2
    assert [e["transactionId"] for e in scope["failed"]] == ["tx-bad"]
    assert scope["failed"][0]["error"]["code"] == "UNKNOWN_SCHEMA"
