"""A real single-node Apache Kafka broker (KRaft: broker + controller in one JVM).

For tests, the demo and ``make kafka-start``. The broker's jars come from Maven (``make jars`` →
``jars/kafka``); Java 17 must be on PATH. No fake broker anywhere: what the job talks to in the
tests is the same Kafka that runs in production.

    python -m tests.support.kafka_broker start --dir .kafka [--port 9092]
    python -m tests.support.kafka_broker stop --dir .kafka

Everything lives in the work folder: ``server.properties``, ``log4j2.yaml``, ``data/`` (the log
dir, formatted once), ``broker.log`` (log4j), ``broker.out`` (JVM stdout/stderr), ``broker.pid``.

With ``scram_users`` the broker also opens a SASL listener (``SASL_PLAINTEXT``, mechanisms
SCRAM-SHA-256 and SCRAM-SHA-512) on ``sasl_bootstrap``; the users' SCRAM credentials are written
into the metadata log when the storage is formatted (``kafka-storage format --add-scram``), the
way a KRaft cluster is given its first credentials. The ``PLAINTEXT`` listener (``bootstrap``)
stays, as the inter-broker listener and for the tests' own admin calls.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.support.ports import HOST, free_ports, port_open

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JARS_DIR = PROJECT_ROOT / "jars" / "kafka"
MAIN_CLASS = "kafka.Kafka"
SASL_LISTENER = "SASL_PLAINTEXT"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_SCRAM_PASSWORD = re.compile(r"(password=)[^,\]]*")
PORT_ATTEMPTS = 3
"""Starts on newly picked ports when a picked one was taken in between (see ``start``)."""
ADDRESS_IN_USE = "Address already in use"
_BIND_FAILED = re.compile(r"failed to bind to [^\s:]+:(\d+)")

LOG4J2 = """\
Configuration:
  Appenders:
    File:
      name: FILE
      fileName: "{log}"
      PatternLayout:
        Pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: FILE
