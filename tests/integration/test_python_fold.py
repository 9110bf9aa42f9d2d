"""A schema with a map-typed property keeps the Python fold for large change sets (maps do not
compare in SQL, ``streaming.apply.sqlfold.supported``): through the large path it gives what the
driver fold gives — rows, versions, hashes, history and counts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.apply import objects as apply_module
from streaming.core.layout import Layout
from tests.integration.test_upsert_landing import outcomes
from tests.support import Workspace, request, upsert

pytestmark = pytest.mark.spark

DOG = """\
petstore.Dog:
  properties:
    name:
      type: string
    tags:
      type: map
      values:
        type: string
"""


def _run(spark: SparkSession, root: Path, *, large: bool) -> dict[str, Any]:
    sql_folds: list[bool] = []

    def fold_rows(*args: Any, **kwargs: Any) -> Any:
        sql_folds.append(True)
        raise AssertionError("a schema with a map property must not reach the SQL fold")

    with pytest.MonkeyPatch.context() as patch:
        if large:
            patch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)
        patch.setattr(apply_module, "fold_rows", fold_rows)
        ws = Workspace(root)
        ws.dataset("petstore", DOG)
        ws.data(
            "one/petstore/Dog/part.json",
            {"id": "d1", "name": "Rex", "tags": {"colour": "brown"}},
            {"id": "d2", "name": "Fido", "tags": {"size": "small", "age": "3"}},
        )
        ws.data(
            "two/petstore/Dog/part.json",
            {"id": "d1", "name": "Rex", "tags": {"colour": "black"}},  # the map changed
            {"id": "d2", "name": "Fido", "tags": {"age": "3", "size": "small"}},  # the same map
            {"id": "d3", "name": "Lassie", "tags": None},
        )
        ws.requests(request("t1", upsert("./data/one")))
        ws.requests(request("t2", upsert("./data/two")))
        job = ws.run_once(spark, ws.config(landing={"transactions": "./landing/transactions"}))
    layout: Layout = job.layout
    current = deltalake.DeltaTable(layout.table("petstore", "petstore.Dog"))
    history = deltalake.DeltaTable(layout.history("petstore", "petstore.Dog"))
    counts = {
        key: (o.actions[0].inserted, o.actions[0].updated, o.actions[0].unchanged)
        for key, o in outcomes(spark, layout).items()
    }
    return {
        "sql_folds": sql_folds,
        "current": sorted(
            (r["id"], r["version"], r["name"], sorted(r["tags"] or []), r["hash"])
            for r in current.to_pyarrow_table().to_pylist()
        ),
        "history": sorted(
            (r["id"], r["version"], r["__op"], r["hash"])
            for r in history.to_pyarrow_table().to_pylist()
        ),
        "counts": sorted(counts.values()),
    }


def test_a_map_property_folds_in_python_workers_as_on_the_driver(
    spark: SparkSession, tmp_path: Path
) -> None:
    large = _run(spark, tmp_path / "large", large=True)
    small = _run(spark, tmp_path / "small", large=False)
    assert large == small
    assert large["sql_folds"] == []
    assert [row[:3] for row in large["current"]] == [
        ("d1", 2, "Rex"),
        ("d2", 1, "Fido"),
        ("d3", 1, "Lassie"),
    ]
    assert large["counts"] == [(1, 1, 1), (2, 0, 0)]
    # The hash is taken with the map's entries in key order, whatever order they came in.
    fido = {"name": "Fido", "tags": {"age": "3", "size": "small"}}
    digest = hashlib.sha256(json.dumps(fido, separators=(",", ":")).encode()).hexdigest()
    assert large["current"][1][4] == digest
