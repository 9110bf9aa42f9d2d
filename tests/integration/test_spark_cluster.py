"""The job under spark-submit on a real Spark standalone cluster, as docs/deploy.md §1-5 say.

A master and two workers (one core, 1 GiB each) are started from the Spark distribution pyspark
installs (its package folder is a SPARK_HOME); the wheel is built from this checkout with
deploy.md's command and installed into a fresh Python environment; spark-submit runs the
installed ``streaming/submit.py`` in client mode against the master with the jars of
``jars/spark`` and ``spark.master: null`` in the config. The job applies a landing-folder
transaction (driver fold), a DMS full load larger than ``DRIVER_FOLD_MAX_ROWS`` plus a DMS
change file (folded on the executors' JVMs, ``streaming.apply.sqlfold``: no Python worker), and
two transactions of a map-typed schema larger than that together (folded by the wheel's Python
code in Python workers on the executors, ``mapInArrow``), and a Debezium change feed's snapshot
and source transactions on the session's Kafka broker (decoded by the wheel's Python code in
Python workers on the executors: nothing of a feed is collected on the driver); delta-rs reads
the tables. Spark's
event log and the master's JSON show the executors on the two workers did the work, and that
Python workers ran there.

One machine stands in for the cluster, so two things are simpler than on a real one: the Python
environment and the warehouse are at the same local path for the driver and every executor (on a
cluster: the same path on every node, and shared storage such as HDFS or s3a). The environment
is a fresh venv holding the wheel (``pip install --no-deps``) whose dependencies come from the
project's venv through a ``.pth`` line (that venv's own ``.pth`` files, the editable install of
this checkout among them, are not processed): ``streaming`` is imported from the wheel only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import urllib.request
from collections import Counter
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest

from streaming.apply.objects import DRIVER_FOLD_MAX_ROWS
from streaming.core.outcomes import Outcome, Status
from tests.support import request, upsert
from tests.support.cdc import C1_ONLY, SHORT_LIVED_JVM, wait_until
from tests.support.debezium import Topics, send
from tests.support.ports import HOST, free_port

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
JARS = sorted(str(p) for p in (ROOT / "jars" / "spark").glob("*.jar"))
APP_NAME = "cdc-cluster-test"
WORKERS = 2

# Spark processes of its own; the session's broker for the change feed
pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.kafka]

DATASETS = {
    "petstore": """\
petstore.Dog:
  properties:
    name: {type: string}
petstore.Tagged:
  properties:
    name: {type: string}
    tags: {type: map, values: {type: string}}
""",
    "sales": """\
sales.Order:
  properties:
    status: {type: string}
    amount: {type: integer}
    ts: {type: integer}
  watermark: [ts]
""",
    "ledger": """\
ledger.Account:
  properties:
    owner: {type: string}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
""",
}
CONFIG = """\
warehouse: ./warehouse
checkpoints: ./checkpoints
datasets: {petstore: ./petstore.yaml, sales: ./sales.yaml, ledger: ./ledger.yaml}
landing: {transactions: ./landing/transactions, dms: ./landing/dms}
allowed_locations: [./data]
spark:
  master: null            # the master (and the jars) are spark-submit's
  app_name: cdc-cluster-test
  shuffle_partitions: 2   # two one-core executors
  conf:
    # Delta rebuilds a table's state in 50 tasks by default: minutes on two cores.
    spark.databricks.delta.snapshotPartitions: "2"
"""
ORDER = pa.schema(
    [("ID", pa.string()), ("STATUS", pa.string()), ("AMOUNT", pa.int64()), ("TS", pa.int64())]
)
LOADED = DRIVER_FOLD_MAX_ROWS + 100  # more changes than the driver folds: the executors fold
TAGGED = DRIVER_FOLD_MAX_ROWS + 100  # as many rows of the map-typed schema, in one transaction
PYTHON_METRIC = "data sent to Python workers"
"""The SQL metric of a Python node (``mapInArrow``): bytes its tasks sent to Python workers."""
SNAPSHOT = 300
"""A change feed's snapshot reads (Debezium, no transaction metadata on them), then two source
transactions: decoded by the wheel's Python code in Python workers on the executors."""
PREFIX = "clu"
LOAD_FILE = "LOAD00000001.parquet"
CDC_FILE = "20240101-0001.parquet"


