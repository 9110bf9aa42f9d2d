"""The ports the test servers pick: distinct, even where the kernel hands a released port out
again at once (CI once started a Kafka broker with its client and controller listeners on one
port: ``two listeners on the same port``)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.support import ports
from tests.support.kafka_broker import LocalKafkaBroker


class ReusingKernel:
    """A socket whose ``bind(..., 0)`` gets the lowest port no open socket holds: a port is
    handed out again as soon as the socket that had it is closed."""

    bound: ClassVar[set[int]] = set()

    def __init__(self, *_: Any) -> None:
        self.port: int | None = None

    def bind(self, address: tuple[str, int]) -> None:
        port = 40000
        while port in self.bound:
            port += 1
        self.port = port
        self.bound.add(port)

    def getsockname(self) -> tuple[str, int]:
        assert self.port is not None
        return ports.HOST, self.port

    def close(self) -> None:
        self.bound.discard(self.port or -1)

    def __enter__(self) -> ReusingKernel:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


@pytest.fixture
def reusing_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    ReusingKernel.bound = set()
    monkeypatch.setattr(socket, "socket", ReusingKernel)  # as tests.support.ports calls it


@pytest.mark.usefixtures("reusing_kernel")
def test_free_port_twice_may_repeat_itself_so_free_ports_picks_them_together() -> None:
    assert ports.free_port() == ports.free_port()  # what the kernel may do
    picked = ports.free_ports(3)
    assert len(set(picked)) == 3


@pytest.mark.usefixtures("reusing_kernel")
def test_a_kafka_broker_picks_distinct_ports_for_its_listeners(tmp_path: Path) -> None:
    broker = LocalKafkaBroker(tmp_path, scram_users={"u": "p"})
    listeners = [broker.port, broker.controller_port, broker.sasl_port]
    assert len(set(listeners)) == 3, listeners
    assert broker._repick(None)  # moved when one was taken: still three distinct ports
    moved = [broker.port, broker.controller_port, broker.sasl_port]
    assert len(set(moved)) == 3, moved


def test_free_ports_are_distinct_on_the_real_kernel() -> None:
    picked = ports.free_ports(20)
    assert len(set(picked)) == 20
