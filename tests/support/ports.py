"""TCP ports for the servers the tests start on 127.0.0.1.

A port found free is free only until someone else binds it: a server started on one must be
retried on another when its bind fails (``retry_on_port_clash``), or the port must be bound by the
process that uses it (port 0, then read back which one it got)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TypeVar

HOST = "127.0.0.1"
T = TypeVar("T")


def free_port(host: str = HOST) -> int:
    """A TCP port that was free a moment ago (see the module's note)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct TCP ports that were free a moment ago: bound all at once, so the
    kernel cannot hand the same one out twice (as ``free_port`` called twice may, once the
    first socket is closed)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_open(host: str, port: int) -> bool:
    """Whether something accepts connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def retry_on_port_clash(start: Callable[[], T], attempts: int = 3) -> T:
    """``start()`` — which picks its ports with ``free_port`` — again when it fails because a
    port was taken in between (an ``OSError``, or any error whose message says the address is in
    use); the last failure is raised."""
    for attempt in range(attempts):
        try:
            return start()
        except Exception as e:  # re-raised unless it is a port clash
            clash = isinstance(e, OSError) or "in use" in str(e).lower()
            if not clash or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
