"""A job's empty tables made once per test session and copied into each fresh warehouse.

``runtime.job.prepare_tables`` creates every table a job writes at its startup: ~20 Delta
commits, ~2.3 s of a warm session for the petstore dataset — paid again by each of the ~150
in-process tests that create a job on a new warehouse. ``CachedPreparation`` replaces it in those
tests (tests/conftest.py): the first time a set of definitions (and the settings that shape the
tables) is prepared, the real ``prepare_tables`` makes its tables in a template folder; for a
fresh local warehouse the template's files are then copied in (new files, so new modification
times: Delta reads a commit's time from its file) and the real ``prepare_tables`` runs over them
— it plans the evolution and finds every table there, so it creates none. A warehouse that holds
anything already (an upgrade, a restart, a second job on the same folder), or one that is not a
local path, gets the real ``prepare_tables`` alone; so does one the copy cannot be written to
(a read-only or full store: the startup then fails as a user's would, naming Delta's error).

Every table copied was made by the product's own code, and the copies differ from tables made in
place only in their Delta table id (the template's, shared by the copies: nothing here reads it).
Table creation itself stays proven where it runs for real: every ``cdc`` process (crashes,
stops, the demo, the cluster, S3) and wherever a job starts on a used warehouse (evolving
definitions, upgrades, restarts)."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from streaming.core.catalog import Dataset
from streaming.core.layout import Layout

__all__ = ["CachedPreparation"]

Prepare = Callable[..., None]
DONE = ".prepared"
"""Written in a template once its tables are all made: a failed preparation leaves no template."""


class CachedPreparation:
    """``prepare_tables`` with a template per set of definitions under ``root``."""

    def __init__(self, real: Prepare, root: Path) -> None:
        self.real = real
        self.root = root
        self._lock = threading.Lock()  # jobs created side by side (tests/support/side_by_side.py)

    def __call__(
        self,
        spark: SparkSession,
        datasets: Mapping[str, Dataset],
        layout: Layout,
        **options: Any,
    ) -> None:
        warehouse = Path(layout.warehouse)
        if "://" in layout.warehouse or (warehouse.exists() and any(warehouse.iterdir())):
            self.real(spark, datasets, layout, **options)
            return
        template = self.root / _key(datasets, options)
        with self._lock:
            if not (template / DONE).exists():
                shutil.rmtree(template, ignore_errors=True)  # a preparation that failed before
                made = Layout(str(template / "warehouse"), str(template / "checkpoints"))
                self.real(spark, datasets, made, **options)
                (template / DONE).touch()
            try:
                shutil.copytree(
                    template / "warehouse",
                    warehouse,
                    dirs_exist_ok=True,
                    copy_function=shutil.copyfile,
                )
            except OSError:  # a store a test made unwritable: met as a user's startup meets it
                shutil.rmtree(warehouse, ignore_errors=True)
        self.real(spark, datasets, layout, **options)


def _key(datasets: Mapping[str, Dataset], options: Mapping[str, Any]) -> str:
    """What shapes the tables: every definition and the options (deletion vectors, a change
    feed's system table, the tables' properties)."""
    text = json.dumps(
        {
            "datasets": {name: d.model_dump(mode="json") for name, d in sorted(datasets.items())},
            "options": {k: options[k] for k in sorted(options)},
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]
