"""The source databases the Debezium tests run against, by name (a test parametrised over
``KINDS`` gets each in turn): a PostgreSQL 15 cluster or a MariaDB 10.11 server of its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.support.mariadb import MariaDBServer
from tests.support.postgres import PostgresCluster

__all__ = ["KINDS", "running"]

KINDS = ("postgresql", "mariadb")


@contextmanager
def running(
    kind: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PostgresCluster | MariaDBServer]:
    """The database server ``kind`` (one of ``KINDS``), started, stopped when the block ends."""
    server = PostgresCluster if kind == "postgresql" else MariaDBServer
    with server(tmp_path_factory.mktemp(kind)) as running_server:
        yield running_server
