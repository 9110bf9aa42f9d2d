"""``cdc demo``: the seed's first example, end to end, in a temporary workspace.

1. tx-0000 upserts dog1 "Scooby Doo" (the seed's pre-existing data).
2. tx-0001 is the seed's UPSERT of dog1/dog2/dog3 from ``data/ingest1``.
3. A malformed line is REJECTED (INVALID_JSON) and quarantined; tx-0000 sent again is DUPLICATE.
4. Then a DMS change file lands: dog2 updated, dog3 deleted, dog4 inserted.
Each step is one ``cdc run --once`` over the landing folders.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from streaming.cli.display import format_table
from streaming.core.config import load_config

__all__ = ["CONFIG", "EXAMPLE_DATASET", "drop_dms_file", "run_demo", "write_workspace"]

EXAMPLE_DATASET = Path(__file__).parents[1] / "resources" / "petstore.yaml"

CONFIG = """\
warehouse: ./warehouse
checkpoints: ./checkpoints
datasets: {petstore: ./petstore.yaml}
landing: {transactions: ./landing/transactions, dms: ./landing/dms}
allowed_locations: [./data]
"""


def _request(tid: str, location: str) -> str:
    action = {"operation": "UPSERT", "locationUri": location, "format": "JSON"}
    return json.dumps({"transactionId": tid, "dataset": "petstore", "actions": [action]})


def write_workspace(root: Path) -> Path:
    """Config, dataset, data and request files of the demo; returns the config path."""
    shutil.copy(EXAMPLE_DATASET, root / "petstore.yaml")
    (root / "cdc.yaml").write_text(CONFIG)
    dogs0 = root / "data" / "ingest0" / "petstore" / "Dog"
    dogs1 = root / "data" / "ingest1" / "petstore" / "Dog"
    for folder in (dogs0, dogs1):
        folder.mkdir(parents=True)
    (dogs0 / "part-0.json").write_text('{"id": "dog1", "name": "Scooby Doo"}\n')
    (dogs1 / "anyfile.json").write_text(
        '{"id": "dog1", "name": "Scooby"}\n'
        '{"id": "dog2", "name": "Lassie"}\n'
        '{"id": "dog3", "name": "Clifford"}\n'
    )
    landing = root / "landing" / "transactions"
    landing.mkdir(parents=True)
    first = landing / "0001-initial.jsonl"
    first.write_text(_request("tx-0000", "./data/ingest0") + "\n")
    second = landing / "0002-seed-upsert.jsonl"
    second.write_text(
        _request("tx-0001", "./data/ingest1")
        + "\n"
        + '{"transactionId": "tx-broken", "actions": [\n'
        + _request("tx-0000", "./data/ingest0")
        + "\n"
    )
    os.utime(first, (1_700_000_000, 1_700_000_000))
    os.utime(second, (1_700_000_060, 1_700_000_060))
    return root / "cdc.yaml"


def drop_dms_file(root: Path) -> None:
    """A DMS CDC file for petstore.Dog (columns in UPPER case, ``Op`` = I/U/D)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = root / "landing" / "dms" / "petstore" / "petstore" / "Dog"
    folder.mkdir(parents=True, exist_ok=True)
    changes = pa.table(
        {
            "ID": ["dog2", "dog3", "dog4"],
            "NAME": ["Lassie Come Home", "Clifford", "Rex"],
            "Op": ["U", "D", "I"],
        }
    )
    pq.write_table(changes, folder / "20240101-000001.parquet")


def run_demo(workspace: Path | None = None, *, verbose: bool = False) -> None:
    from streaming.runtime.job import Job
    from streaming.runtime.session import build_session
    from streaming.storage.tables import read_table

    root = workspace or Path(tempfile.mkdtemp(prefix="cdc-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    cfg = load_config(write_workspace(root))
    spark = build_session(cfg.spark, verbose=verbose)
    job = Job.create(spark, cfg)
    print(f"demo workspace: {root}")

    def show(title: str, path: str, columns: list[str], order: list[str]) -> None:
        rows = read_table(spark, path).orderBy(*order).select(*columns).collect()
        print(f"\n{title}\n{format_table(columns, rows)}")

    job.run(once=True)
    dogs = job.layout.object_table("petstore", "petstore.Dog")
    show("petstore.Dog", dogs.current, ["id", "version", "name"], ["id"])

    drop_dms_file(root)
    job.run(once=True)
    show("petstore.Dog after the DMS file", dogs.current, ["id", "version", "name"], ["id"])
    show(
        "petstore.Dog history",
        dogs.history,
        ["id", "version", "name", "__op", "__transaction_id"],
        ["id", "version"],
    )
    show(
        "outcomes",
        job.layout.outcomes,
        ["transaction_id", "status", "error_code", "source"],
        ["batch_id", "source"],
    )
    spark.stop()