# -- processes -----------------------------------------------------------------------------------
def spark_env(tmp: Path) -> dict[str, str]:
    """The environment of every Spark process: this SPARK_HOME, an empty conf folder, the
    loopback address; nothing of this process's Python or Spark settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "SPARK_", "PYTHON", "CDC_")) and k != "VIRTUAL_ENV"
    }
    conf = tmp / "spark-conf"
    conf.mkdir(exist_ok=True)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_CONF_DIR=str(conf),
        SPARK_LOCAL_IP=HOST,
        SPARK_DAEMON_MEMORY="256m",
        # The master's, the workers' and the driver's JVMs compile with C1 only: they live for
        # one small job (tests/support/cdc.py, ``SHORT_LIVED_JVM``). Executors, started by the
        # workers from the job's settings (deploy.md's command), keep the default.
        SPARK_DAEMON_JAVA_OPTS=C1_ONLY,
        **SHORT_LIVED_JVM,
    )
    return env


def tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def stop(process: subprocess.Popen[Any]) -> None:
    """Stop a process started in a session of its own, and everything it started (a worker's
    executors, their Python workers): SIGTERM to the group, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # The group may outlive its leader (executors a worker started): SIGKILL what is left.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return


class Cluster:
    """A Spark standalone master and its workers on 127.0.0.1, each in a session of its own."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = spark_env(tmp)
        self.port = free_port()
        self.webui = free_port()
        self.url = f"spark://{HOST}:{self.port}"
        self.processes: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.work_dirs = [tmp / f"worker{n}" for n in range(WORKERS)]

    def _start(self, name: str, *args: str) -> None:
        log = self.tmp / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.tmp,
                start_new_session=True,
            )
        self.processes.append((process, log))

    def start(self) -> None:
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", HOST, "--port", str(self.port), "--webui-port", str(self.webui)),
        )
        for n, work_dir in enumerate(self.work_dirs):
            work_dir.mkdir()
            self._start(
                f"worker{n}",
                "org.apache.spark.deploy.worker.Worker",
                *("--host", HOST, "--cores", "1", "--memory", "1g"),
                *("--work-dir", str(work_dir), "--webui-port", str(free_port())),
                self.url,
            )
        self.wait(lambda state: len(alive(state)) == WORKERS, "both workers registered", 120)

    def state(self) -> dict[str, Any]:
        """The master's JSON (what its web UI shows); {} while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.webui}/json", timeout=5) as answer:
                return dict(json.load(answer))
        except (OSError, ValueError):  # not listening yet, or an empty answer while starting
            return {}

    def wait(self, done: Any, what: str, seconds: float) -> dict[str, Any]:
        """The master's JSON once ``done`` holds for it; fails at once when a process of the
        cluster has exited, else after ``seconds`` (with the master's state and the logs)."""
        found: dict[str, Any] = {}

        def check() -> bool:
            for process, log in self.processes:
                if process.poll() is not None:
                    pytest.fail(f"{log.stem} exited ({process.returncode}):\n{tail(log)}")
            state = self.state()
            if state and done(state):
                found.update(state)
                return True
            return False

        try:
            wait_until(what, check, timeout=seconds)
        except AssertionError as e:
            logs = "\n".join(f"--- {log.stem}\n{tail(log, 15)}" for _, log in self.processes)
            pytest.fail(f"{e}; master says {self.state()}\n{logs}")
        return found

    def stop(self) -> None:
        for process, _ in reversed(self.processes):  # the workers (and their executors) first
            stop(process)


def alive(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


# -- the wheel and its Python environment (deploy.md §1, §2) ---------------------------------------
def run(command: list[str], cwd: Path, timeout: float = 300) -> str:
    """``command``'s output; it must succeed. Without this process's PYTHONPATH (which may name
    this checkout): the wheel's environment imports ``streaming`` from the wheel only."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _installed(name: str) -> tuple[int, ...] | None:
    """The version of the distribution ``name`` in this environment (its numeric release)."""
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def build_wheel(tmp: Path) -> Path:
    """deploy.md §1's command, run in a copy of this checkout's sources (a build writes
    ``build/`` and ``*.egg-info`` next to them; the shared checkout is left alone).

    When this environment holds what ``pyproject.toml``'s ``[build-system]`` requires
    (setuptools >= 68, wheel), the build uses it (``--no-build-isolation``): nothing is
    downloaded. Else pip builds as deploy.md's command does, in an isolated environment of
    those requirements (from the package index, or pip's cache)."""
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("streaming", "connectors"):
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    setuptools = _installed("setuptools")
    offline = setuptools is not None and setuptools >= (68,) and _installed("wheel") is not None
    isolation = ["--no-build-isolation"] if offline else []
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, ".", "-w", "dist"]
    run(command, cwd=source)
    (wheel,) = (source / "dist").glob("cdc_processor-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def python_environment(tmp: Path, wheel: Path) -> Path:
    """A venv with the wheel installed; its dependencies are the project venv's (see above)."""
    env = tmp / "cdc-env"
    run([sys.executable, "-m", "venv", "--without-pip", str(env)], cwd=tmp)
    python = env / "bin" / "python"
    site = Path(
        run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=tmp
        ).strip()
    )
    (site / "cdc-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", str(wheel)],
        cwd=tmp,
    )
    return python


