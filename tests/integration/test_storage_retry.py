"""A store that fails for a moment fails the batch, which is tried again — its transactions are
not REJECTED (issue 47, item 6, "done when": a transient failure of the store, then the
transaction COMMITTED once after it passes).

The failure is a real one: the S3 server (moto's, a process of its own on 127.0.0.1, as in
test_s3_warehouse.py) that holds the loads' data is *frozen* (SIGSTOP) while the batch is
running — after the batch planned its transactions (the data was there: ``FAULT_PAUSE_AT=
before_first_commit`` holds the batch until the server is frozen) and before it reads their
data — and thawed (SIGCONT) a few seconds later. Meanwhile the kernel still accepts connections
on its port but nothing answers: the s3a client's requests time out, through hadoop-aws and
the AWS SDK, into Spark's read of a Parquet load (``loads.load_changes``) or the listing of a
JSON load (``jsonfiles.read_json_loads``) — a store that hangs, as a network partition or an
overloaded endpoint does. Thawed, the server answers with its objects intact (a server stopped
and started again would come back empty: moto keeps its objects in memory — and a job that
then finds no data rightly rejects it). No Python stands in for the store: nothing is
monkeypatched.

The warehouse, the checkpoints and the landing folder are local: only the data the requests
load is on S3. ``cdc run`` runs in a process of its own (the s3a jars must be on the JVM's
classpath when it starts, which the tests' shared session's is not). The scenarios run side by
side (``runs``), each with its own server, process and folder; the tests check what each left."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import boto3
import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming.core.faults import CRASH_ENV, PAUSE_ENV
from tests.support import request
from tests.support.cdc import cdc_env, kill_group, run_cdc, start_cdc, wait_until
from tests.support.datasets import DOG_CAT_TABLES
from tests.support.ports import HOST, free_port
from tests.support.side_by_side import side_by_side, taken

pytestmark = pytest.mark.s3

ROOT = Path(__file__).resolve().parents[2]
S3_JARS = ROOT / "jars" / "s3"
BUCKET = "cdc-data"
REGION = "us-east-1"
KEYS = {"AWS_ACCESS_KEY_ID": "cdc-test-key", "AWS_SECRET_ACCESS_KEY": "cdc-test-secret"}
DATASET = """\
petstore.Dog:
  properties: {name: {type: string}, age: {type: integer}}
petstore.Cat:
  properties: {name: {type: string}}
"""
PAUSE = 10
"""Seconds the batch holds before its first commit: the store is frozen meanwhile (the scenarios
run side by side, so with a margin for a busy machine)."""
FROZEN = 12
"""Seconds the server is frozen, at least."""
PAUSING = f"{PAUSE_ENV}=before_first_commit: pausing"
TIMED_OUT = re.compile(r"timed out|[Tt]imeout")
RETRYING = "STORAGE_UNAVAILABLE: batch 0, attempt 1 of 12"


class Server:
    """moto's S3 server, frozen (SIGSTOP) and thawed (SIGCONT) under the job."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.endpoint = f"http://{HOST}:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2):
                return True
        except OSError:
            return False

    def start(self) -> None:
        self.starts += 1
        log = self.folder / f"moto-{self.starts}.log"
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_until(f"the S3 server on {self.endpoint}", self.answers, self.process, log, 60)

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGCONT)  # a frozen process ends only once thawed
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.process = None

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
        )


def _parquet(rows: list[dict[str, Any]]) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out.getvalue()


OBJECTS = {
    "dogs/petstore/Dog/part-0.parquet": _parquet(
        [{"id": "dog1", "name": "Rex", "age": 3}, {"id": "dog2", "name": "Fido", "age": 7}]
    ),
    "cats/petstore/Cat/part.json": b'{"id": "cat1", "name": "Tom"}\n',
}


def _put_data(server: Server) -> None:
    """The bucket and the loads' objects."""
    s3 = server.client()
    s3.create_bucket(Bucket=BUCKET)
    for key, body in OBJECTS.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)


def _config(server: Server, attempts: int = 12) -> str:
    # s3a's own retries and time limits kept short, so that the store's failure reaches the job
    # within seconds (by default the SDK and s3a retry and wait for minutes before giving up).
    return f"""\
warehouse: warehouse
checkpoints: checkpoints
datasets: {{petstore: petstore.yaml}}
landing: {{transactions: landing}}
allowed_locations: [s3a://{BUCKET}/, local]
trigger: {{interval: 1 second}}
upkeep: {{enabled: false}}
storage_retry: {{attempts: {attempts}, first_delay: 1 second, max_delay: 3 seconds}}
spark:
  shuffle_partitions: 2
  conf:
    spark.driver.extraClassPath: {S3_JARS}/*
    spark.hadoop.fs.s3a.endpoint: {server.endpoint}
    spark.hadoop.fs.s3a.endpoint.region: {REGION}
    spark.hadoop.fs.s3a.path.style.access: "true"
    spark.hadoop.fs.s3a.connection.ssl.enabled: "false"
    spark.hadoop.fs.s3a.attempts.maximum: "1"
    spark.hadoop.fs.s3a.retry.limit: "1"
    spark.hadoop.fs.s3a.retry.interval: 100ms
    spark.hadoop.fs.s3a.connection.establish.timeout: 2s
    spark.hadoop.fs.s3a.connection.timeout: 2s
    spark.hadoop.fs.s3a.connection.request.timeout: 3s
"""


