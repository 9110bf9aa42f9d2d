"""A warehouse on object storage: the warehouse, the checkpoints, the landing folders and the data
requests load all on ``s3a://``, served by a local S3-compatible server (moto's, a process of its
own on 127.0.0.1) — docs/deploy.md §6 as tested.

The s3a file system (hadoop-aws 3.5.0 and the AWS SDK v2 bundle, ``jars/s3``) must be on the
classpath when the JVM starts, which the tests' shared session is not: every Spark step runs as
users run it, the ``cdc`` command in a process of its own, with the s3a settings of deploy.md §6
in its config — three processes: a batch killed at a named crash point (``cdc run --once``), the
continuous job that finishes it and is killed in the next batch, and one that restarts the job
(``cdc run --once``) and then, on the same JVM, runs ``cdc show`` and ``cdc maintain``. delta-rs,
an independent reader, checks the tables straight from the S3 server after each, and the objects
are listed with boto3.

Needs ``jars/s3`` (``make jars-s3``; ``make test`` fetches them, ``make test-s3`` too and runs
this file only). A pytest run without them deselects these tests (tests/conftest.py)."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import boto3
import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming.core.faults import CRASH_ENV
from tests.support import request
from tests.support.cdc import cdc_env, kill_group, run_cdc, run_cdc_steps, start_cdc, wait_until
from tests.support.datasets import DOG_CAT_TABLES
from tests.support.ports import HOST, free_port, retry_on_port_clash

pytestmark = pytest.mark.s3

ROOT = Path(__file__).resolve().parents[2]
S3_JARS = ROOT / "jars" / "s3"
BUCKET = "cdc-warehouse"
REGION = "us-east-1"
KEYS = {"AWS_ACCESS_KEY_ID": "cdc-test-key", "AWS_SECRET_ACCESS_KEY": "cdc-test-secret"}
CONFIG = ["--config", "cdc.yaml"]

DATASET = """\
petstore.Dog:
  properties: {name: {type: string}, age: {type: integer}}
petstore.Cat:
  properties: {name: {type: string}}
