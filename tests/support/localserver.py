"""What the tests' own database servers (``postgres.PostgresCluster``, ``mariadb.MariaDBServer``)
share: a folder made at ``start`` (of its own under the system's tmp dir, mode 0755, owned by the
server's system user when the tests run as root: pytest's tmp dirs are not traversable by
another user, and a unix socket's path is at most 107 bytes), a free port on 127.0.0.1 moved
when it was taken in between (up to ``PORT_ATTEMPTS`` times), the log's tail in every error,
the log copied into ``workdir`` when the folder is removed at ``stop``, and use as a context
manager. A server says how it is prepared (``_prepare``), started on the port (``_start_on_port``),
made ready for the tests (``_ready``) and stopped (``stop``)."""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from tests.support.ports import HOST, free_port

__all__ = ["PORT_ATTEMPTS", "LocalServer", "terminate"]

log = logging.getLogger(__name__)

PORT_ATTEMPTS = 3


def terminate(process: subprocess.Popen[bytes] | None, name: str, timeout: float) -> None:
    """SIGTERM to a server's process (a clean shutdown), SIGKILL after ``timeout`` seconds;
    nothing when it is not running."""
    if process is None or process.poll() is not None:
        return
    log.info("stopping %s (pid %s)", name, process.pid)
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("%s did not stop within %ss: SIGKILL", name, timeout)
        process.kill()
        process.wait(10)


class LocalServer:
    NAME: ClassVar[str] = ""
    """How logs and errors name it (``PostgreSQL``)."""
    LOG_NAME: ClassVar[str] = ""
    """Its log's file name, in its folder and in ``workdir`` after ``stop``."""
    ERROR: ClassVar[type[RuntimeError]] = RuntimeError
    """What it raises (the message carries the log's tail)."""
    BIND_FAILED: ClassVar[tuple[str, ...]] = ()
    """Texts of an error that says the port was taken."""

    def __init__(self, workdir: Path, *, port: int | None, os_user: str) -> None:
        """``os_user``: the system user the server runs as when the tests run as root."""
        self.workdir = Path(workdir).resolve()
        self.host = HOST
        self.port = port or free_port()
        self._port_picked = port is None
        self.os_user = os_user if os.geteuid() == 0 else None
        self.root: Path | None = None
        """The server's folder (data, socket, log), made by ``start``."""
        self.startup_seconds: float | None = None

    @property
    def data_dir(self) -> Path:
        return self._root / "data"

    @property
    def log_file(self) -> Path:
        return self._root / self.LOG_NAME

    @property
    def _root(self) -> Path:
        if self.root is None:
            raise self.ERROR(f"the {self.NAME} server was not started")
        return self.root

    def start(self, timeout: float = 60.0) -> Self:
        """Prepared, started and made ready; returns ``self`` (stopped again on any error)."""
        started = time.monotonic()
        self._check_prerequisites()
        if self.root is not None:
            raise self.ERROR(f"this {self.NAME} server already runs in {self.root}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._make_root()
        try:
            self._prepare()
            for attempt in range(1, PORT_ATTEMPTS + 1):
                try:
                    self._start_on_port(timeout)
                    break
                except self.ERROR as e:
                    clash = any(said in str(e) for said in self.BIND_FAILED)
                    if not (clash and self._port_picked) or attempt == PORT_ATTEMPTS:
                        raise
                    log.warning("%s could not bind port %s: another port", self.NAME, self.port)
                    self.port = free_port()
            self._ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        log.info(
            "%s ready on %s:%s in %.1fs (data %s)",
            self.NAME,
            self.host,
            self.port,
            self.startup_seconds,
            self.data_dir,
        )
        return self

    def stop(self, timeout: float = 30.0) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- for the servers ---------------------------------------------------------------------
    def _check_prerequisites(self) -> None:
        """Raise ``ERROR`` saying what to install when the server's programs are missing."""

    def _make_root(self) -> None:
        self.root = self._own_folder()

    def _own_folder(self) -> Path:
        """A folder of its own under the system's tmp dir, the server's user's when it has one."""
        root = Path(tempfile.mkdtemp(prefix=f"cdc-{self.NAME.lower()}-"))
        root.chmod(0o755)
        self._give(root)
        return root

    def _give(self, path: Path) -> None:
        """``path`` to the server's system user (when the tests run as root)."""
        if self.os_user is not None:
            account = pwd.getpwnam(self.os_user)
            os.chown(path, account.pw_uid, account.pw_gid)

    def _prepare(self) -> None:
        """The data folder made (``initdb``, ``mariadb-install-db``)."""

    def _start_on_port(self, timeout: float) -> None:
        """The server started on ``port``; ``ERROR`` with one of ``BIND_FAILED`` when taken."""
        raise NotImplementedError

    def _ready(self) -> None:
        """What the tests need made once it runs (the database, the user)."""

    def _remove_root(self) -> None:
        """The folder removed, its log copied into ``workdir`` first."""
        if self.root is None:
            return
        with contextlib.suppress(OSError):
            self.workdir.mkdir(parents=True, exist_ok=True)
            if self.log_file.exists():
                shutil.copyfile(self.log_file, self.workdir / self.LOG_NAME)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def _tail(self, lines: int = 40) -> str:
        if self.root is None or not self.log_file.exists():
            return ""
        tail = self.log_file.read_text(errors="replace").splitlines()[-lines:]
        return f"\n--- {self.log_file} ---\n" + "\n".join(tail) + "\n"
