"""The local Kafka broker the tests and ``make kafka-start`` use is a real one."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from connectors.kafka_broker import LocalKafkaBroker, free_port

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    for _ in range(60):
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None and msg.value() is not None:
            got.append(msg.value())
        if len(got) == count:
            break
    consumer.close()
    return got


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_broker_round_trips_messages_and_keeps_them_across_a_restart(tmp_path: Path) -> None:
    broker = LocalKafkaBroker(tmp_path / "kafka")
    with broker:
        broker.create_topics(["t1"])
        produce(broker.bootstrap, "t1", [b"a", b"b", b"c"])
        assert consume(broker.bootstrap, "t1", 3) == [b"a", b"b", b"c"]
    assert not broker.is_running() and port_closed(broker.port)
    with LocalKafkaBroker(
        tmp_path / "kafka", port=broker.port, controller_port=broker.controller_port
    ) as again:
        assert consume(again.bootstrap, "t1", 3) == [b"a", b"b", b"c"]


def test_module_cli_starts_a_detached_broker_and_stops_it(tmp_path: Path) -> None:
    port, controller = free_port(), free_port()
    folder = str(tmp_path / "k")
    cli = [sys.executable, "-m", "connectors.kafka_broker"]
    start = [
        *cli,
        "start",
        "--dir",
        folder,
        "--port",
        str(port),
        "--controller-port",
        str(controller),
    ]
    done = subprocess.run(start, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"127.0.0.1:{port}" in done.stdout
    try:
        produce(f"127.0.0.1:{port}", "t2", [b"x"])  # the broker outlived the CLI process
        assert consume(f"127.0.0.1:{port}", "t2", 1) == [b"x"]
    finally:
        stop = subprocess.run([*cli, "stop", "--dir", folder], cwd=ROOT, timeout=60)
    assert stop.returncode == 0 and port_closed(port)