def _rows(warehouse: Path, name: str) -> list[dict[str, Any]]:
    table = deltalake.DeltaTable(str(warehouse.joinpath(*DOG_CAT_TABLES[name])))
    rows: list[dict[str, Any]] = table.to_pyarrow_table().to_pylist()
    return rows


def _commits(warehouse: Path, name: str) -> list[tuple[int, int]]:
    """(batch id, step) of every commit the job made to a table (its commit metadata)."""
    found = []
    for commit in deltalake.DeltaTable(str(warehouse.joinpath(*DOG_CAT_TABLES[name]))).history():
        meta = json.loads(commit.get("userMetadata") or "{}")
        if "cdc" in meta:
            found.append((meta["batchId"], meta["step"]))
    return sorted(found)


def _outcomes(warehouse: Path) -> int:
    try:
        return len(_rows(warehouse, "outcomes"))
    except Exception:  # not created yet, or a commit being written
        return 0


DOGS = {"operation": "UPSERT", "locationUri": f"s3a://{BUCKET}/dogs", "format": "PARQUET"}
CATS = {"operation": "UPSERT", "locationUri": f"s3a://{BUCKET}/cats", "format": "JSON"}
LOCAL_CATS = {"operation": "UPSERT", "locationUri": "./local", "format": "JSON"}
CATS_AS_DOGS = {"operation": "UPSERT", "target": "petstore.Dog", "source": "petstore.Cat"}
DOG_ROWS = [("dog1", 1, "Rex", 3), ("dog2", 1, "Fido", 7)]
DOG_HISTORY = [("dog1", 1, "i", "tx-dogs"), ("dog2", 1, "i", "tx-dogs")]


@dataclass(frozen=True)
class Case:
    transactions: dict[str, list[dict[str, Any]]]
    failed_read: str
    """What the first retry's line says failed."""
    tables: dict[str, list[tuple[Any, ...]]]
    """Dog, Cat and their histories once the batch is done."""


CASES = {
    # The listing of a JSON load (``jsonfiles.read_json_loads``), read first in the wave.
    "jsonfiles": Case(
        {"tx-dogs": [DOGS], "tx-cats": [CATS]},
        "cannot list JSON data at s3a://cdc-data/cats",
        {
            "Dog": DOG_ROWS,
            "Cat": [("cat1", 1, "Tom")],
            "Dog history": DOG_HISTORY,
            "Cat history": [("cat1", 1, "i", "tx-cats")],
        },
    ),
    # Spark's read of a Parquet load (``loads.load_changes``), after the failed attempt had
    # committed already: tx-local-cats (local data) is a segment of its own, written before
    # tx-both, which reads Cat, then fails reading S3. The retry must find that commit and not
    # apply it again (Delta's idempotency keys, ``replay_possible``). (A case whose Parquet load
    # was the batch's only one failed in the same read and committed nothing before it: this
    # one checks all it did, and it cost a cold ``cdc`` process of 100-140 s.)
    "after_a_commit": Case(
        {"tx-local-cats": [LOCAL_CATS], "tx-both": [CATS_AS_DOGS, DOGS]},
        "cannot read PARQUET data at s3a://cdc-data/dogs",
        {
            "Dog": [("cat9", 1, "Felix", None), *DOG_ROWS],
            "Cat": [("cat9", 1, "Felix")],
            "Dog history": [
                ("cat9", 1, "i", "tx-both"),
                ("dog1", 1, "i", "tx-both"),
                ("dog2", 1, "i", "tx-both"),
            ],
            "Cat history": [("cat9", 1, "i", "tx-local-cats")],
        },
    ),
}


@dataclass(frozen=True)
class Frozen:
    """What a frozen case's run left (``_run_frozen``)."""

    root: Path
    log: str
    outcomes_at_failure: int
    """Outcome rows when the first attempt had failed."""
    committed_at_failure: dict[str, int]
    """Commits of Dog and Cat when the first attempt had failed."""
    code: int
    """``cdc run``'s exit code after SIGTERM."""


@dataclass(frozen=True)
class Down:
    """What the stays-down scenario left (``_run_stays_down``)."""

    root: Path
    down: subprocess.CompletedProcess[str]
    outcomes_down: int
    ledger_down: list[dict[str, Any]]
    up: subprocess.CompletedProcess[str]


