"""The local Kafka broker is a real one: KRaft broker + controller in a child JVM (no mocks)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.kafka import read_values
from tests.support.kafka_broker import BrokerError, LocalKafkaBroker
from tests.support.ports import HOST, free_port, port_open

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "tests.support.kafka_broker"]
MESSAGES = [b"first", b"second", b"third"]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def listening(port: int) -> bool:
    return port_open(HOST, port)


def cluster_id(workdir: Path) -> str:
    for line in (workdir / "data" / "meta.properties").read_text().splitlines():
        if line.startswith("cluster.id="):
            return line.partition("=")[2]
    raise AssertionError("no cluster.id in meta.properties")


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is not a Kafka broker."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


@pytest.mark.kafka
def test_messages_round_trip_and_survive_a_restart_on_new_ports(tmp_path: Path) -> None:
    workdir = tmp_path / "kafka"
    broker = LocalKafkaBroker(workdir)
    with broker:
        assert broker.is_running()
        assert broker.bootstrap == f"127.0.0.1:{broker.port}"
        assert (workdir / "broker.pid").read_text().strip() == str(broker.pid)
        broker.create_topics(["events"])
        broker.create_topics(["events"])  # already there: no error
        produce(broker.bootstrap, "events", MESSAGES)
        assert read_values(broker.bootstrap, "events") == MESSAGES
        formatted_as = cluster_id(workdir)
        # a second broker on the same folder is refused before any JVM starts
        with pytest.raises(BrokerError, match="already runs"):
            LocalKafkaBroker(workdir).start()
    assert not broker.is_running()
    assert not listening(broker.port) and not listening(broker.controller_port)
    assert not (workdir / "broker.pid").exists()
    broker.stop()  # idempotent

    again = LocalKafkaBroker(workdir)  # the same data dir on other free ports
    assert again.port != broker.port
    # Someone binds the port it picked before its JVM does (bound, not listening: only the
    # JVM's own bind finds it taken): it starts again on newly picked ports.
    with socket.socket() as taken:
        taken.bind((HOST, again.port))
        with again:
            assert again.port != taken.getsockname()[1]
            assert again.bootstrap == f"{HOST}:{again.port}"
            assert cluster_id(workdir) == formatted_as  # not reformatted
            assert read_values(again.bootstrap, "events") == MESSAGES
    assert not listening(again.port)
    log = (workdir / "broker.log").read_text()
    assert "Kafka Server started" in log  # log4j writes to the file, not the console


def test_start_refuses_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        broker = LocalKafkaBroker(tmp_path / "k", port=port)
        with pytest.raises(BrokerError, match=f"127.0.0.1:{port} is already in use"):
            broker.start()
    assert not broker.is_running()


def test_missing_jars_say_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="run `make jars`"):
        LocalKafkaBroker(tmp_path / "k", jars_dir=tmp_path / "no-jars").start()
    done = subprocess.run(
        [*CLI, "start", "--dir", str(tmp_path / "k"), "--jars-dir", str(tmp_path / "no-jars")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1
    assert "run `make jars`" in done.stderr and done.stdout == ""


def test_a_stale_pid_file_never_signals_another_process(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    workdir = tmp_path / "k"
    workdir.mkdir()
    (workdir / "broker.pid").write_text(f"{sleeper.pid}\n")
    broker = LocalKafkaBroker(workdir)
    assert not broker.is_running() and broker.pid is None
    broker.stop()
    assert sleeper.poll() is None  # still alive: not ours to kill
    assert not (workdir / "broker.pid").exists()


@pytest.mark.kafka
def test_cli_starts_a_detached_broker_that_a_later_stop_ends(tmp_path: Path) -> None:
    workdir = tmp_path / "cli"
    port = free_port()
    start = [*CLI, "start", "--dir", str(workdir), "--port", str(port)]
    stop = [*CLI, "stop", "--dir", str(workdir)]
    done = subprocess.run(start, capture_output=True, text=True, cwd=ROOT, timeout=90)
    try:
        assert done.returncode == 0, done.stderr
        bootstrap = done.stdout.strip()
        assert bootstrap == f"127.0.0.1:{port}"
        # the CLI process has exited; the broker it started still serves
        produce(bootstrap, "cli-topic", [b"x"])
        assert read_values(bootstrap, "cli-topic") == [b"x"]
        # starting again reports the running broker's address, whatever --port says
        other = [*CLI, "start", "--dir", str(workdir), "--port", str(free_port())]
        again = subprocess.run(other, capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert again.returncode == 0 and again.stdout.strip() == bootstrap
    finally:
        stopped = subprocess.run(stop, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped (pid" in stopped.stderr
    assert not listening(port)
    assert not (workdir / "broker.pid").exists()
    twice = subprocess.run(stop, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert twice.returncode == 0 and "was not running" in twice.stderr
