"""Kafka Connect (standalone worker) running one Debezium connector against the test broker: the
database → Debezium → Kafka half of the pipeline tests. ``DebeziumConnect`` is the worker;
``DebeziumPostgresConnect`` runs Debezium's PostgreSQL connector, ``DebeziumMariaDBConnect`` its
MariaDB connector (tests/support/mariadb.py's server).

The jars come from Maven (``make jars-connect`` → ``jars/connect``: Connect at the broker's
version, Debezium's PostgreSQL connector, the PostgreSQL JDBC driver; ``jars/connect-mariadb``:
the same Connect with Debezium's MariaDB connector, which Maven Central serves at an older
Debezium than the PostgreSQL one, hence a classpath of its own, and MariaDB Connector/J); Java
17 must be on PATH.
One JVM, ``org.apache.kafka.connect.cli.ConnectStandalone worker.properties connector.properties``,
with everything in the work folder: ``worker.properties``, ``connector.properties``,
``log4j2.properties``, ``connect.log`` (log4j), ``connect.out`` (JVM stdout/stderr) and
``connect.offsets`` (the source offsets).

    connect = DebeziumPostgresConnect(tmp_path, broker.bootstrap, pg, topic_prefix="shop",
                                      tables=["public.customers"])
    connect.start()   # returns when the connector and its task are RUNNING
    ...
    connect.stop()

Each start of the PostgreSQL connector uses a replication slot and a publication of its own
(``slot.name``, ``publication.name``); the slot is dropped when the connector stops cleanly
(``slot.drop.on.stop``). The MariaDB connector reads the binlog as a replica with a
``database.server.id`` of its own per start and keeps its schema history in the work folder
(``schema-history.dat``, ``FileSchemaHistory``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support import jvm_archive
from tests.support.cdc import C1_ONLY
from tests.support.localserver import terminate
from tests.support.mariadb import MariaDBServer
from tests.support.ports import HOST, free_port, port_open
from tests.support.postgres import PostgresCluster

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JARS_DIR = PROJECT_ROOT / "jars" / "connect"
MARIADB_JARS_DIR = PROJECT_ROOT / "jars" / "connect-mariadb"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
MARIADB_CONNECTOR_CLASS = "io.debezium.connector.mariadb.MariaDbConnector"
PORT_ATTEMPTS = 3
ADDRESS_IN_USE = "Address already in use"

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""


class ConnectError(RuntimeError):
    """Kafka Connect or its connector could not be started (the message carries the tail of
    Connect's log)."""


class DebeziumConnect:
    """One standalone Connect worker (child JVM) running one Debezium connector: a subclass
    names the connector (``connector_class``, ``jar_pattern``, ``connector_properties``)."""

    connector_class = ""
    jar_pattern = ""
    """A jar of the connector, as a glob in the jars folder (checked before a start)."""
    default_jars_dir = DEFAULT_JARS_DIR
    name_suffix = "connector"

    def __init__(
        self,
        workdir: Path,
        bootstrap: str,
        *,
        topic_prefix: str,
        tables: Sequence[str],
        schemas_enable: bool = True,
        transaction_metadata: bool = True,
        name: str | None = None,
        properties: Mapping[str, str] | None = None,
        worker_properties: Mapping[str, str] | None = None,
        jars_dir: Path | None = None,
        rest_port: int | None = None,
    ) -> None:
        """``tables``: ``table.include.list`` (``schema.table`` names, regular expressions).
        ``schemas_enable``: the JsonConverter's ``schemas.enable`` for key and value (messages
        as ``{"schema": ..., "payload": ...}``). ``properties``: more connector settings, over
        the ones written here; ``worker_properties`` the same for the worker."""
        self.workdir = Path(workdir).resolve()
        self.bootstrap = bootstrap
        self.topic_prefix = topic_prefix
        self.tables = list(tables)
        self.schemas_enable = schemas_enable
        self.transaction_metadata = transaction_metadata
        self.name = name or f"{topic_prefix}-{self.name_suffix}"
        self.properties = dict(properties or {})
        self.worker_properties = dict(worker_properties or {})
        self.jars_dir = Path(jars_dir or self.default_jars_dir).resolve()
        self.host = HOST
        self.rest_port = rest_port or free_port()
        self._port_picked = rest_port is None
        self._process: subprocess.Popen[bytes] | None = None
        self._archive = jvm_archive.archive_for("connect", self.jars_dir)
        self._dumping: Path | None = None
        """The file this worker's JVM dumps its classes to at exit, when it makes the archive
        (tests/support/jvm_archive.py): the first worker stopped gracefully makes it."""
        self.startup_seconds: float | None = None

    # -- files and addresses -------------------------------------------------------------
    @property
    def rest_url(self) -> str:
        return f"http://{self.host}:{self.rest_port}"

    @property
    def worker_file(self) -> Path:
        return self.workdir / "worker.properties"

    @property
    def connector_file(self) -> Path:
        return self.workdir / "connector.properties"

    @property
    def log_file(self) -> Path:
        return self.workdir / "connect.log"

    @property
    def out_file(self) -> Path:
        return self.workdir / "connect.out"

    @property
    def offsets_file(self) -> Path:
        return self.workdir / "connect.offsets"

    @property
    def transaction_topic(self) -> str:
        return f"{self.topic_prefix}.transaction"

    def topic(self, table: str) -> str:
        """The topic of ``schema.table``'s change events."""
        return f"{self.topic_prefix}.{table}"

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> DebeziumConnect:
        """Launch the worker and wait until the connector and its task are RUNNING; returns
        ``self``. A REST port this object picked moves when it was taken in between."""
        self._check_prerequisites()
        self.workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start(timeout)
                break
            except ConnectError as e:
                if ADDRESS_IN_USE not in str(e) or not self._port_picked:
                    raise
                if attempt == PORT_ATTEMPTS:
                    raise
                log.warning("Kafka Connect could not bind %s: another port", self.rest_port)
                self.rest_port = free_port()
        self.startup_seconds = time.monotonic() - started
        log.info(
            "Kafka Connect with %s RUNNING in %.1fs (REST %s, pid %s, log %s)",
            self.name,
            self.startup_seconds,
            self.rest_url,
            self.pid,
            self.log_file,
        )
        return self

    def _start(self, timeout: float) -> None:
        if port_open(self.host, self.rest_port):
            raise ConnectError(f"{self.host}:{self.rest_port}: {ADDRESS_IN_USE}")
        self._prepare(uuid.uuid4().hex[:12])
        self._write_config()
        if self._dumping is None:  # the first worker to claim the archive dumps it at exit
            self._dumping = jvm_archive.claim(self._archive)
        mark = self._log_sizes()
        with open(self.out_file, "ab") as out:
            self._process = subprocess.Popen(
                self._java_command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_running(timeout, mark)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the connector stops; Postgres: its slot is dropped), then SIGKILL after
        ``timeout``; does nothing when no worker runs."""
        process, self._process = self._process, None
        try:
            terminate(process, "Kafka Connect", timeout)
        finally:
            dumping, self._dumping = self._dumping, None
            if dumping is not None:
                jvm_archive.finish(self._archive, dumping, ok=process is not None)

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def is_running(self) -> bool:
        return self.pid is not None

    def __enter__(self) -> DebeziumConnect:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- REST ----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """``GET /connectors/<name>/status``."""
        return self._get(f"/connectors/{self.name}/status")

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.rest_url}{path}", timeout=5) as response:
            body: dict[str, Any] = json.load(response)
            return body

    # -- the connector -------------------------------------------------------------------
    def _prepare(self, unique: str) -> None:
        """Before each start: names of its own for this start (``unique``: 12 hex digits)."""

    def connector_properties(self) -> dict[str, str]:
        """The connector's own settings (the database, its options), under ``properties``."""
        raise NotImplementedError

    # -- internals -----------------------------------------------------------------------
    def _check_prerequisites(self) -> None:
        if not any(self.jars_dir.glob(self.jar_pattern)):
            raise ConnectError(f"no {self.jar_pattern} in {self.jars_dir}: run `make jars-connect`")
        if shutil.which("java") is None:
            raise ConnectError("`java` is not on PATH (Kafka Connect needs Java 17+)")
        if self.is_running():
            raise ConnectError(f"Kafka Connect already runs (pid {self.pid})")

    def _write_config(self) -> None:
        schemas = str(self.schemas_enable).lower()
        worker = {
            "bootstrap.servers": self.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
            "offset.storage.file.filename": str(self.offsets_file),
            "offset.flush.interval.ms": "500",
            "listeners": self.rest_url,
            # Plugins are found through their META-INF/services entries on the classpath, not by
            # scanning every class of it: a faster start.
            "plugin.discovery": "service_load",
            **self.worker_properties,
        }
        connector = {
            "name": self.name,
            "connector.class": self.connector_class,
            "tasks.max": "1",
            "topic.prefix": self.topic_prefix,
            "table.include.list": ",".join(self.tables),
            "provide.transaction.metadata": str(self.transaction_metadata).lower(),
            "snapshot.mode": "initial",
            **self.connector_properties(),
            **self.properties,
        }
        self.worker_file.write_text("".join(f"{k}={v}\n" for k, v in worker.items()))
        self.connector_file.write_text("".join(f"{k}={v}\n" for k, v in connector.items()))
        (self.workdir / "log4j2.properties").write_text(LOG4J2.format(log=self.log_file))

    def _java_command(self) -> list[str]:
        if self._dumping is not None:
            archive = jvm_archive.dumping_options(self._dumping)
        else:
            archive = jvm_archive.jvm_options(self._archive)
        return [
            "java",
            "-Xms64m",
            "-Xmx512m",
            "-XX:+UseSerialGC",
            C1_ONLY,
            *archive.split(),
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            f"{self.jars_dir}/*",
            MAIN_CLASS,
            str(self.worker_file),
            str(self.connector_file),
        ]

    def _wait_running(self, timeout: float, mark: dict[Path, int]) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        last: Any = "no answer from the REST API"
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None and ADDRESS_IN_USE in self._new_log_text(mark):
                raise ConnectError(f"Kafka Connect could not bind its port:\n{self._tail()}")
            if code is not None:
                raise ConnectError(f"Kafka Connect exited ({code}):\n{self._tail()}")
            try:
                last = status = self.status()
            except (urllib.error.URLError, OSError, ValueError) as e:
                last = f"{type(e).__name__}: {e}"
                time.sleep(0.25)
                continue
            states = [status["connector"]["state"], *(t["state"] for t in status["tasks"])]
            if "FAILED" in states:
                traces = [
                    part.get("trace", "")
                    for part in (status["connector"], *status["tasks"])
                    if part["state"] == "FAILED"
                ]
                raise ConnectError(
                    f"connector {self.name} FAILED: {json.dumps(status)}\n"
                    + "\n".join(traces)
                    + f"\n{self._tail()}"
                )
            if status["tasks"] and all(state == "RUNNING" for state in states):
                return
            time.sleep(0.25)
        raise ConnectError(
            f"connector {self.name} not RUNNING within {timeout}s (last status: {last}):\n"
            f"{self._tail()}"
        )

    def _log_sizes(self) -> dict[Path, int]:
        return {f: f.stat().st_size if f.exists() else 0 for f in (self.out_file, self.log_file)}

    def _new_log_text(self, mark: dict[Path, int]) -> str:
        text = ""
        for file, size in mark.items():
            if file.exists():
                with file.open("rb") as f:
                    f.seek(size)
                    text += f.read().decode(errors="replace")
        return text

    def _tail(self, lines: int = 60) -> str:
        text = ""
        for file in (self.out_file, self.log_file):
            if file.exists():
                tail = file.read_text(errors="replace").splitlines()[-lines:]
                text += f"--- {file} ---\n" + "\n".join(tail) + "\n"
        return text or "(no Kafka Connect log)"


class DebeziumPostgresConnect(DebeziumConnect):
    """Debezium's PostgreSQL connector (pgoutput, a filtered publication and a slot of its own
    per start, dropped when it stops) on ``postgres``."""

    connector_class = CONNECTOR_CLASS
    jar_pattern = "debezium-connector-postgres-*.jar"
    name_suffix = "pg"

    def __init__(
        self, workdir: Path, bootstrap: str, postgres: PostgresCluster, **options: Any
    ) -> None:
        """``options``: those of ``DebeziumConnect`` (``topic_prefix``, ``tables`` as
        ``schema.table``, ...)."""
        super().__init__(workdir, bootstrap, **options)
        self.postgres = postgres
        self.slot_name = ""
        self.publication_name = ""

    def _prepare(self, unique: str) -> None:
        self.slot_name = f"dbz_{unique}"
        self.publication_name = f"dbz_pub_{unique}"

    def connector_properties(self) -> dict[str, str]:
        pg = self.postgres
        return {
            "plugin.name": "pgoutput",
            "database.hostname": pg.host,
            "database.port": str(pg.port),
            "database.user": pg.user,
            "database.password": pg.password,
            "database.dbname": pg.dbname,
            "slot.name": self.slot_name,
            "slot.drop.on.stop": "true",
            "publication.name": self.publication_name,
            "publication.autocreate.mode": "filtered",
            "decimal.handling.mode": "string",
        }


class DebeziumMariaDBConnect(DebeziumConnect):
    """Debezium's MariaDB connector on ``mariadb`` (tests/support/mariadb.py): reads its binlog
    as a replica, ``tables`` as ``<database>.<table>``; the schema history in a file of the
    work folder; decimals as Connect's ``Decimal`` (the converter's bytes, the default
    ``decimal.handling.mode=precise``)."""

    connector_class = MARIADB_CONNECTOR_CLASS
    jar_pattern = "debezium-connector-mariadb-*.jar"
    default_jars_dir = MARIADB_JARS_DIR
    name_suffix = "mariadb"

    def __init__(
        self, workdir: Path, bootstrap: str, mariadb: MariaDBServer, **options: Any
    ) -> None:
        super().__init__(workdir, bootstrap, **options)
        self.mariadb = mariadb
        self.server_id = 0

    @property
    def schema_history_file(self) -> Path:
        return self.workdir / "schema-history.dat"

    def _prepare(self, unique: str) -> None:
        # The replica id the connector reads the binlog with: one of its own per start, never
        # the server's.
        self.server_id = 5400 + zlib.crc32(unique.encode()) % 100_000

    def connector_properties(self) -> dict[str, str]:
        db = self.mariadb
        return {
            "database.hostname": db.host,
            "database.port": str(db.port),
            "database.user": db.user,
            "database.password": db.password,
            "database.server.id": str(self.server_id),
            "database.include.list": db.database,
            "include.schema.changes": "false",
            "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
            "schema.history.internal.file.filename": str(self.schema_history_file),
        }


def wait_for_slot(postgres: PostgresCluster, slot: str, timeout: float = 60.0) -> None:
    """Wait until the replication slot ``slot`` exists and is in use (Debezium streams from it):
    a change committed from then on reaches Kafka."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = postgres.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        )
        if rows and rows[0][0]:
            return
        time.sleep(0.2)
    slots: Any = "unknown"
    with contextlib.suppress(Exception):
        slots = postgres.execute("SELECT slot_name, active FROM pg_replication_slots")
    raise ConnectError(f"replication slot {slot} not active within {timeout}s (slots: {slots})")