def _jars() -> None:
    if not any(S3_JARS.glob("hadoop-aws-*.jar")) or not any(S3_JARS.glob("bundle-*.jar")):
        pytest.fail("jars/s3 has no hadoop-aws / AWS SDK bundle: run `make jars-s3`")


def _run_frozen(tmp_path: Path, case: str) -> Frozen:
    """``cdc run`` over the case's transactions, the store frozen under its first batch and
    thawed once the batch's first attempt failed on it; stopped (SIGTERM) once the batch
    committed."""
    transactions = CASES[case].transactions
    server = Server(tmp_path)
    server.start()
    job: subprocess.Popen[bytes] | None = None
    log = tmp_path / "cdc.log"
    try:
        _put_data(server)
        (tmp_path / "petstore.yaml").write_text(DATASET)
        (tmp_path / "cdc.yaml").write_text(_config(server))
        local = tmp_path / "local" / "petstore" / "Cat"
        local.mkdir(parents=True)
        (local / "part.json").write_text('{"id": "cat9", "name": "Felix"}\n')
        landing = tmp_path / "landing"
        landing.mkdir()
        (landing / "0001.jsonl").write_text(
            "".join(f"{request(tid, *actions)}\n" for tid, actions in transactions.items())
        )
        env = cdc_env(
            {**KEYS, PAUSE_ENV: f"before_first_commit:{PAUSE}"}, drop=[CRASH_ENV, "AWS_", "CDC_"]
        )
        job = start_cdc("run", "--config", "cdc.yaml", cwd=tmp_path, log=log, env=env)

        def said(text: str) -> bool:
            return text in log.read_text(errors="replace")

        # The batch planned its transactions (their data was listed) and holds: the store hangs.
        wait_until("the batch to pause before its first commit", lambda: said(PAUSING), job, log)
        server.freeze()
        frozen = time.monotonic()
        wait_until(
            "the batch's first attempt to fail on the store", lambda: said(RETRYING), job, log
        )
        warehouse = tmp_path / "warehouse"
        outcomes_at_failure = _outcomes(warehouse)
        committed = {name: len(_commits(warehouse, name)) for name in ("Dog", "Cat")}
        # Hung a few seconds more (a retry or two meet it so too), then it answers again.
        time.sleep(max(0.0, FROZEN - (time.monotonic() - frozen)))
        server.thaw()
        wait_until(
            "the transactions to be committed",
            lambda: _outcomes(warehouse) == len(transactions),
            job,
            log,
        )
        os.kill(job.pid, signal.SIGTERM)  # the Python process only: a clean stop
        code = job.wait(timeout=120)
        job = None
    finally:
        if job is not None:
            kill_group(job)
        server.stop()
    return Frozen(tmp_path, log.read_text(errors="replace"), outcomes_at_failure, committed, code)