# -- the job's inputs ------------------------------------------------------------------------------
def feed_config(broker: Any) -> str:
    """The ``kafka:`` section: the broker, and a change feed of ``public.accounts``."""
    broker.create_topics([f"{PREFIX}.requests", f"{PREFIX}.outcomes"])
    kafka = {
        "bootstrap": broker.bootstrap,
        "transactions_topic": f"{PREFIX}.requests",
        "outcomes_topic": f"{PREFIX}.outcomes",
        "change_feeds": [
            {
                "name": "pg",
                "dataset": "ledger",
                "topic_prefix": PREFIX,
                "tables": {"ledger.Account": "public.accounts"},
            }
        ],
    }
    return "kafka: " + json.dumps(kafka) + "\n"


def feed_records(bootstrap: str) -> list[str]:
    """The feed's records, sent: a snapshot, then two source transactions (the second deletes
    a row); the ids of the outcomes they get."""
    topics = Topics(prefix=PREFIX)
    for n in range(SNAPSHOT):
        last = "last" if n == SNAPSHOT - 1 else "true"
        topics.event("public.accounts", "r", {"id": f"a{n:03d}", "owner": "snap"}, snapshot=last)
    topics.transaction("900:1", [("public.accounts", "u", {"id": "a001", "owner": "Ann"})])
    topics.transaction("901:2", [("public.accounts", "d", {"id": "a002"})])
    send(bootstrap, topics.take())
    chunk = f"debezium:pg:{PREFIX}.public.accounts[0]@0-{SNAPSHOT - 1}"
    return [chunk, "debezium:pg:900:1", "debezium:pg:901:2"]


def job_folder(tmp: Path, broker: Any) -> Path:
    job = tmp / "job"
    job.mkdir()
    (job / "cdc.yaml").write_text(CONFIG + feed_config(broker))
    for name, text in DATASETS.items():
        (job / f"{name}.yaml").write_text(text)
    dogs = [{"id": "dog1", "name": "Scooby"}, {"id": "dog2", "name": "Lassie"}]
    tagged = [{"id": f"t{n:05d}", "name": "x", "tags": {"n": str(n)}} for n in range(TAGGED)]
    retagged = [
        {"id": "t00001", "name": "x", "tags": {"n": "one"}},  # the map changed
        {"id": "t00002", "name": "x", "tags": {"n": "2"}},  # the same map
        {"id": "t99999", "name": "new", "tags": None},
    ]
    for folder, schema, rows in (
        ("ingest1", "Dog", dogs),
        ("ingest2", "Dog", [{"id": "dog1", "name": "Scooby Doo"}]),
        ("tagged1", "Tagged", tagged),
        ("tagged2", "Tagged", retagged),
    ):
        data = job / "data" / folder / "petstore" / schema
        data.mkdir(parents=True)
        (data / "part.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    landing = job / "landing" / "transactions"
    landing.mkdir(parents=True)
    # tx-3 and tx-4 change one table in one micro-batch, some keys twice: they are folded
    # (not appended as a first load), in Python (the schema has a map).
    (landing / "0001.jsonl").write_text(
        "".join(
            request(f"tx-{n}", upsert(f"./data/{folder}")) + "\n"
            for n, folder in enumerate(("ingest1", "ingest2", "tagged1", "tagged2"), start=1)
        )
    )
    zone = job / "landing" / "dms" / "sales" / "sales" / "Order"
    zone.mkdir(parents=True)
    load = [(f"o{n:05d}", "new", n, 100) for n in range(LOADED)]
    changes = [
        ("o00001", "paid", 1, 200, "U"),
        ("o00002", "new", 2, 200, "D"),
        ("o99999", "new", 7, 150, "I"),
    ]
    pq.write_table(
        pa.Table.from_pylist([dict(zip(ORDER.names, r, strict=True)) for r in load], ORDER),
        zone / LOAD_FILE,
    )
    with_op = ORDER.append(pa.field("Op", pa.string()))
    pq.write_table(
        pa.Table.from_pylist([dict(zip(with_op.names, r, strict=True)) for r in changes], with_op),
        zone / CDC_FILE,
    )
    for number, name in enumerate((LOAD_FILE, CDC_FILE), start=1):  # the load first
        path = zone / name
        stamp = 1_700_000_000 + 60 * number
        os.utime(path, (stamp, stamp))
    return job


def spark_submit(
    cluster: Cluster, python: Path, job: Path, events: Path, timeout: float = 420
) -> subprocess.CompletedProcess[str]:
    """deploy.md §5's command (client mode), plus an event log to look at afterwards."""
    submit = run([str(python), "-c", "import streaming.submit as s; print(s.__file__)"], cwd=job)
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        *("--master", cluster.url, "--deploy-mode", "client"),
        *("--jars", ",".join(JARS)),
        *("--conf", f"spark.pyspark.python={python}"),
        *("--conf", f"spark.pyspark.driver.python={python}"),
        *("--conf", "spark.eventLog.enabled=true", "--conf", "spark.eventLog.compress=false"),
        *("--conf", "spark.eventLog.rolling.enabled=false"),  # one file
        *("--conf", f"spark.eventLog.dir={events.as_uri()}"),
        # A key the job sets too: the config's value wins (deploy.md §4).
        *("--conf", "spark.sql.shuffle.partitions=8"),
        submit.strip(),
        *("--config", "cdc.yaml", "--once"),
    ]
    out, err = job / "submit.out", job / "submit.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            command,
            cwd=job,
            env=cluster.env,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(process)
            pytest.fail(f"spark-submit still running after {timeout} s:\n{tail(err)}")
        finally:
            stop(process)  # the driver's Python and anything else left in its group
    return subprocess.CompletedProcess(
        command, process.returncode, out.read_text(), err.read_text()
    )


