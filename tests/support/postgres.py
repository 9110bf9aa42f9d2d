"""A throwaway PostgreSQL 15 cluster for tests (the source of the PostgreSQL → Debezium → Kafka
pipeline): ``initdb`` into a folder of its own, ``wal_level=logical``, listening only on
127.0.0.1 on a free port, password (SCRAM) authentication over TCP for normal and replication
connections, started with ``pg_ctl start -w`` and stopped with ``pg_ctl stop -m fast`` (killed
when that fails).

The server binaries come from the Debian package ``postgresql-15`` (``/usr/lib/postgresql/15/bin``,
``make postgres`` installs it as root); ``PG_BIN`` overrides the folder.

PostgreSQL refuses to run as root. Run as root, the cluster belongs to a system user of its own
(``cdcpg``, created once with ``useradd --system``), ``initdb`` and ``pg_ctl`` run as that user
(``runuser``), and the cluster lives in a folder of its own under the system's tmp dir (mode
0755: pytest's tmp dirs, under ``/tmp/pytest-of-root`` with mode 0700, are not traversable by
another user), removed at ``stop``; the server's log is copied into ``workdir`` first. Run as
anyone else, the cluster is ``workdir/pg`` itself (or, when that path is too long for the unix
socket, a folder under /tmp as for root).

    pg = PostgresCluster(tmp_path)
    pg.start()
    pg.execute("CREATE TABLE t (id int PRIMARY KEY, name text)")
    pg.execute("INSERT INTO t VALUES (%s, %s)", (1, "a"))
    pg.read_table("t")  # [{"id": 1, "name": "a"}]
    pg.stop()
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from tests.support.localserver import LocalServer
from tests.support.ports import port_open

log = logging.getLogger(__name__)

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_PACKAGE = "postgresql-15"
OS_USER = "cdcpg"
"""The system user that runs the cluster when the tests run as root."""
_BIND_FAILED = ("could not bind", "Address already in use", "could not create any TCP/IP sockets")


class PostgresError(RuntimeError):
    """The cluster could not be set up, started or stopped (the message carries its log's tail)."""


def ensure_os_user(name: str = OS_USER) -> pwd.struct_passwd:
    """The system user ``name``, created (no home, no login shell) if it does not exist yet."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    done = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
    )
    # 9: the name is taken (another process created it in between): fine.
    if done.returncode not in (0, 9):
        raise PostgresError(f"useradd {name} failed ({done.returncode}): {done.stderr.strip()}")
    return pwd.getpwnam(name)


class PostgresCluster(LocalServer):
    """One PostgreSQL server on ``127.0.0.1:port`` with a database ``dbname`` owned by the
    superuser ``user`` (who may also open replication connections, as Debezium does)."""

    NAME = "PostgreSQL"
    LOG_NAME = "postgres.log"
    ERROR = PostgresError
    BIND_FAILED = _BIND_FAILED

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        user: str = "cdc",
        password: str = "cdc-secret",
        dbname: str = "cdc",
        bin_dir: Path | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        """``settings``: more ``postgresql.conf`` settings (values as written in the file, e.g.
        ``{"max_wal_size": "'1GB'"}``), over the ones written here."""
        super().__init__(workdir, port=port, os_user=OS_USER)
        self.user = user
        self.password = password
        self.dbname = dbname
        self.bin_dir = Path(bin_dir or PG_BIN)
        self.settings = dict(settings or {})
        self._own_root = False
        """Whether ``root`` is a folder of its own under /tmp (removed at ``stop``)."""

    # -- addresses -----------------------------------------------------------------------
    @property
    def dsn(self) -> str:
        return (
            f"host={self.host} port={self.port} user={self.user} "
            f"password={self.password} dbname={self.dbname}"
        )

    @property
    def socket_dir(self) -> Path:
        return self._root / "sock"

    # -- lifecycle (``LocalServer.start``: ``initdb``, the configuration and ``pg_ctl start``
    # on the port, the database created) ---------------------------------------------------
    def _start_on_port(self, timeout: float) -> None:
        self._write_config()
        self._pg_ctl_start(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """``pg_ctl stop -m fast``; the postmaster is killed when that fails. Then, as root, the
        cluster's folder is removed (its log copied into ``workdir`` first)."""
        if self.root is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            done = self._run(
                [
                    str(self.bin_dir / "pg_ctl"),
                    "stop",
                    "-D",
                    str(self.data_dir),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    str(int(timeout)),
                ],
                check=False,
            )
            if done.returncode != 0:
                log.warning("pg_ctl stop failed (%s): killing the postmaster", done.returncode)
                self._kill_postmaster()
        if self._own_root:
            self._remove_root()
        self.root = None

    def is_running(self) -> bool:
        return self.root is not None and port_open(self.host, self.port)

    # -- SQL -----------------------------------------------------------------------------
    def connect(self, *, dbname: str | None = None) -> psycopg.Connection[Any]:
        """A new connection (autocommit off: commit it, or use it as a context manager, which
        commits on success and rolls back on an error)."""
        return psycopg.connect(self.dsn if dbname is None else f"{self.dsn} dbname={dbname}")

    def execute(self, statement: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement in a transaction of its own (committed); returns its rows (empty
        for a statement that returns none)."""
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(statement.encode(), params)  # bytes: a statement built at run time
            return cur.fetchall() if cur.description is not None else []

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor in one transaction, committed when the block ends without an error."""
        with self.connect() as conn, conn.cursor() as cur:
            yield cur

    def read_table(self, table: str, key: str | Sequence[str] = "id") -> list[dict[str, Any]]:
        """Every row of ``table`` (``schema.table`` or ``table``) as a dict, ordered by ``key``
        (a column or columns)."""
        keys = [key] if isinstance(key, str) else list(key)
        query = sql.SQL("SELECT * FROM {} ORDER BY {}").format(
            sql.Identifier(*table.split(".")),
            sql.SQL(", ").join(sql.Identifier(k) for k in keys),
        )
        with self.connect() as conn, conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query)
            return list(cur.fetchall())

    # -- internals -----------------------------------------------------------------------
    def _check_prerequisites(self) -> None:
        for tool in ("initdb", "pg_ctl", "postgres"):
            if not (self.bin_dir / tool).exists():
                raise PostgresError(
                    f"no {self.bin_dir / tool}: PostgreSQL 15 is needed (the Debian package "
                    f"{PG_PACKAGE}: `make postgres` as root, or apt-get install {PG_PACKAGE}; "
                    "PG_BIN=<dir> for binaries elsewhere)"
                )

    def _make_root(self) -> None:
        # A unix socket's path is at most 107 bytes: a deep workdir gets a folder under /tmp.
        socket = self.workdir / "pg" / "sock" / ".s.PGSQL.65535"
        self._own_root = self.os_user is not None or len(str(socket).encode()) > 100
        if not self._own_root:
            self.root = self.workdir / "pg"
            shutil.rmtree(self.root, ignore_errors=True)
            self.root.mkdir(parents=True)
            return
        if self.os_user is not None:
            ensure_os_user(self.os_user)
        self.root = self._own_folder()

    def _run(
        self, command: list[str], *, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        if self.os_user is not None:
            command = ["runuser", "-u", self.os_user, "--", *command]
        done = subprocess.run(
            command,
            cwd=self._root,  # the other user may not be allowed into the caller's cwd
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"},
        )
        if check and done.returncode != 0:
            raise PostgresError(
                f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                f"{self._tail()}"
            )
        return done

    def _write_as_owner(self, path: Path, text: str, mode: int = 0o600) -> None:
        path.write_text(text)
        path.chmod(mode)
        self._give(path)

    def _prepare(self) -> None:
        pwfile = self._root / "pwfile"
        self._write_as_owner(pwfile, self.password + "\n")
        try:
            self._run(
                [
                    str(self.bin_dir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    self.user,
                    f"--pwfile={pwfile}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--no-locale",
                    "--no-sync",
                    "--no-instructions",
                ]
            )
        finally:
            pwfile.unlink(missing_ok=True)
        self.socket_dir.mkdir(mode=0o700)
        self._give(self.socket_dir)

    def _write_config(self) -> None:
        settings = {
            "listen_addresses": f"'{self.host}'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "wal_level": "logical",
            "max_replication_slots": "10",
            "max_wal_senders": "10",
            "max_connections": "40",
            "shared_buffers": "32MB",
            # A throwaway cluster: no durability needed, less I/O.
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "logging_collector": "off",
            "log_min_messages": "info",
            "timezone": "'UTC'",
            **self.settings,
        }
        # The last setting of a name in postgresql.conf wins: a restart on another port just
        # appends again. postgresql.auto.conf (ALTER SYSTEM) is left alone.
        conf = self.data_dir / "postgresql.conf"
        with conf.open("a") as f:
            f.write("\n# tests/support/postgres.py\n")
            f.writelines(f"{k} = {v}\n" for k, v in settings.items())
        hba = (
            "# tests/support/postgres.py: the socket trusted, TCP on 127.0.0.1 only, by password\n"
            "local all all trust\n"
            "local replication all trust\n"
            f"host all all {self.host}/32 scram-sha-256\n"
            f"host replication all {self.host}/32 scram-sha-256\n"
        )
        self._write_as_owner(self.data_dir / "pg_hba.conf", hba)

    def _pg_ctl_start(self, timeout: float) -> None:
        if port_open(self.host, self.port):
            raise PostgresError(f"could not bind {self.host}:{self.port}: Address already in use")
        done = self._run(
            [
                str(self.bin_dir / "pg_ctl"),
                "start",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                str(int(timeout)),
            ],
            check=False,
            timeout=timeout + 30,
        )
        if done.returncode != 0:
            self._kill_postmaster()
            raise PostgresError(
                f"pg_ctl start failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                f"{self._tail()}"
            )

    def _ready(self) -> None:
        with psycopg.connect(
            f"host={self.host} port={self.port} user={self.user} password={self.password} "
            "dbname=postgres",
            autocommit=True,
        ) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.dbname)))

    def _kill_postmaster(self) -> None:
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.1)
        (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
