"""Shared fixtures: one real SparkSession (Delta + Kafka jars) and one real Kafka broker per run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from streaming.config import SparkConfig
from streaming.session import build_session
from tests.support import Workspace


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(
        SparkConfig(
            app_name="cdc-tests",
            shuffle_partitions=2,
            conf={
                "spark.driver.memory": "4g",
                "spark.sql.streaming.noDataMicroBatches.enabled": "false",
            },
        )
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from connectors.kafka_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)