# -- what it wrote ---------------------------------------------------------------------------------
def rows(path: Path, *columns: str) -> list[tuple[Any, ...]]:
    table = deltalake.DeltaTable(str(path)).to_pyarrow_table(columns=list(columns)).to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in table)


def event_log(events: Path) -> tuple[str, list[dict[str, Any]]]:
    """The application id and the events of the (one, finished) application's event log."""
    (log,) = events.iterdir()
    assert not log.name.endswith(".inprogress"), f"the driver did not stop cleanly: {log.name}"
    return log.name, [json.loads(line) for line in log.read_text().splitlines() if line]


def python_bytes(events: list[dict[str, Any]]) -> Counter[str]:
    """Per executor, the bytes its tasks sent to Python workers (``PYTHON_METRIC``, the SQL
    metric of a Python node such as ``mapInArrow``).

    Not per SQL execution: the job writes tables side by side (``runtime.parallel``), and the
    event log then names, for a Python stage AQE plans late, an execution of another table (the
    thread's ``spark.sql.execution.id``) — seen in one of three runs. Which fold uses Python is
    checked in-process (``test_python_fold``, ``test_sqlfold``); here, that Python ran at all,
    and where."""
    sent: Counter[str] = Counter()
    for event in events:
        if event["Event"] != "SparkListenerTaskEnd":
            continue
        info = event["Task Info"]
        for accumulable in info.get("Accumulables", []):
            if accumulable.get("Name") == PYTHON_METRIC:
                sent[info["Executor ID"]] += int(accumulable.get("Update", 0))
    return sent


