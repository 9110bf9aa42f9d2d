"""A throwaway MariaDB 10.11 server for tests (the source of the MariaDB → Debezium → Kafka
pipeline): ``mariadb-install-db`` into a folder of its own, then ``mariadbd`` listening only on
127.0.0.1 on a free port, with the binlog Debezium reads: ``log_bin``, ``binlog_format=ROW``,
``binlog_row_image=FULL``, a ``server_id`` and MariaDB's GTIDs (always written; domain 0,
``gtid_strict_mode``). Stopped with SIGTERM (killed when that fails); the folder is removed.

The server comes from the Debian package ``mariadb-server`` (``make mariadb`` installs it as
root; MySQL itself is not in Debian's archive). Statements are run with the ``mariadb`` client of
the same package, as the server's ``root`` over its unix socket (no Python driver needed); the
connector connects over TCP as ``user``, who has the grants Debezium's MariaDB connector needs
(``SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR``).

mariadbd refuses to run as root unless told a user: run as root, the server runs as the system
user ``mysql`` (the package creates it; ``--user=mysql``) in a folder of its own under the
system's tmp dir (mode 0755: pytest's tmp dirs are not traversable by another user); its error
log is copied into ``workdir`` at ``stop``.

    db = MariaDBServer(tmp_path).start()
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, name TEXT)")
    with db.transaction() as tx:
        tx.execute("INSERT INTO t VALUES (1, 'a')")
    db.read_table("t")  # [{"id": 1, "name": "a"}]
    db.stop()
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.support.localserver import LocalServer, terminate
from tests.support.ports import port_open

log = logging.getLogger(__name__)

MARIADBD = Path(os.environ.get("MARIADBD", "/usr/sbin/mariadbd"))
PACKAGE = "mariadb-server"
OS_USER = "mysql"
"""The system user the server runs as when the tests run as root (the package's)."""
GRANTS = "SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR"
"""What Debezium's MariaDB connector needs: the snapshot's reads and locks, the binlog."""


class MariaDBError(RuntimeError):
    """The server could not be set up, started, stopped, or a statement failed (the message
    carries the client's error and the log's tail)."""


class Transaction:
    """The statements of one transaction, run together (``MariaDBServer.transaction``)."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def execute(self, statement: str) -> None:
        self.statements.append(statement.rstrip().rstrip(";"))


class MariaDBServer(LocalServer):
    """One MariaDB server on ``127.0.0.1:port`` with a database ``database`` and a user ``user``
    with the replication grants Debezium needs."""

    NAME = "MariaDB"
    LOG_NAME = "mariadb.err"
    ERROR = MariaDBError
    BIND_FAILED = ("Address already in use", "Can't start server")

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        user: str = "cdc",
        password: str = "cdc-secret",
        database: str = "cdc",
        server_id: int = 1,
        mariadbd: Path | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        """``settings``: more server options (``name: value``, as on mariadbd's command line
        without the dashes), over the ones set here."""
        super().__init__(workdir, port=port, os_user=OS_USER)
        self.user = user
        self.password = password
        self.database = database
        self.server_id = server_id
        self.mariadbd = Path(mariadbd or MARIADBD)
        self.settings = dict(settings or {})
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self._root / "mysqld.sock"

    # -- lifecycle (``LocalServer.start``: install the data folder, start mariadbd, create the
    # database and the user) ---------------------------------------------------------------
    def _ready(self) -> None:
        self.root_sql(
            f"CREATE DATABASE `{self.database}`;"
            f"CREATE USER '{self.user}'@'%' IDENTIFIED BY '{self.password}';"
            f"GRANT ALL ON `{self.database}`.* TO '{self.user}'@'%';"
            f"GRANT {GRANTS} ON *.* TO '{self.user}'@'%';"
        )

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after ``timeout``; then the folder is removed,
        its error log copied into ``workdir`` first."""
        process, self._process = self._process, None
        terminate(process, "MariaDB", timeout)
        self._remove_root()

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- SQL -----------------------------------------------------------------------------
    def root_sql(self, script: str, *, database: str | None = None) -> list[list[str | None]]:
        """Run ``script`` (statements separated by ``;``) with the ``mariadb`` client as root
        over the socket, the session's time zone UTC; returns the rows of its result sets as
        text (None for NULL). A failing statement raises ``MariaDBError`` (and ends the
        client's session: an open transaction rolls back)."""
        command = [
            "mariadb",
            "--no-defaults",
            f"--socket={self.socket}",
            "--user=root",
            "--default-character-set=utf8mb4",  # 4-byte characters too (emoji)
            "--batch",
            "--raw",
            "--skip-column-names",
            *([f"--database={database}"] if database else []),
        ]
        done = subprocess.run(
            command,
            input=f"SET time_zone = '+00:00';\n{script}\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise MariaDBError(f"mariadb failed ({done.returncode}): {done.stderr.strip()}")
        return [
            [None if v == "NULL" else v for v in line.split("\t")]
            for line in done.stdout.splitlines()
        ]

    def execute(self, statement: str) -> list[list[str | None]]:
        """One statement in the database, committed (autocommit); its rows as text."""
        return self.root_sql(statement.rstrip().rstrip(";") + ";", database=self.database)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Statements collected in the block, run as one transaction when it ends without an
        error (all or nothing: a failing statement rolls the transaction back)."""
        tx = Transaction()
        yield tx
        body = "".join(f"{s};\n" for s in tx.statements)
        self.execute(f"START TRANSACTION;\n{body}COMMIT")

    def columns(self, table: str) -> list[str]:
        rows = self.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = "
            f"'{self.database}' AND table_name = '{table}' ORDER BY ordinal_position"
        )
        return [str(r[0]) for r in rows]

    def read_table(self, table: str, key: str | Sequence[str] = "id") -> list[dict[str, Any]]:
        """Every row of ``table`` as a dict ordered by ``key`` (a column or columns), read as
        JSON (``JSON_OBJECT``): numbers as int or Decimal, DATE/DATETIME/TIMESTAMP as the
        server's text (TIMESTAMP in UTC), a JSON column as the value it holds."""
        keys = [key] if isinstance(key, str) else list(key)
        names = self.columns(table)
        if not names:
            raise MariaDBError(f"no table {self.database}.{table}")
        pairs = ", ".join(f"'{c}', `{c}`" for c in names)
        order = ", ".join(f"`{k}`" for k in keys)
        rows = self.execute(f"SELECT JSON_OBJECT({pairs}) FROM `{table}` ORDER BY {order}")
        return [json.loads(str(r[0]), parse_float=Decimal) for r in rows]

    def binlog_position(self) -> tuple[str, int, str]:
        """(binlog file, position, GTID position) right now."""
        file, pos = self.execute("SHOW MASTER STATUS")[0][:2]
        gtid = self.execute("SELECT @@gtid_binlog_pos")[0][0]
        return str(file), int(str(pos)), str(gtid or "")

    # -- internals -----------------------------------------------------------------------
    def _check_prerequisites(self) -> None:
        if not self.mariadbd.exists() or shutil.which("mariadb-install-db") is None:
            raise MariaDBError(
                f"no {self.mariadbd} or mariadb-install-db: MariaDB is needed (the Debian "
                f"package {PACKAGE}: `make mariadb` as root, or apt-get install {PACKAGE}; "
                "MARIADBD=<path> for a server elsewhere)"
            )

    def _user_args(self) -> list[str]:
        return [f"--user={self.os_user}"] if self.os_user is not None else []

    def _prepare(self) -> None:
        done = subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                *self._user_args(),
                f"--datadir={self.data_dir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ],
            cwd=self._root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode != 0:
            raise MariaDBError(
                f"mariadb-install-db failed ({done.returncode}):\n{done.stdout}{done.stderr}"
            )

    def _server_args(self) -> list[str]:
        settings = {
            "datadir": str(self.data_dir),
            "socket": str(self.socket),
            "pid-file": str(self._root / "mariadbd.pid"),
            "log-error": str(self.log_file),
            "bind-address": self.host,
            "port": str(self.port),
            "skip-name-resolve": "",
            "server-id": str(self.server_id),
            "log-bin": str(self.data_dir / "binlog"),
            "binlog-format": "ROW",
            "binlog-row-image": "FULL",
            "gtid-domain-id": "0",
            "gtid-strict-mode": "ON",
            "default-time-zone": "+00:00",
            "character-set-server": "utf8mb4",
            "collation-server": "utf8mb4_general_ci",
            # A throwaway server: small, no durability needed.
            "innodb-buffer-pool-size": "32M",
            "innodb-log-file-size": "16M",
            "innodb-flush-log-at-trx-commit": "2",
            "sync-binlog": "0",
            "performance-schema": "OFF",
            "max-connections": "40",
            **self.settings,
        }
        args = [f"--{k}={v}" if v != "" else f"--{k}" for k, v in settings.items()]
        return ["--no-defaults", *self._user_args(), *args]

    def _start_on_port(self, timeout: float) -> None:
        if port_open(self.host, self.port):
            raise MariaDBError(f"{self.host}:{self.port}: Address already in use")
        self._process = subprocess.Popen(
            [str(self.mariadbd), *self._server_args()],
            cwd=self._root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                self._process = None
                raise MariaDBError(f"mariadbd exited ({code}):{self._tail()}")
            if self.socket.exists() and port_open(self.host, self.port):
                with contextlib.suppress(MariaDBError):
                    self.root_sql("SELECT 1")
                    return
            time.sleep(0.2)
        self.stop()
        raise MariaDBError(f"mariadbd not ready within {timeout}s:{self._tail()}")
