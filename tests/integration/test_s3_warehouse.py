"""A warehouse on object storage: the warehouse, the checkpoints, the landing folders and the data
requests load all on ``s3a://``, served by a local S3-compatible server (moto's, a process of its
own on 127.0.0.1) — docs/deploy.md §6 as tested.

The s3a file system (hadoop-aws 3.5.0 and the AWS SDK v2 bundle, ``jars/s3``) must be on the
classpath when the JVM starts, so every Spark step runs as users run it: the ``cdc`` command in a
process of its own, with the s3a settings of deploy.md §6 in its config. delta-rs, an independent
reader, checks the tables straight from the S3 server, and the objects are listed with boto3.

Needs ``jars/s3`` (``make jars-s3``; ``make test`` fetches them, ``make test-s3`` too and runs
this file only). A pytest run without them deselects these tests (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming.core.faults import CRASH_ENV
from tests.support import request

pytestmark = pytest.mark.s3

ROOT = Path(__file__).resolve().parents[2]
S3_JARS = ROOT / "jars" / "s3"
BUCKET = "cdc-warehouse"
REGION = "us-east-1"
KEYS = {"AWS_ACCESS_KEY_ID": "cdc-test-key", "AWS_SECRET_ACCESS_KEY": "cdc-test-secret"}
JOB_TIMEOUT = 600

DATASET = """\
petstore.Dog:
  properties: {name: {type: string}, age: {type: integer}}