def test_the_job_on_a_standalone_cluster_under_spark_submit(
    cluster: Cluster, wheel: Path, tmp_path: Path, kafka_broker: Any
) -> None:
    assert JARS, "no jars in jars/spark: run `make jars`"
    python = python_environment(tmp_path, wheel)
    where = run([str(python), "-c", "import streaming; print(streaming.__file__)"], cwd=tmp_path)
    assert where.startswith(str(tmp_path / "cdc-env")), where  # the wheel's, not the checkout's

    job = job_folder(tmp_path, kafka_broker)
    fed = feed_records(kafka_broker.bootstrap)
    events = tmp_path / "events"
    events.mkdir()
    done = spark_submit(cluster, python, job, events)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-6000:]}"

    warehouse = job / "warehouse"
    # The landing transactions, folded on the driver: dog1 inserted then changed.
    dogs = warehouse / "petstore" / "petstore" / "Dog"
    assert rows(dogs, "id", "version", "name") == [("dog1", 2, "Scooby Doo"), ("dog2", 1, "Lassie")]
    # The DMS files, folded on the executors (the JVM fold).
    orders = rows(warehouse / "sales" / "sales" / "Order", "id", "version", "status", "ts")
    assert len(orders) == LOADED  # one deleted, one inserted
    by_id = {r[0]: r for r in orders}
    assert by_id["o00000"] == ("o00000", 1, "new", 100)
    assert by_id["o00001"] == ("o00001", 2, "paid", 200)
    assert "o00002" not in by_id
    assert by_id["o99999"] == ("o99999", 1, "new", 150)
    history = rows(warehouse / "sales" / "_history" / "sales" / "Order", "id", "version", "__op")
    assert Counter(op for _, _, op in history) == {"i": LOADED + 1, "u": 1, "d": 1}

    found = {
        r["transaction_id"]: Outcome.from_json(r["outcome"])
        for r in deltalake.DeltaTable(str(warehouse / "_system" / "outcomes"))
        .to_pyarrow_table(columns=["transaction_id", "outcome"])
        .to_pylist()
    }
    load, cdc = f"dms:sales/sales/Order/{LOAD_FILE}", f"dms:sales/sales/Order/{CDC_FILE}"
    # The change feed's snapshot and transactions, decoded on the executors (nothing of a
    # feed is collected: the rows below came through Spark tasks, which run on executors only).
    feed = {t: found.pop(t) for t in fed}
    assert {o.status for o in feed.values()} == {Status.COMMITTED}
    accounts = rows(warehouse / "ledger" / "ledger" / "Account", "id", "owner")
    assert len(accounts) == SNAPSHOT - 1
    assert dict(accounts)["a001"] == "Ann" and "a002" not in dict(accounts)
    assert sorted(found) == sorted(["tx-1", "tx-2", "tx-3", "tx-4", load, cdc])
    assert {o.status for o in found.values()} == {Status.COMMITTED}
    counts = {
        t: [(a.inserted, a.updated, a.deleted, a.unchanged) for a in o.actions]
        for t, o in found.items()
    }
    assert counts == {
        "tx-1": [(2, 0, 0, 0)],
        "tx-2": [(0, 1, 0, 0)],
        "tx-3": [(TAGGED, 0, 0, 0)],
        "tx-4": [(1, 1, 0, 1)],
        load: [(LOADED, 0, 0, 0)],
        cdc: [(1, 1, 1, 0)],
    }
    # The map-typed schema's rows, folded by the wheel's Python code on the executors.
    tagged = rows(warehouse / "petstore" / "petstore" / "Tagged", "id", "version", "name")
    assert len(tagged) == TAGGED + 1
    by_id = {r[0]: r for r in tagged}
    assert (by_id["t00001"], by_id["t00002"]) == (("t00001", 2, "x"), ("t00002", 1, "x"))
    assert by_id["t99999"] == ("t99999", 1, "new")

    # The application ran on the cluster: two executors, one per worker, both running tasks
    # (the driver runs no task on a cluster).
    app_id, log = event_log(events)
    *_, environment = [e for e in log if e["Event"] == "SparkListenerEnvironmentUpdate"]
    properties = dict(environment["Spark Properties"])
    assert properties["spark.master"] == cluster.url  # spark-submit's, not the config's
    assert properties["spark.submit.deployMode"] == "client"
    assert properties["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert properties["spark.sql.shuffle.partitions"] == "2"  # the config's, not --conf's 8
    executors = {
        e["Executor ID"]: e["Executor Info"]["Host"]
        for e in log
        if e["Event"] == "SparkListenerExecutorAdded"
    }
    assert len(executors) == WORKERS, executors
    tasks = Counter(
        e["Task Info"]["Executor ID"] for e in log if e["Event"] == "SparkListenerTaskEnd"
    )
    assert set(tasks) == set(executors), (tasks, executors)
    # Python workers on the executors folded the map-typed schema's rows and decoded the change
    # feed's records (nothing else in this job runs Python on the executors: the landing
    # UPSERTs fold on the driver, the DMS orders in SQL): the metric is in the log, with bytes
    # sent by tasks of the executors only.
    sent = python_bytes(log)
    assert sum(sent.values()) > 0, sent
    assert set(sent) <= set(executors), (sent, executors)
    for work_dir in cluster.work_dirs:  # each worker launched an executor of this application
        assert (work_dir / app_id).is_dir(), sorted(p.name for p in work_dir.iterdir())

    state = cluster.wait(
        lambda s: any(a["id"] == app_id for a in s.get("completedapps", [])),
        "the application listed as completed",
        60,
    )
    (app,) = [a for a in state["completedapps"] if a["id"] == app_id]
    assert (app["name"], app["state"]) == (APP_NAME, "FINISHED")
    assert len(alive(state)) == WORKERS