"""
DMS_LOAD = "dms:petstore/petstore/Cat/LOAD00000001.parquet"
DMS_CDC = "dms:petstore/petstore/Cat/20261124-0001.parquet"


def _past(second: float) -> bool:
    """Whether the clock is past ``second`` (Unix time)."""
    return time.time() >= second


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
            return True
    except OSError:
        return False


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local S3-compatible server (``python -m moto.server``) with an empty bucket, on a free
    port (another, should someone take the port before the server binds it)."""
    if not any(S3_JARS.glob("hadoop-aws-*.jar")) or not any(S3_JARS.glob("bundle-*.jar")):
        pytest.fail("jars/s3 has no hadoop-aws / AWS SDK bundle: run `make jars-s3`")
    folder = tmp_path_factory.mktemp("s3server")

    def start() -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        endpoint = f"http://{HOST}:{port}"
        log = folder / f"moto-{port}.log"
        with log.open("wb") as out:
            server = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(f"the S3 server on {endpoint}", lambda: _answers(endpoint), server, log, 60)
        except BaseException:
            _stop(server)
            raise
        return server, endpoint

    server, endpoint = retry_on_port_clash(start)
    try:
        client(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        _stop(server)


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

    def uri(self, key: str) -> str:
        return f"s3a://{BUCKET}/{self.prefix}/{key}"

    def put(self, key: str, body: bytes) -> datetime:
        """Put an object; its modification time on the server (whole seconds, as S3 keeps)."""
        self.s3.put_object(Bucket=BUCKET, Key=f"{self.prefix}/{key}", Body=body)
        modified: datetime = self.s3.head_object(Bucket=BUCKET, Key=f"{self.prefix}/{key}")[
            "LastModified"
        ]
        return modified

    def json_rows(self, key: str, *rows: dict[str, Any]) -> None:
        self.put(key, "".join(json.dumps(r) + "\n" for r in rows).encode())

    def requests(self, name: str, *lines: str) -> None:
        self.put(f"landing/transactions/{name}", "".join(f"{line}\n" for line in lines).encode())

    def dms_in_order(self, *files: tuple[str, list[dict[str, Any]]]) -> None:
        """DMS files of one table, to be applied in the order given. Landing files apply in the
        order of their modification times, which S3 keeps in whole seconds (and then by name,
        which would put ``2026…`` before ``LOAD…``): each file is put once the server's clock
        (this machine's) is past the second of the one before."""
        previous: datetime | None = None
        for name, rows in files:
            if previous is not None:
                second = previous.timestamp() + 1
                wait_until(f"{previous} + 1 s", partial(_past, second), timeout=5)
            buffer = io.BytesIO()
            pq.write_table(pa.Table.from_pylist(rows), buffer)
            modified = self.put(f"landing/dms/petstore/petstore/Cat/{name}", buffer.getvalue())
            assert previous is None or modified > previous, (previous, modified)
            previous = modified

    def keys(self, under: str) -> list[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=f"{self.prefix}/{under}"
        )
        start = len(self.prefix) + 1
        return sorted(o["Key"][start:] for page in pages for o in page.get("Contents", []))

    def lease(self) -> tuple[list[str], dict[str, Any]]:
        """The checkpoint lease's epoch files (names) and the highest one's record."""
        names = [key.rsplit("/", 1)[1] for key in self.keys("checkpoints/cdc/lease/")]
        body = self.s3.get_object(
            Bucket=BUCKET, Key=f"{self.prefix}/checkpoints/cdc/lease/{names[-1]}"
        )
        record: dict[str, Any] = json.loads(body["Body"].read())
        return names, record

    def batches(self, kind: str) -> list[int]:
        """The batch ids of the streaming checkpoint's ``offsets`` or ``commits``."""
        folder = f"checkpoints/cdc/{kind}/"
        names = (key[len(folder) :] for key in self.keys(folder))
        return sorted(int(name) for name in names if name.isdigit())

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

    def commits(self, *parts: str) -> list[tuple[int, int]]:
        """(batch id, step) of every commit the job made to a table (its commit metadata)."""
        found = []
        for commit in self.table(*parts).history():
            meta = json.loads(commit.get("userMetadata") or "{}")
            if "cdc" in meta:
                found.append((meta["batchId"], meta["step"]))
        return sorted(found)


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


TABLES = DOG_CAT_TABLES


def state(bucket: Bucket) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows (delta-rs) as sorted lists of tuples: a row written twice is there
    twice."""

    def shape(name: str, r: dict[str, Any]) -> tuple[Any, ...]:
        if name == "Dog":
            return r["id"], r["version"], r["name"], r["age"]
        if name == "Cat":
            return r["id"], r["version"], r["name"]
        if name.endswith("tombstones"):
            return r["id"], r["version"]
        if name.endswith("history"):
            return r["id"], r["version"], r["__op"], r["__transaction_id"]
        if name == "ledger":
            return r["transaction_id"], r["batch_id"], json.loads(r["outcome"])["status"]
        if name == "outcomes":
            return r["transaction_id"], r["status"], r["batch_id"]
        return r["transaction_id"], r["error_code"], r["batch_id"]

    return {
        name: sorted(shape(name, r) for r in bucket.rows(*parts)) for name, parts in TABLES.items()
    }


BATCH_0: dict[str, list[tuple[Any, ...]]] = {
    "Dog": [("dog1", 1, "Rex", 3)],
    "Dog tombstones": [("dog2", 2)],
    "Dog history": [("dog1", 1, "i", "tx-1"), ("dog2", 1, "i", "tx-1"), ("dog2", 2, "d", "tx-2")],
    "Cat": [("cat1", 1, "Tom")],
    "Cat tombstones": [],
    "Cat history": [("cat1", 1, "i", "tx-1")],
    "ledger": [("tx-1", 0, "COMMITTED"), ("tx-2", 0, "COMMITTED")],
    "outcomes": [
        ("tx-1", "COMMITTED", 0),
        ("tx-2", "COMMITTED", 0),
        ("tx-3", "REJECTED", 0),
        ("tx-4", "REJECTED", 0),
    ],
    "quarantine": [("tx-3", "LOCATION_NOT_ALLOWED", 0), ("tx-4", "INVALID_JSON", 0)],
}
"""Every table once batch 0 is done."""
BATCH_1: dict[str, list[tuple[Any, ...]]] = {
    "Dog": [("dog1", 2, "Rex", 4), ("dog3", 1, "Lassie", 2)],
    "Dog tombstones": [("dog2", 2)],
    "Dog history": sorted(
        [*BATCH_0["Dog history"], ("dog1", 2, "u", "tx-5"), ("dog3", 1, "i", "tx-5")]
    ),
    "Cat": [("cat1", 1, "Tom"), ("cat2", 2, "Felix II")],
    "Cat tombstones": [("cat3", 2)],
    "Cat history": [
        ("cat1", 1, "i", "tx-1"),
        ("cat2", 1, "i", DMS_LOAD),
        ("cat2", 2, "u", DMS_CDC),
        ("cat3", 1, "i", DMS_LOAD),
        ("cat3", 2, "d", DMS_CDC),
    ],
    "ledger": sorted(
        [
            *BATCH_0["ledger"],
            ("tx-5", 1, "COMMITTED"),
            (DMS_LOAD, 1, "COMMITTED"),
            (DMS_CDC, 1, "COMMITTED"),
        ]
    ),
    "outcomes": sorted(
        [
            *BATCH_0["outcomes"],
            ("tx-5", "COMMITTED", 1),
            ("tx-1", "DUPLICATE", 1),  # sent again in 0002.jsonl
            ("tx-6", "REJECTED", 1),
            (DMS_LOAD, "COMMITTED", 1),
            (DMS_CDC, "COMMITTED", 1),
        ]
    ),
    "quarantine": sorted([*BATCH_0["quarantine"], ("tx-6", "INVALID_JSON", 1)]),
}
"""Every table once batch 1 is done too: each transaction once, each outcome once."""


def env(crash_at: str | None = None) -> dict[str, str]:
    """The ``cdc`` processes' environment: the S3 server's keys (s3a's default credentials
    chain), no other AWS settings, ``FAULT_CRASH_AT`` only when given."""
    return cdc_env(
        {**KEYS, **({CRASH_ENV: crash_at} if crash_at else {})}, drop=[CRASH_ENV, "AWS_"]
    )


def test_s3_warehouse_crashes_restarts_landing_dms_show_and_maintain(
    s3_endpoint: str, tmp_path: Path
) -> None:
    bucket = Bucket(s3_endpoint, "cdc")
    (tmp_path / "petstore.yaml").write_text(DATASET)
    (tmp_path / "cdc.yaml").write_text(config(bucket))
    timings: dict[str, float] = {}
    started = [time.monotonic()]

    def lap() -> float:
        now = time.monotonic()
        spent, started[0] = now - started[0], now
        return round(spent, 1)

    # -- 1. batch 0 killed (SIGKILL) between two table commits --------------------------------
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
    crashed = run_cdc("run", "--once", *CONFIG, cwd=tmp_path, env=env("between_commits"))
    timings["cdc run --once, killed between two table commits"] = lap()
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert f"{CRASH_ENV}=between_commits: killing the driver" in crashed.stderr
    # One table of the wave is written on S3 (its one commit); the other, written side by side,
    # has its commit or not yet; nothing after the wave.
    left = state(bucket)
    versions = {s: bucket.table(*TABLES[s]).version() for s in ("Dog", "Cat")}
    assert sorted(versions.values()) in ([0, 1], [1, 1]), versions
    for name in ("Dog", "Cat"):
        assert left[name] == (BATCH_0[name] if versions[name] else []), left
    assert {n: left[n] for n in TABLES if n not in ("Dog", "Cat", "Dog tombstones")} == {
        n: [] for n in TABLES if n not in ("Dog", "Cat", "Dog tombstones")
    }
    assert left["Dog tombstones"] in ([], BATCH_0["Dog tombstones"]), left
    assert (bucket.batches("offsets"), bucket.batches("commits")) == ([0], [])
    # The lease on s3a: taken by a conditional create (no fallback warning), left by the kill.
    assert NO_CONDITIONAL not in crashed.stderr
    names, record = bucket.lease()
    assert (names, record["epoch"], record["released"]) == (["0000000001.json"], 1, False)
    timings["checks by delta-rs"] = lap()

    # -- 2. batch 1's input: requests (one sent again, one malformed) and two DMS files -------
    # All there before the job starts again: its replay of batch 0 reads only batch 0's files
    # (the checkpoint's offsets), and the next batch all of these.
    bucket.json_rows(
        "data/three/petstore/Dog/part.json",
        {"id": "dog1", "name": "Rex", "age": 4},
        {"id": "dog3", "name": "Lassie", "age": 2},
    )
    three = {"operation": "UPSERT", "locationUri": bucket.uri("data/three"), "format": "JSON"}
    bucket.requests(
        "0002.jsonl",
        request("tx-5", three),
        request("tx-1", one),
        '{"transactionId": "tx-6", ',
    )
    bucket.dms_in_order(
        (
            "LOAD00000001.parquet",
            [{"ID": "cat2", "NAME": "Felix"}, {"ID": "cat3", "NAME": "Garfield"}],
        ),
        (
            "20261124-0001.parquet",
            [
                {"ID": "cat2", "NAME": "Felix II", "Op": "U"},
                {"ID": "cat3", "NAME": "Garfield", "Op": "D"},
            ],
        ),
    )
    timings["batch 1's files put"] = lap()

    # -- 3. the continuous job: finishes batch 0, then dies in batch 1 after its ledger --------
    log = tmp_path / "continuous.log"
    job = start_cdc("run", *CONFIG, cwd=tmp_path, log=log, env=env("after_ledger:2"))
    try:
        wait_until("the job to kill itself in batch 1", lambda: job.poll() is not None)
    finally:
        kill_group(job)  # and its JVM, if it is still there
    timings["continuous job: batch 0 finished, killed in batch 1"] = lap()
    assert job.returncode == -signal.SIGKILL, log.read_text(errors="replace")[-3000:]
    assert f"{CRASH_ENV}=after_ledger: killing the driver" in log.read_text(errors="replace")
    # Batch 0 done once (the replay skipped the commit made before the first kill); of batch 1,
    # everything but the outcomes, and Spark has not recorded it as done.
    assert state(bucket) == {**BATCH_1, "outcomes": BATCH_0["outcomes"]}
    assert (bucket.batches("offsets"), bucket.batches("commits")) == ([0, 1], [0])
    # The killed runner's lease was taken over at once (its process gone, on this machine).
    output = log.read_text(errors="replace")
    assert "has ended; taking its checkpoint" in output and NO_CONDITIONAL not in output
    names, record = bucket.lease()
    assert (names, record["epoch"], record["released"]) == (
        ["0000000001.json", "0000000002.json"],
        2,
        False,
    )
    assert record["pid"] == job.pid
    history_files = [
        k for k in bucket.keys("warehouse/petstore/_history/petstore/Dog/") if "_delta_log" not in k
    ]
    assert len(history_files) >= 2, history_files
    timings["checks by delta-rs"] += lap()

    # -- 4. restarted: cdc run --once finishes batch 1; then cdc show reads a table through
    # Spark and s3a, and cdc maintain compacts (OPTIMIZE) and VACUUMs, keeping what the last
    # hour's versions read (as upkeep.retention: the files it replaced stay)
    done, (_, shown, maintained) = run_cdc_steps(
        ["run", "--once", *CONFIG],
        ["show", "petstore", "petstore.Dog", "--json", *CONFIG],
        ["maintain", "--optimize", "--vacuum", "1", *CONFIG],
        cwd=tmp_path,
        env=env(),
    )
    timings["cdc run --once (restart), cdc show, cdc maintain: one process"] = lap()
    assert done.returncode == 0, done.stderr[-3000:]

    # -- 5. nothing lost, nothing applied twice (delta-rs, from the S3 server) -----------------
    assert state(bucket) == BATCH_1
    assert (bucket.batches("offsets"), bucket.batches("commits")) == ([0, 1], [0, 1])
    names, record = bucket.lease()  # released at the clean end; only the last two epochs kept
    assert (names, record["epoch"], record["released"]) == (
        ["0000000002.json", "0000000003.json"],
        3,
        True,
    )
    # The job's commits to each table: of these batches, and none made twice by a replay.
    made = {name: bucket.commits(*parts) for name, parts in TABLES.items()}
    assert {name: sorted({b for b, _ in steps}) for name, steps in made.items()} == {
        **{name: [0, 1] for name in TABLES},
        "Dog tombstones": [0],  # dog2 deleted in batch 0 only
        "Cat tombstones": [1],
    }
    assert {name: len(set(steps)) for name, steps in made.items()} == {
        name: len(steps) for name, steps in made.items()
    }

    assert by_id([json.loads(line) for line in shown.splitlines()]) == BATCH_1["Dog"]
    counts = {
        cells[0]: cells[1:]
        for cells in (
            [c.strip() for c in line.strip().strip("|").split("|")]
            for line in maintained.splitlines()
            if line.startswith("| s3a://")
        )
    }
    assert counts[bucket.uri("warehouse/petstore/_history/petstore/Dog")] == [
        str(len(history_files)),
        "1",
    ], maintained
    after = [
        k for k in bucket.keys("warehouse/petstore/_history/petstore/Dog/") if "_delta_log" not in k
    ]
    # The compacted file beside the ones it replaced: younger than the hour VACUUM keeps.
    assert set(history_files) < set(after), after

    # Nothing of the job's state went to the local folder: it is all on the S3 server.
    assert not [p for p in ("warehouse", "checkpoints", "landing") if (tmp_path / p).exists()]
    assert "checkpoints/cdc/metadata" in bucket.keys("checkpoints/cdc/")
    timings["checks by delta-rs"] += lap()
    print("\ns3 warehouse test, seconds per step:", json.dumps(timings, indent=1))


NO_CONDITIONAL = "does not declare conditional creates"
"""``storage.lease``'s warning on a store it cannot create files on exclusively."""

LEASE_RACE = """\
import json, sys, threading
from py4j.protocol import Py4JJavaError
from streaming.core.config import load_config
from streaming.runtime.session import build_session
from streaming.core.lease import file_name
from streaming.storage.lease import CONDITIONAL_CREATE, lease_files
cfg = load_config(sys.argv[1])
files = lease_files(build_session(cfg.spark), cfg.checkpoints + "/race")
won = []
def create(n):
    if files.create(1, f"runner {n}"):
        won.append(n)
threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
try:  # S3A's createFile with the option: no existence check before, S3's answer at close
    files.files.create(file_name(1), "again", must=CONDITIONAL_CREATE, exists=())
    refused = None
except Py4JJavaError as e:
    refused = str(e.java_exception.getClass().getName()) + " " + str(e.java_exception.getMessage())
print(json.dumps({"kind": type(files).__name__, "atomic": files.atomic,
                  "conditional": files.conditional, "won": won, "text": files.read(1),
                  "refused": refused}))
"""


def test_s3_lease_epochs_are_created_by_one_runner_only(s3_endpoint: str, tmp_path: Path) -> None:
    """What the lease relies on, on s3a: hadoop-aws declares conditional creates, and of eight
    runners creating the same epoch at once exactly one does — the S3 server refuses the others'
    PUT (412 to ``If-None-Match: *``), not a check before it."""
    bucket = Bucket(s3_endpoint, "race")
    (tmp_path / "cdc.yaml").write_text(config(bucket))
    done = subprocess.run(
        [sys.executable, "-c", LEASE_RACE, "cdc.yaml"],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["kind"] == "HadoopFiles" and found["conditional"] and found["atomic"], found
    assert len(found["won"]) == 1, found
    assert found["text"] == f"runner {found['won'][0]}"
    assert found["refused"].startswith("org.apache.hadoop.fs.s3a.RemoteFileChangedException")
    assert "412" in found["refused"], found["refused"]


def by_id(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["version"], r["name"], r["age"]) for r in rows)