def _run_stays_down(tmp_path: Path) -> Down:
    """``cdc run --once`` with the store frozen before it starts and for all of its attempts;
    then, thawed, ``cdc run --once`` again."""
    server = Server(tmp_path)
    server.start()
    try:
        _put_data(server)
        (tmp_path / "petstore.yaml").write_text(DATASET)
        (tmp_path / "cdc.yaml").write_text(_config(server, attempts=2))
        landing = tmp_path / "landing"
        landing.mkdir()
        (landing / "0001.jsonl").write_text(f"{request('tx-dogs', DOGS)}\n")
        env = cdc_env(KEYS, drop=[CRASH_ENV, PAUSE_ENV, "AWS_", "CDC_"])
        server.freeze()
        down = run_cdc("run", "--once", "--config", "cdc.yaml", cwd=tmp_path, env=env)
        server.thaw()
        warehouse = tmp_path / "warehouse"
        outcomes_down, ledger_down = _outcomes(warehouse), _rows(warehouse, "ledger")
        up = run_cdc("run", "--once", "--config", "cdc.yaml", cwd=tmp_path, env=env)
    finally:
        server.stop()
    return Down(tmp_path, down, outcomes_down, ledger_down, up)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Frozen | Down | BaseException]:
    """Every scenario of this module at once, each in a thread of its own with its own S3
    server and ``cdc`` process: a run mostly waits on its frozen store (hadoop-aws gives up on
    a request after 15 s at the least, whatever its settings say), so side by side the runs
    take about as long as the longest instead of adding up. A scenario's failure is raised by
    its own test."""
    _jars()
    scenarios: dict[str, Callable[[], Frozen | Down]] = {
        **{case: partial(_run_frozen, tmp_path_factory.mktemp(case), case) for case in CASES},
        "stays_down": partial(_run_stays_down, tmp_path_factory.mktemp("stays_down")),
    }
    return side_by_side(scenarios)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_store_frozen_under_a_batch_fails_the_batch_which_commits_once_when_it_is_back(
    runs: dict[str, Frozen | Down | BaseException], case: str
) -> None:
    run = taken(runs, case)
    assert isinstance(run, Frozen)
    transactions, failed_read, expected = (
        CASES[case].transactions,
        CASES[case].failed_read,
        CASES[case].tables,
    )
    text, warehouse = run.log, run.root / "warehouse"
    assert run.outcomes_at_failure == 0
    # What the failed attempt had committed: Cat's segment in ``after_a_commit``, else none.
    assert run.committed_at_failure == {"Dog": 0, "Cat": 1 if case == "after_a_commit" else 0}
    assert run.code == 0, text[-3000:]
    retries = [
        line for line in text.splitlines() if "STORAGE_UNAVAILABLE: batch 0, attempt" in line
    ]
    assert retries, text[-3000:]
    # The first attempt's line names the store's failure (s3a's words for a server that is
    # gone) and the next try; the batch is not failed for good, nothing is rejected.
    first = retries[0]
    assert "attempt 1 of 12" in first and "trying it again in 1 s" in first, first
    assert failed_read in first and TIMED_OUT.search(first), first
    assert "REJECTED" not in text and "UNREADABLE_DATA" not in text, text[-3000:]
    outcomes = sorted(
        (r["transaction_id"], r["status"], r["batch_id"]) for r in _rows(warehouse, "outcomes")
    )
    assert outcomes == [(tid, "COMMITTED", 0) for tid in sorted(transactions)]
    ledger = sorted(
        (r["transaction_id"], json.loads(r["outcome"])["status"])
        for r in _rows(warehouse, "ledger")
    )
    assert ledger == [(tid, "COMMITTED") for tid in sorted(transactions)]
    assert _rows(warehouse, "quarantine") == []
    tables = {
        "Dog": sorted(
            (r["id"], r["version"], r["name"], r["age"]) for r in _rows(warehouse, "Dog")
        ),
        "Cat": sorted((r["id"], r["version"], r["name"]) for r in _rows(warehouse, "Cat")),
        # Each change once in history: the retried batch applied nothing twice.
        **{
            name: sorted(
                (r["id"], r["version"], r["__op"], r["__transaction_id"])
                for r in _rows(warehouse, name)
            )
            for name in ("Dog history", "Cat history")
        },
    }
    assert tables == expected
    # Each table commit of the batch once: the retry found the failed attempt's commit (if any)
    # and did not make it again (Delta's idempotency keys: batch and step).
    for name in ("Dog", "Cat"):
        made = _commits(warehouse, name)
        assert len(made) == len(set(made)) == (1 if expected[name] else 0), (name, made)


def test_a_store_that_stays_down_stops_the_job_with_storage_unavailable_and_loses_nothing(
    runs: dict[str, Frozen | Down | BaseException],
) -> None:
    """The S3 server frozen before the job starts and for all of its attempts: ``cdc run
    --once`` stops with STORAGE_UNAVAILABLE (exit 2, a line saying what to do), nothing
    REJECTED or recorded; thawed, the next ``cdc run --once`` replays the batch: COMMITTED once."""
    run = taken(runs, "stays_down")
    assert isinstance(run, Down)
    down, up, warehouse = run.down, run.up, run.root / "warehouse"
    output = down.stdout + down.stderr
    assert down.returncode == 2, output[-3000:]
    assert "STORAGE_UNAVAILABLE: batch 0, attempt 1 of 2: the store failed (" in output
    assert "attempt 2 of 2" not in output  # the last attempt is not retried: it stops
    # The job ends with the coded error and the line saying what to do, last on stderr (as
    # the other failures of a batch do: Spark's and py4j's report of the failed query, with
    # the foreachBatch function's traceback, comes before it).
    last = down.stderr.rstrip().splitlines()[-2:]
    assert last[0].startswith("cdc: error [STORAGE_UNAVAILABLE]: batch 0 failed 2 times over "), (
        output[-3000:]
    )
    assert "storage_retry.attempts" in last[1] and "replays the batch" in last[1], last
    assert "REJECTED" not in output, output[-3000:]
    assert run.outcomes_down == 0 and run.ledger_down == []
    assert up.returncode == 0, (up.stdout + up.stderr)[-3000:]
    outcomes = [
        (r["transaction_id"], r["status"], r["batch_id"]) for r in _rows(warehouse, "outcomes")
    ]
    assert outcomes == [("tx-dogs", "COMMITTED", 0)]
    assert _rows(warehouse, "quarantine") == []
    dogs = sorted((r["id"], r["version"], r["name"], r["age"]) for r in _rows(warehouse, "Dog"))
    assert dogs == DOG_ROWS
