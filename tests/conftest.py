"""Shared fixtures: one real SparkSession (Delta + Kafka jars) and one real Kafka broker per run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from streaming.core.config import SparkConfig
from streaming.runtime.session import build_session
from tests.support import Workspace


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The shared session. A job created in it on a fresh warehouse copies its empty tables
    from a template made once per set of definitions (tests/support/prepared.py: ~2.3 s less
    for each such test); ``cdc`` processes create theirs as users' jobs do."""
    from streaming.runtime import job
    from tests.support.prepared import CachedPreparation

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
    with pytest.MonkeyPatch.context() as patch:
        root = tmp_path_factory.mktemp("prepared")
        patch.setattr(job, "prepare_tables", CachedPreparation(job.prepare_tables, root))
        yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.support.kafka_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


# -- markers that select what they say -------------------------------------------------------
# A test that uses the SparkSession (directly or through another fixture) is marked `spark`, one
# that uses the Kafka broker `kafka`, whether or not its module says so: `-m "not spark"` selects
# exactly the tests that start no Spark here. Tests that start Spark or Kafka in a process of
# their own carry the marker in their module. tests/unit holds only tests that need neither.
FIXTURE_MARKERS = {"spark": "spark", "kafka_broker": "kafka"}
PROCESS_MARKERS = ("spark", "kafka", "s3", "cluster")


def _mark_by_fixtures(items: list[pytest.Item]) -> None:
    problems = []
    for item in items:
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)
        marked = [m for m in PROCESS_MARKERS if item.get_closest_marker(m)]
        where = Path(str(item.path)).parent.name
        if where == "unit" and marked:
            problems.append(f"{item.nodeid}: a unit test marked {marked} (move it to integration)")
    if problems:
        raise pytest.UsageError("\n".join(problems))


# -- the s3a warehouse tests (tests/integration/test_s3_warehouse.py) ---------------------------
# They need jars/s3 (hadoop-aws + the AWS SDK bundle, ~690 MB; `make jars-s3`, which `make test`
# and `make test-s3` run first). A run without those jars deselects them and says so (in the
# header and the "deselected" count) — except under CI (CI=true), where a missing jar is an error:
# CI must never pass by not running them. Chosen explicitly (`-m s3`) they are never deselected:
# without the jars they fail, naming `make jars-s3`.
S3_JARS = Path(__file__).resolve().parents[1] / "jars" / "s3"


def s3_jars_present() -> bool:
    return any(S3_JARS.glob("hadoop-aws-*.jar")) and any(S3_JARS.glob("bundle-*.jar"))


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_report_header(config: pytest.Config) -> str:
    if s3_jars_present():
        return f"s3 tests: run (jars in {S3_JARS})"
    if under_ci():
        return "s3 tests: no jars/s3 under CI: an error (`make jars-s3` fetches them)"
    return "s3 tests: deselected, no jars/s3 (`make test-s3` fetches them and runs them)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark_by_fixtures(items)
    if s3_jars_present() or "s3" in (config.option.markexpr or ""):
        return
    dropped = [item for item in items if item.get_closest_marker("s3")]
    if dropped and under_ci():
        raise pytest.UsageError(
            f"{len(dropped)} s3 tests selected but {S3_JARS} has no hadoop-aws/bundle jars: "
            "run `make jars-s3` (under CI a missing optional jar fails instead of deselecting)"
        )
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("s3")]


def pytest_collection_finish(session: pytest.Session) -> None:
    """A run with tests that start ``cdc`` processes makes the JVM archive they map in the
    background now, unless the checkout has it (tests/support/jvm_archive.py): ready by the
    time most of them start."""
    if session.config.option.collectonly:
        return
    modules = {getattr(item, "module", None) for item in session.items} - {None}
    if any(_uses_cdc_processes(module) for module in modules):
        from tests.support import jvm_archive

        jvm_archive.start_making()


def _uses_cdc_processes(module: object) -> bool:
    """The module imported something from tests/support/cdc.py (``run_cdc``, ``cdc_env``...)."""
    return any(getattr(v, "__module__", None) == "tests.support.cdc" for v in vars(module).values())


@pytest.fixture(autouse=True)
def _no_cached_data_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that ran a job in this process leaves nothing cached in the shared session: a
    batch releases what it persisted, whatever way it ends. A leak is cleared (the next test
    starts clean) and fails this test at teardown."""
    yield
    if "spark" not in request.fixturenames:
        return
    session: SparkSession = request.getfixturevalue("spark")
    manager = session._jsparkSession.sharedState().cacheManager()
    if not manager.isEmpty():
        session.catalog.clearCache()
        pytest.fail("the test left data cached in the shared SparkSession (a batch not released)")


# -- each passed test's time, as it passes (`-v`, as `make test` runs the integration tests) -----
# `--durations` reports only at the end of a run: a run stopped from outside (CI's time limit)
# reports nothing. With `-v` a passed test's line says its setup + call time, e.g.
# `PASSED (12 s)`: the output of a run stopped halfway still says where its time went.
_SETUP_SECONDS: dict[str, float] = {}


def pytest_report_teststatus(
    report: pytest.TestReport,
) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    if report.when == "setup":
        if report.passed:  # a test whose setup failed or skipped has no call to add it to
            _SETUP_SECONDS[report.nodeid] = report.duration
        return None
    if report.when != "call" or not report.passed or hasattr(report, "wasxfail"):
        return None
    seconds = _SETUP_SECONDS.pop(report.nodeid, 0.0) + report.duration
    return "passed", ".", (f"PASSED ({seconds:.0f} s)", {"green": True})
