"""A schema with a map-typed property keeps the Python fold for large change sets (maps do not
compare in SQL, ``streaming.apply.sqlfold.supported``): through the large path it runs in Python
workers (``mapInArrow``), which every change of the batch reaches, and gives what the driver
fold gives — rows, versions, hashes, history and counts."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.apply import objects as apply_module
from streaming.core.layout import Layout
from streaming.core.outcomes import Outcome
from streaming.storage.tables import read_table
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


def _outcomes(spark: SparkSession, layout: Layout) -> list[Outcome]:
    return [Outcome.from_json(r["outcome"]) for r in read_table(spark, layout.outcomes).collect()]


def _in_workers(marks: Path) -> Callable[..., Any]:
    """``_Folder.partitions`` that also leaves, from the process that runs the fold of a
    partition, a file ``<pid>-<n>`` in ``marks`` holding the number of rows it was given: a mark
    only the process running ``mapInArrow``'s function leaves."""
    partitions = apply_module._Folder.partitions
    folder = str(marks)

    def spied(self: Any, out: Any) -> Any:
        run = partitions(self, out)

        def counted(batches: Iterator[Any]) -> Iterator[Any]:
            import os
            import uuid

            rows = 0

            def each() -> Iterator[Any]:
                nonlocal rows
                for batch in batches:
                    rows += batch.num_rows
                    yield batch

            yield from run(each())
            name = f"{os.getpid()}-{uuid.uuid4().hex}"
            with open(os.path.join(folder, name), "w") as mark:
                mark.write(str(rows))

        return counted

    return spied


def _run(spark: SparkSession, root: Path, *, large: bool) -> dict[str, Any]:
    sql_folds: list[bool] = []
    marks = root / "python-workers"
    marks.mkdir(parents=True)

    def fold_rows(*args: Any, **kwargs: Any) -> Any:
        sql_folds.append(True)
        raise AssertionError("a schema with a map property must not reach the SQL fold")

    with pytest.MonkeyPatch.context() as patch:
        if large:
            patch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)
        patch.setattr(apply_module, "fold_rows", fold_rows)
        patch.setattr(apply_module._Folder, "partitions", _in_workers(marks))
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
    counts = [
        (o.actions[0].inserted, o.actions[0].updated, o.actions[0].unchanged)
        for o in _outcomes(spark, layout)
    ]
    return {
        "python_workers": sorted(
            (int(mark.name.split("-")[0]), int(mark.read_text())) for mark in marks.iterdir()
        ),
        "sql_folds": sql_folds,
        "current": sorted(
            (r["id"], r["version"], r["name"], sorted(r["tags"] or []), r["hash"])
            for r in current.to_pyarrow_table().to_pylist()
        ),
        "history": sorted(
            (r["id"], r["version"], r["__op"], r["hash"])
            for r in history.to_pyarrow_table().to_pylist()
        ),
        "counts": sorted(counts),
    }


def test_a_map_property_folds_in_python_workers_as_on_the_driver(
    spark: SparkSession, tmp_path: Path
) -> None:
    large = _run(spark, tmp_path / "large", large=True)
    small = _run(spark, tmp_path / "small", large=False)
    # The large path's fold ran in Python workers (processes other than this driver), and all
    # five changes of the batch went through it; the driver fold started none.
    workers = large.pop("python_workers")
    assert workers and all(pid != os.getpid() for pid, _ in workers), workers
    assert sum(rows for _, rows in workers) == 5, workers
    assert small.pop("python_workers") == []
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
