"""A real single-node Apache Kafka broker (KRaft: broker + controller in one JVM) on 127.0.0.1.

For tests, the demo and ``make kafka-start``. The broker's jars come from Maven (``make jars`` →
``jars/kafka``); Java 17 must be on PATH. No fake broker anywhere: what the job talks to in the
tests is the same Kafka that runs in production.

    python -m connectors.kafka_broker start --dir .kafka [--port 9092]
    python -m connectors.kafka_broker stop --dir .kafka
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JARS_DIR = PROJECT_ROOT / "jars" / "kafka"
HOST = "127.0.0.1"

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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class BrokerError(RuntimeError):
    pass


class LocalKafkaBroker:
    """One KRaft broker whose data and logs live in ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        jars_dir: Path | None = None,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.jars_dir = jars_dir or DEFAULT_JARS_DIR
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.workdir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.workdir / "broker.log"

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = 90.0, *, detach: bool = False) -> None:
        """Format storage if new, start the broker and wait until it answers."""
        if not any(self.jars_dir.glob("kafka_*.jar")):
            raise BrokerError(f"no Kafka broker jars in {self.jars_dir}: run `make jars`")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        if not (self.workdir / "data" / "meta.properties").exists():
            self._java("kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(config))
        with open(self.workdir / "broker.out", "ab") as out:
            self._process = subprocess.Popen(
                self._java_command("kafka.Kafka", str(config)),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=detach,
            )
        self.pid_file.write_text(str(self._process.pid))
        self._wait_ready(timeout)
        log.info("Kafka broker ready on %s (pid %s)", self.bootstrap, self._process.pid)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; safe to call twice."""
        pid = self._pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self._alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if self._alive(pid):
            os.kill(pid, signal.SIGKILL)
            while self._alive(pid):
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        self._process = None

    def is_running(self) -> bool:
        pid = self._pid()
        return pid is not None and self._alive(pid)

    def __enter__(self) -> LocalKafkaBroker:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def create_topics(self, names: Iterable[str], partitions: int = 1) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics(
            [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names]
        )
        for future in futures.values():
            future.result(30)

    # -- internals -----------------------------------------------------------------------
    def _write_config(self) -> Path:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{HOST}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
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
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.workdir / "log4j2.yaml").write_text(LOG4J2.format(log=self.log_file))
        return path

    def _java_command(self, main: str, *args: str) -> list[str]:
        return [
            "java",
            "-Xmx512m",
            "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.yaml'}",
            "-cp",
            f"{self.jars_dir}/*",
            main,
            *args,
        ]

    def _java(self, main: str, *args: str) -> None:
        done = subprocess.run(self._java_command(main, *args), capture_output=True, text=True)
        if done.returncode != 0:
            raise BrokerError(f"{main} {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise BrokerError(
                    f"the broker exited ({self._process.returncode}):\n{self._tail()}"
                )
            if _port_open(self.port):
                try:
                    AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=5)
                    return
                except Exception:  # not ready yet: keep waiting
                    pass
            time.sleep(0.5)
        self.stop()
        raise BrokerError(f"the broker did not answer within {timeout}s:\n{self._tail()}")

    def _tail(self, lines: int = 40) -> str:
        text = ""
        for file in (self.workdir / "broker.out", self.log_file):
            if file.exists():
                text += "\n".join(file.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    def _pid(self) -> int | None:
        if self._process is not None:
            return self._process.pid
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _alive(self, pid: int) -> bool:
        if self._process is not None and self._process.pid == pid:
            return self._process.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m connectors.kafka_broker")
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--dir", default=".kafka", help="data, logs and pid file")
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--controller-port", type=int, default=9093)
    args = parser.parse_args(argv)
    broker = LocalKafkaBroker(Path(args.dir), port=args.port, controller_port=args.controller_port)
    if args.action == "stop":
        broker.stop()
        print(f"Kafka broker in {args.dir} stopped")
        return 0
    if broker.is_running():
        print(f"Kafka broker already running on {broker.bootstrap}")
        return 0
    try:
        broker.start(detach=True)
    except BrokerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"Kafka broker running on {broker.bootstrap} (logs: {broker.log_file})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