petstore.Cat:
  properties: {name: {type: string}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local S3-compatible server (``python -m moto.server``) with an empty bucket."""
    if not any(S3_JARS.glob("hadoop-aws-*.jar")) or not any(S3_JARS.glob("bundle-*.jar")):
        pytest.fail("jars/s3 has no hadoop-aws / AWS SDK bundle: run `make jars-s3`")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("s3server") / "moto.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the S3 server did not start: {log.read_text()}") from None
                time.sleep(0.2)
        client(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)


def client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
    )


class Bucket:
    """The test's bucket on the S3 server: objects put and listed, Delta tables read by delta-rs."""

    def __init__(self, endpoint: str, prefix: str) -> None:
        self.endpoint = endpoint
        self.s3 = client(endpoint)
        self.prefix = prefix
        self.puts = 0

    def uri(self, key: str) -> str:
        return f"s3a://{BUCKET}/{self.prefix}/{key}"

    def put(self, key: str, body: bytes) -> None:
        self.s3.put_object(Bucket=BUCKET, Key=f"{self.prefix}/{key}", Body=body)
        self.puts += 1

    def json_rows(self, key: str, *rows: dict[str, Any]) -> None:
        self.put(key, "".join(json.dumps(r) + "\n" for r in rows).encode())

    def requests(self, name: str, *lines: str) -> None:
        self.put(f"landing/transactions/{name}", "".join(f"{line}\n" for line in lines).encode())
        time.sleep(1.1)  # S3 modification times are seconds: landing files apply in that order

    def dms(self, name: str, rows: list[dict[str, Any]]) -> None:
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows), buffer)
        self.put(f"landing/dms/petstore/petstore/Cat/{name}", buffer.getvalue())
        time.sleep(1.1)

    def keys(self, under: str) -> list[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=f"{self.prefix}/{under}"
        )
        start = len(self.prefix) + 1
        return sorted(o["Key"][start:] for page in pages for o in page.get("Contents", []))

    def table(self, *parts: str) -> deltalake.DeltaTable:
        """A Delta table of the warehouse, read by delta-rs from the S3 server (no Spark)."""
        return deltalake.DeltaTable(
            f"s3://{BUCKET}/{self.prefix}/warehouse/{'/'.join(parts)}",
            storage_options={
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ALLOW_HTTP": "true",
                "AWS_REGION": REGION,
                **KEYS,
            },
        )

    def rows(self, *parts: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.table(*parts).to_pyarrow_table().to_pylist()
        return rows


def config(bucket: Bucket) -> str:
    """The job's config: everything on s3a, with the settings docs/deploy.md §6 gives."""
    return f"""\
warehouse: {bucket.uri("warehouse")}
checkpoints: {bucket.uri("checkpoints")}
datasets: {{petstore: petstore.yaml}}
landing:
  transactions: {bucket.uri("landing/transactions")}
  dms: {bucket.uri("landing/dms")}
allowed_locations: [{bucket.uri("data")}]
trigger: {{interval: 1 second}}
spark:
  shuffle_partitions: 2
  conf:
    spark.driver.extraClassPath: {S3_JARS}/*
    spark.hadoop.fs.s3a.endpoint: {bucket.endpoint}
    spark.hadoop.fs.s3a.endpoint.region: {REGION}
    spark.hadoop.fs.s3a.path.style.access: "true"
    spark.hadoop.fs.s3a.connection.ssl.enabled: "false"
"""


class Cdc:
    """The ``cdc`` command in a process of its own, in a local folder holding only the config
    and the dataset definition; credentials come from the environment (s3a's default chain)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs = 0

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != CRASH_ENV and not k.startswith("AWS_")}
        if crash_at:
            env[CRASH_ENV] = crash_at
        return {**env, **KEYS, "PYTHONPATH": str(ROOT)}

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "streaming.cli.main", *args, "--config", "cdc.yaml"]

    def __call__(self, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            cwd=self.root,
            env=self.env(crash_at),
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT,
        )

    def start(self, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        """The command in the background, in a process group of its own: ``kill`` ends the
        Python driver and the JVM it started at once, as losing the machine would (killed alone,
        the driver would leave its JVM running on for a moment)."""
        self.runs += 1
        log = self.root / f"run-{self.runs}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                self.command(*args),
                cwd=self.root,
                env=self.env(),
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        return process, log


def kill(process: subprocess.Popen[bytes]) -> int:
    """SIGKILL to the process group of a command ``Cdc.start`` started; its exit code."""
    with contextlib.suppress(ProcessLookupError):  # the whole group has ended already
        os.killpg(process.pid, signal.SIGKILL)
    return process.wait(timeout=60)


def wait_for(what: str, check: Any, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT
    while not check():
        if process.poll() is not None:
            raise AssertionError(
                f"the job ended ({process.returncode}) before {what}:\n{log.read_text()[-3000:]}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def by_id(rows: list[dict[str, Any]], *columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in ("id", *columns)) for r in rows)


def test_s3_warehouse_landing_dms_show_maintain_and_kill_restart(
    s3_endpoint: str, tmp_path: Path
) -> None:
    bucket = Bucket(s3_endpoint, "cdc")
    (tmp_path / "petstore.yaml").write_text(DATASET)
    (tmp_path / "cdc.yaml").write_text(config(bucket))
    cdc = Cdc(tmp_path)
    timings: dict[str, float] = {}
    started = [time.monotonic()]

    def lap() -> float:
        now = time.monotonic()
        spent, started[0] = now - started[0], now
        return round(spent, 1)

    # -- 1. a batch killed by SIGKILL between two table commits, then restarted --------------
    bucket.json_rows(
        "data/one/petstore/Dog/part.json",
        {"id": "dog1", "name": "Rex", "age": 3},
        {"id": "dog2", "name": "Fido", "age": 7},
    )
    bucket.json_rows("data/one/petstore/Cat/part.json", {"id": "cat1", "name": "Tom"})
    bucket.json_rows("data/two/petstore/Dog/part.json", {"id": "dog2"})
    one = {"operation": "UPSERT", "locationUri": bucket.uri("data/one"), "format": "JSON"}
    two = {"operation": "DELETE", "locationUri": bucket.uri("data/two"), "format": "JSON"}
    outside = {"operation": "UPSERT", "locationUri": "s3a://elsewhere/data", "format": "JSON"}
    bucket.requests(
        "0001.jsonl",
        request("tx-1", one),
        request("tx-2", two),
        request("tx-3", outside),
        '{"transactionId": "tx-4", ',
    )
    # No DMS file yet: the job starts on a DMS zone that is no object on S3 at all.
    dms_load = "dms:petstore/petstore/Cat/LOAD00000001.parquet"
    crashed = cdc("run", "--once", crash_at="between_commits")
    timings["cdc run --once, killed between two table commits"] = lap()
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    # Killed mid-batch: a table commit is on S3, the ledger has nothing yet.
    versions = [bucket.table("petstore", "petstore", s).version() for s in ("Dog", "Cat")]
    assert max(versions) == 1, versions
    assert bucket.rows("_system", "transactions") == []

    # -- 2. restarted as the continuous job: it finishes batch 0 first ----------------------
    job, log = cdc.start("run")
    try:
        wait_for(
            "batch 0 to be finished",
            lambda: "checkpoints/cdc/commits/0" in bucket.keys("checkpoints/cdc/commits/"),
            job,
            log,
        )
        timings["crashed batch 0 finished by the restarted job"] = lap()
        assert by_id(bucket.rows("petstore", "petstore", "Dog"), "version", "name", "age") == [
            ("dog1", 1, "Rex", 3)
        ]
        assert by_id(bucket.rows("petstore", "petstore", "Cat"), "version", "name") == [
            ("cat1", 1, "Tom")
        ]
        # Every table written once: the replay skipped the commit made before the kill.
        assert [bucket.table("petstore", "petstore", s).version() for s in ("Dog", "Cat")] == [
            1,
            1,
        ]
        outcomes = {r["transaction_id"]: r for r in bucket.rows("_system", "outcomes")}
        assert {t: (o["status"], o["batch_id"]) for t, o in outcomes.items()} == {
            "tx-1": ("COMMITTED", 0),
            "tx-2": ("COMMITTED", 0),
            "tx-3": ("REJECTED", 0),
            "tx-4": ("REJECTED", 0),
        }
        assert outcomes["tx-3"]["error_code"] == "LOCATION_NOT_ALLOWED"

        # -- 3. the continuous job killed from outside while batch 1 is in progress ----------
        bucket.json_rows(
            "data/three/petstore/Dog/part.json",
            {"id": "dog1", "name": "Rex", "age": 4},
            {"id": "dog3", "name": "Lassie", "age": 2},
        )
        three = {"operation": "UPSERT", "locationUri": bucket.uri("data/three"), "format": "JSON"}
        bucket.requests("0002.jsonl", request("tx-5", three), request("tx-1", one))
        bucket.dms(
            "LOAD00000001.parquet",
            [{"ID": "cat2", "NAME": "Felix"}, {"ID": "cat3", "NAME": "Garfield"}],
        )
        bucket.dms(
            "20261124-0001.parquet",
            [
                {"ID": "cat2", "NAME": "Felix II", "Op": "U"},
                {"ID": "cat3", "NAME": "Garfield", "Op": "D"},
            ],
        )
        wait_for(
            "batch 1 to start",
            lambda: "checkpoints/cdc/offsets/1" in bucket.keys("checkpoints/cdc/offsets/"),
            job,
            log,
        )
        assert kill(job) == -signal.SIGKILL
        timings["continuous job until killed in batch 1"] = lap()
    finally:
        kill(job)
    # The kill came while batch 1 was being applied: Spark had not recorded it as done.
    assert "checkpoints/cdc/commits/1" not in bucket.keys("checkpoints/cdc/commits/"), (
        log.read_text()
    )

    restarted = cdc("run", "--once")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    timings["cdc run --once, restarted"] = lap()

    # -- 4. nothing lost, nothing applied twice (delta-rs, from the S3 server) ---------------
    expected_dogs = [("dog1", 2, "Rex", 4), ("dog3", 1, "Lassie", 2)]
    expected_cats = [("cat1", 1, "Tom"), ("cat2", 2, "Felix II")]
    assert by_id(bucket.rows("petstore", "petstore", "Dog"), "version", "name", "age") == (
        expected_dogs
    )
    assert by_id(bucket.rows("petstore", "petstore", "Cat"), "version", "name") == expected_cats
    dog_history = bucket.rows("petstore", "_history", "petstore", "Dog")
    assert by_id(dog_history, "version", "__op", "__transaction_id") == [
        ("dog1", 1, "i", "tx-1"),
        ("dog1", 2, "u", "tx-5"),
        ("dog2", 1, "i", "tx-1"),
        ("dog2", 2, "d", "tx-2"),
        ("dog3", 1, "i", "tx-5"),
    ]
    cat_history = bucket.rows("petstore", "_history", "petstore", "Cat")
    assert by_id(cat_history, "version", "__op") == [
        ("cat1", 1, "i"),
        ("cat2", 1, "i"),
        ("cat2", 2, "u"),
        ("cat3", 1, "i"),
        ("cat3", 2, "d"),
    ]
    assert by_id(bucket.rows("petstore", "_tombstones", "petstore", "Cat"), "version") == [
        ("cat3", 2)
    ]
    dms_cdc = "dms:petstore/petstore/Cat/20261124-0001.parquet"
    ledger = sorted(r["transaction_id"] for r in bucket.rows("_system", "transactions"))
    assert ledger == sorted(["tx-1", "tx-2", "tx-5", dms_load, dms_cdc])  # once each
    status: dict[str, set[str]] = {}
    for row in bucket.rows("_system", "outcomes"):
        status.setdefault(row["transaction_id"], set()).add(row["status"])
    assert status == {
        "tx-1": {"COMMITTED", "DUPLICATE"},  # sent again in 0002.jsonl
        "tx-2": {"COMMITTED"},
        "tx-3": {"REJECTED"},
        "tx-4": {"REJECTED"},
        "tx-5": {"COMMITTED"},
        dms_load: {"COMMITTED"},
        dms_cdc: {"COMMITTED"},
    }
    assert sorted(
        (r["transaction_id"], r["error_code"]) for r in bucket.rows("_system", "quarantine")
    ) == [
        ("tx-3", "LOCATION_NOT_ALLOWED"),
        ("tx-4", "INVALID_JSON"),
    ]

    # -- 5. cdc show reads the same table through Spark and s3a ------------------------------
    timings["checks by delta-rs"] = lap()
    shown = cdc("show", "petstore", "petstore.Dog", "--json")
    timings["cdc show"] = lap()
    assert shown.returncode == 0, shown.stderr[-3000:]
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert by_id(rows, "version", "name", "age") == expected_dogs

    # -- 6. cdc maintain: OPTIMIZE compacts, VACUUM removes the files it replaced -------------
    history_files = [
        k for k in bucket.keys("warehouse/petstore/_history/petstore/Dog/") if "_delta_log" not in k
    ]
    assert len(history_files) >= 2, history_files
    maintained = cdc("maintain", "--optimize", "--vacuum", "0")
    timings["cdc maintain --optimize --vacuum 0"] = lap()
    assert maintained.returncode == 0, maintained.stderr[-3000:]
    counts = {
        cells[0]: cells[1:]
        for cells in (
            [c.strip() for c in line.strip().strip("|").split("|")]
            for line in maintained.stdout.splitlines()
            if line.startswith("| s3a://")
        )
    }
    assert counts[bucket.uri("warehouse/petstore/_history/petstore/Dog")] == [
        str(len(history_files)),
        "1",
    ], maintained.stdout
    history_files = [
        k for k in bucket.keys("warehouse/petstore/_history/petstore/Dog/") if "_delta_log" not in k
    ]
    assert len(history_files) == 1, history_files  # VACUUM deleted the compacted files on S3
    assert by_id(bucket.rows("petstore", "_history", "petstore", "Dog"), "version") == by_id(
        dog_history, "version"
    )
    assert by_id(bucket.rows("petstore", "petstore", "Dog"), "version", "name", "age") == (
        expected_dogs
    )
    assert by_id(bucket.rows("petstore", "petstore", "Cat"), "version", "name") == expected_cats

    # Nothing of the job's state went to the local folder: it is all on the S3 server.
    assert not [p for p in ("warehouse", "checkpoints", "landing") if (tmp_path / p).exists()]
    assert "checkpoints/cdc/metadata" in bucket.keys("checkpoints/cdc/")
    print("\ns3 warehouse test, seconds per step:", json.dumps(timings, indent=1))