"""


class BrokerError(RuntimeError):
    """The broker could not be started (the message carries the tail of its log)."""


class _PortClash(BrokerError):
    """A port of the broker was taken (before it started, or when its JVM bound it)."""

    def __init__(self, message: str, port: int | None) -> None:
        super().__init__(message)
        self.port = port


def _cluster_id() -> str:
    """What ``kafka-storage.sh random-uuid`` prints: a UUID in URL-safe base64, no padding, and
    (like Kafka's ``Uuid.randomUuid``) never starting with ``-``, which the tool would read as an
    option."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


def _read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            props[key.strip()] = value.strip()
    return props


class LocalKafkaBroker:
    """One KRaft broker (child JVM) whose config, data, logs and pid file live in ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        jars_dir: Path | None = None,
        host: str = HOST,
        scram_users: Mapping[str, str] | None = None,
        sasl_port: int | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """``scram_users`` (name → password) opens the SASL listener on ``sasl_port`` (default:
        a free port) with those users, for SCRAM-SHA-256 and SCRAM-SHA-512. ``properties``: more
        broker settings (e.g. ``connections.max.reauth.ms``), over the ones written here."""
        self.workdir = Path(workdir).resolve()
        self.host = host
        self.scram_users = dict(scram_users or {})
        # Picked together: two ports picked one after the other may be the same one, and a
        # broker with two listeners on one port refuses to start.
        picked = iter(free_ports(3, host))
        self.port = port or next(picked)
        self.controller_port = controller_port or next(picked)
        self.jars_dir = Path(jars_dir or DEFAULT_JARS_DIR).resolve()
        self.sasl_port = (sasl_port or next(picked)) if self.scram_users else None
        self.properties = dict(properties or {})
        # The ports this object picked (not given): only those may move when one was taken
        # between picking and binding, and only until the broker first served on them.
        self._picked = {
            name
            for name, given in (
                ("port", port),
                ("controller_port", controller_port),
                ("sasl_port", sasl_port),
            )
            if not given and getattr(self, name) is not None
        }
        self._process: subprocess.Popen[bytes] | None = None
        self._log_marks: dict[Path, int] = {}

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT listener (no authentication)."""
        return f"{self.host}:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_PLAINTEXT listener (SCRAM); only with ``scram_users``."""
        if self.sasl_port is None:
            raise BrokerError("this broker has no SASL listener (no scram_users)")
        return f"{self.host}:{self.sasl_port}"

    @property
    def config_file(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def pid_file(self) -> Path:
        return self.workdir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.workdir / "broker.log"

    @property
    def out_file(self) -> Path:
        return self.workdir / "broker.out"

    @property
    def pid(self) -> int | None:
        """The broker's pid while it runs (from this object or the pid file)."""
        pid = self._pid()
        return pid if pid is not None and self._alive(pid) else None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = 60.0, *, detach: bool = False) -> None:
        """Format the storage if new, launch the broker and wait until it answers.

        ``detach`` puts the JVM in its own session so that it outlives this process.

        A port this object picked (``free_port``) is free only until someone else binds it: when
        one was taken before the broker bound it (found in use, or the JVM's bind failed) the
        broker is started again on newly picked ports, up to ``PORT_ATTEMPTS`` times in all. A
        port that was given is never moved (the clash is an error), nor is any port once the
        broker has served on it: a restart comes back on the address its clients know.
        """
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start(timeout, detach=detach)
            except _PortClash as clash:
                if attempt == PORT_ATTEMPTS or not self._repick(clash.port):
                    raise
                said = str(clash).splitlines()[0]
                log.warning("%s: starting the Kafka broker on other ports", said)
            else:
                self._picked.clear()  # served on these ports: they are its address now
                return

    def _repick(self, taken: int | None) -> bool:
        """New free ports for the ones this object picked; False when the port that was
        ``taken`` (None: not known which) is not one of them, or none was picked."""
        if not self._picked:
            return False
        if taken is not None and taken not in {getattr(self, name) for name in self._picked}:
            return False
        for name, new_port in zip(sorted(self._picked), free_ports(3, self.host), strict=False):
            setattr(self, name, new_port)
        return True

    def _start(self, timeout: float, *, detach: bool) -> None:
        self._check_prerequisites()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        if (self.data_dir / "meta.properties").exists():
            log.info("Kafka storage in %s already formatted", self.data_dir)
        else:
            scram = [
                arg
                for name, password in self.scram_users.items()
                for mechanism in SCRAM_MECHANISMS
                for arg in ("--add-scram", f"{mechanism}=[name={name},password={password}]")
            ]
            self._run_tool(
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={_cluster_id()}",
                f"--config={self.config_file}",
                *scram,
            )
        started = time.monotonic()
        self._log_marks = self._log_sizes()
        with open(self.out_file, "ab") as out:
            self._process = subprocess.Popen(
                self._java_command(MAIN_CLASS, str(self.config_file)),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=detach,
            )
        self.pid_file.write_text(f"{self._process.pid}\n")
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        log.info(
            "Kafka broker ready on %s in %.1fs (pid %s, log %s)",
            self.bootstrap,
            time.monotonic() - started,
            self._process.pid,
            self.log_file,
        )

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; does nothing when no broker runs."""
        pid = self._pid()
        if pid is not None and self._alive(pid):
            log.info("stopping the Kafka broker (pid %s)", pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not self._wait_gone(pid, timeout):
                log.warning("the Kafka broker did not stop within %ss: SIGKILL", timeout)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                if not self._wait_gone(pid, 10.0):
                    raise BrokerError(f"the Kafka broker (pid {pid}) survived SIGKILL")
        self.pid_file.unlink(missing_ok=True)
        self._process = None

    def is_running(self) -> bool:
        return self.pid is not None

    def __enter__(self) -> LocalKafkaBroker:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def create_topics(self, names: Iterable[str], partitions: int = 1) -> None:
        """Create topics (replication factor 1); topics that already exist are left alone."""
        topics = [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names]
        if not topics:
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # keep it alive: the futures
        futures = admin.create_topics(topics, operation_timeout=30)  # die with the client
        for name, future in futures.items():
            try:
                future.result(30)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                log.debug("topic %s already exists", name)

    # -- internals -----------------------------------------------------------------------
    def _check_prerequisites(self) -> None:
        if not any(self.jars_dir.glob("kafka_*.jar")):
            raise BrokerError(f"no Kafka broker jars in {self.jars_dir}: run `make jars`")
        if shutil.which("java") is None:
            raise BrokerError("`java` is not on PATH (the Kafka broker needs Java 17+)")
        running = self.pid
        if running is not None:
            raise BrokerError(f"a Kafka broker already runs in {self.workdir} (pid {running})")
        for port in (self.port, self.controller_port, self.sasl_port):
            if port is not None and port_open(self.host, port):
                raise _PortClash(f"port {self.host}:{port} is already in use", port)

    def _write_config(self) -> None:
        host, port, controller = self.host, self.port, self.controller_port
        listeners = [f"PLAINTEXT://{host}:{port}"]
        protocols = ["PLAINTEXT:PLAINTEXT"]
        if self.sasl_port is not None:
            listeners.append(f"{SASL_LISTENER}://{host}:{self.sasl_port}")
            protocols.append(f"{SASL_LISTENER}:{SASL_LISTENER}")
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            # A static quorum: formatting needs no --standalone/--initial-controllers and the
            # controller port may change between restarts of the same data dir.
            "controller.quorum.voters": f"1@{host}:{controller}",
            "listeners": ",".join([*listeners, f"CONTROLLER://{host}:{controller}"]),
            "advertised.listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join([*protocols, "CONTROLLER:PLAINTEXT"]),
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.sasl_port is not None:
            # The broker side of SCRAM needs the login module for the listener, without
            # credentials: the users' are in the metadata log (added when formatting).
            prefix = f"listener.name.{SASL_LISTENER.lower()}"
            props[f"{prefix}.sasl.enabled.mechanisms"] = ",".join(SCRAM_MECHANISMS)
            for mechanism in SCRAM_MECHANISMS:
                props[f"{prefix}.{mechanism.lower()}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
        props.update(self.properties)
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.workdir / "log4j2.yaml").write_text(LOG4J2.format(log=self.log_file))

    def _java_command(self, main: str, *args: str) -> list[str]:
        return [
            "java",
            "-Xms128m",
            "-Xmx512m",
            "-XX:+UseG1GC",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.yaml'}",
            "-cp",
            f"{self.jars_dir}/*",
            main,
            *args,
        ]

    def _run_tool(self, main: str, *args: str) -> None:
        command = self._java_command(main, *args)
        log.info("running %s", _SCRAM_PASSWORD.sub(r"\1**********", " ".join(command)))
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            said = _SCRAM_PASSWORD.sub(r"\1**********", " ".join(args))
            raise BrokerError(
                f"{main} {said} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
            )

    def _wait_ready(self, timeout: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self._process.poll()
            said = self._new_log_text()
            if ADDRESS_IN_USE in said:  # the JVM's bind failed (it exits, or is about to)
                bound = _BIND_FAILED.search(said)
                raise _PortClash(
                    f"the Kafka broker could not bind its port:\n{self._tail()}",
                    int(bound.group(1)) if bound else None,
                )
            if code is not None:
                raise BrokerError(f"the Kafka broker exited ({code}):\n{self._tail()}")
            if port_open(self.host, self.port):
                admin = AdminClient({"bootstrap.servers": self.bootstrap})
                with contextlib.suppress(KafkaException):
                    if admin.list_topics(timeout=5).brokers:
                        return
            time.sleep(0.25)
        raise BrokerError(f"the Kafka broker did not answer within {timeout}s:\n{self._tail()}")

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def _log_sizes(self) -> dict[Path, int]:
        return {f: f.stat().st_size if f.exists() else 0 for f in (self.out_file, self.log_file)}

    def _new_log_text(self) -> str:
        """What the broker's log files gained since this start launched the JVM."""
        text = ""
        for file, size in self._log_marks.items():
            if file.exists():
                with file.open("rb") as f:
                    f.seek(size)
                    text += f.read().decode(errors="replace")
        return text

    def _tail(self, lines: int = 40) -> str:
        text = ""
        for file in (self.out_file, self.log_file):
            if file.exists():
                tail = file.read_text(errors="replace").splitlines()[-lines:]
                text += f"--- {file} ---\n" + "\n".join(tail) + "\n"
        return text or "(no broker log)"

    def _pid(self) -> int | None:
        if self._process is not None:
            return self._process.pid
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _alive(self, pid: int) -> bool:
        """Whether ``pid`` is this work folder's broker (a stale pid file never matches)."""
        if self._process is not None and self._process.pid == pid:
            return self._process.poll() is None
        with contextlib.suppress(ChildProcessError):  # our child, started by another object
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # someone else's process
            return False
        cmdline = Path(f"/proc/{pid}/cmdline")
        if not Path("/proc/self").exists():  # no procfs (macOS): trust the pid file
            return True
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            return False
        return MAIN_CLASS.encode() in args and str(self.config_file).encode() in args


def _running_bootstrap(workdir: Path) -> str | None:
    """The advertised address written by the broker that runs in ``workdir``."""
    try:
        advertised = _read_properties(workdir / "server.properties")["advertised.listeners"]
    except (FileNotFoundError, KeyError):
        return None
    return advertised.partition("://")[2].split(",")[0] or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.kafka_broker",
        description="Start or stop a local single-node Kafka broker (KRaft).",
    )
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--dir", default=".kafka", help="config, data, logs and pid file")
    parser.add_argument("--port", type=int, default=9092, help="client port (default 9092)")
    parser.add_argument(
        "--controller-port", type=int, default=None, help="KRaft controller port (default: free)"
    )
    parser.add_argument("--jars-dir", type=Path, default=None, help="default: jars/kafka")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    workdir = Path(args.dir)
    broker = LocalKafkaBroker(
        workdir,
        port=args.port,
        controller_port=args.controller_port,
        jars_dir=args.jars_dir,
    )
    if args.action == "stop":
        pid = broker.pid
        try:
            broker.stop(timeout=args.timeout)
        except BrokerError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        message = f"stopped (pid {pid})" if pid else "was not running"
        print(f"Kafka broker in {workdir}: {message}", file=sys.stderr)
        return 0
    if broker.is_running():
        print(f"Kafka broker already running (pid {broker.pid})", file=sys.stderr)
        print(_running_bootstrap(broker.workdir) or broker.bootstrap)
        return 0
    try:
        broker.start(timeout=args.timeout, detach=True)
    except BrokerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"Kafka broker running (pid {broker.pid}, log {broker.log_file})", file=sys.stderr)
    print(broker.bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
