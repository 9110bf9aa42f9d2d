"""Clean stops (issue 37, streaming/runtime/stopping.py): SIGTERM or SIGINT sent to a running
``cdc run`` — the Python process only, as Kubernetes (PID 1) and ``docker stop`` send it, or the
whole process group, as systemd (``KillMode=control-group``) and a terminal's Ctrl-C do — lets
the running batch finish within ``shutdown.grace_period`` and exits 0, or leaves the batch to the
replay and still exits 0 at once; either way every transaction is committed
exactly once, counted in rows of the outcomes table and of the ledger.

A batch is observably in progress through the fault point ``FAULT_PAUSE_AT=after_tables:<s>``
(streaming/core/faults.py): the current tables are written, the ledger and outcomes not yet."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core import lease as rules
from streaming.core.config import AppConfig
from streaming.core.faults import CRASH_ENV, PAUSE_ENV
from streaming.core.lease import Record
from streaming.runtime.job import Job
from streaming.runtime.stopping import StopRequested
from tests.support import Workspace, request, upsert
from tests.support.cdc import cdc_env, kill_group, start_cdc, wait_until
from tests.support.datasets import DOG
from tests.support.side_by_side import side_by_side, taken

pytestmark = pytest.mark.spark

PAUSING = f"{PAUSE_ENV}=after_tables: pausing"
MARGIN = 30.0
"""Seconds a stop may take beyond what it waits for (the query's stop, closing, exiting) on a
loaded test machine."""


def prepare(ws: Workspace, grace: int) -> AppConfig:
    """One dataset, one transaction landed, the config in ``cdc.json`` (not ``*.yaml``: the
    workspace takes those for datasets): a 1 s trigger and the grace period."""
    ws.dataset("petstore", DOG)
    ws.data("one/petstore/Dog/part.json", {"id": "dog1", "name": "Rex"})
    ws.requests(request("tx-1", upsert("./data/one")))
    cfg = ws.config(trigger={"interval": "1 second"}, shutdown={"grace_period": f"{grace} seconds"})
    (ws.root / "cdc.json").write_text(cfg.model_dump_json())
    return cfg


def start(ws: Workspace, pause: float) -> tuple[subprocess.Popen[bytes], Path]:
    """``cdc run`` (continuous), its first batch paused ``pause`` s after writing its tables;
    returns once that batch is paused."""
    log = ws.root / "cdc.log"
    env = cdc_env({PAUSE_ENV: f"after_tables:{pause}"}, drop=(CRASH_ENV, "CDC_"))
    process = start_cdc("run", "--config", "cdc.json", cwd=ws.root, log=log, env=env)
    wait_until("batch 0 in progress", lambda: PAUSING in log.read_text(), process, log)
    return process, log


def ended(process: subprocess.Popen[bytes], sent: float) -> tuple[int, float]:
    """The exit code of ``cdc run`` and the seconds from ``sent`` to its exit; then waits for
    its JVM to be gone too (it ends after the Python process), so that nothing else writes the
    tables or the log."""
    code = process.wait(timeout=600)
    seconds = time.monotonic() - sent
    wait_until("the driver JVM to end", lambda: not group_alive(process.pid), timeout=120)
    return code, seconds


def group_alive(pgid: int) -> bool:
    """A live process (not a zombie) in process group ``pgid``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def lease_record(ws: Workspace) -> Record:
    """The checkpoint's latest lease record (streaming/runtime/lease.py)."""
    folder = ws.root / "checkpoints" / "cdc" / rules.FOLDER
    epochs = sorted(e for e in map(rules.epoch_of, os.listdir(folder)) if e is not None)
    return Record.from_json((folder / rules.file_name(epochs[-1])).read_text())


def rows(ws: Workspace, *parts: str) -> list[dict[str, Any]]:
    table: list[dict[str, Any]] = (
        deltalake.DeltaTable(str(ws.root.joinpath("warehouse", *parts)))
        .to_pyarrow_table()
        .to_pylist()
    )
    return table


def outcome_rows(ws: Workspace) -> list[tuple[str, str, int]]:
    return sorted(
        (r["transaction_id"], r["status"], r["batch_id"]) for r in rows(ws, "_system", "outcomes")
    )


def ledger_rows(ws: Workspace) -> list[tuple[str, int]]:
    return sorted((r["transaction_id"], r["batch_id"]) for r in rows(ws, "_system", "transactions"))


def dog_rows(ws: Workspace) -> list[tuple[str, int, str]]:
    return sorted(
        (r["id"], r["version"], r["name"]) for r in rows(ws, "petstore", "petstore", "Dog")
    )


def history_rows(ws: Workspace) -> list[tuple[str, int, str]]:
    history = rows(ws, "petstore", "_history", "petstore", "Dog")
    return sorted((r["id"], r["version"], r["__op"]) for r in history)


def restart(spark: SparkSession, cfg: AppConfig) -> list[int]:
    """``cdc run --once`` in this process; the ids of the batches it processed."""
    job = Job.create(spark, cfg)
    assert job.run(once=True) is None
    return [int(str(entry["batchId"])) for entry in job.sink.history]


def clean(log: str) -> None:
    """No Python traceback, no error line (ours or Spark's) in the job's output."""
    assert "Traceback" not in log, log[-4000:]
    assert not re.search(r"\bERROR\b", log), log[-4000:]


FINISHING = {
    "SIGTERM to the process": ("SIGTERM", "process"),  # Kubernetes, `docker stop`: PID 1 only
    "SIGTERM to the group": (
        "SIGTERM",
        "group",
    ),  # systemd's KillMode=control-group, `kill -TERM -<pgid>`
    # Ctrl-C in a terminal (SIGINT to the foreground process group): pressed twice, in the
    # second-signal case below — a cold `cdc` process less than a case of its own here.
}
"""The stops that let the running batch finish: the signal and whom it is sent to."""
FINISH_PAUSE = 8.0
"""The finishing cases' batch pause: the signal comes while it lasts."""
CUT_PAUSE = 120.0
"""The cut cases' batch pause: far longer than their stop may take."""
CUTTING = ("grace period", "second signal")


@dataclass
class Stopped:
    """A ``cdc run`` stopped by a signal while its batch 0 was paused: its config and
    workspace, its exit code, the seconds from the (first) signal to its exit, its output."""

    ws: Workspace
    cfg: AppConfig
    pid: int
    code: int
    seconds: float
    output: str


def _stop_finishing(ws: Workspace, name: str, delivery: str) -> Stopped:
    cfg = prepare(ws, grace=300)
    process, log = start(ws, FINISH_PAUSE)
    sig = signal.Signals[name]
    try:
        sent = time.monotonic()
        if delivery == "group":
            os.killpg(process.pid, sig)  # the driver, its JVM, everything they started
        else:
            os.kill(process.pid, sig)  # the Python process only
        code, seconds = ended(process, sent)
    finally:
        kill_group(process)
    return Stopped(ws, cfg, process.pid, code, seconds, log.read_text())


def _stop_cutting(ws: Workspace, how: str) -> Stopped:
    grace = 3 if how == "grace period" else 300
    cfg = prepare(ws, grace=grace)
    process, log = start(ws, CUT_PAUSE)
    try:
        sent = time.monotonic()
        if how == "grace period":
            os.kill(process.pid, signal.SIGTERM)
        else:
            os.killpg(process.pid, signal.SIGINT)
            wait_until(
                "the stop to wait for batch 0",
                lambda: "SIGINT: waiting up to 300 s for batch 0 to finish" in log.read_text(),
                process,
                log,
                timeout=60,
            )
            os.killpg(process.pid, signal.SIGINT)
        code, seconds = ended(process, sent)
    finally:
        kill_group(process)
    return Stopped(ws, cfg, process.pid, code, seconds, log.read_text())


@pytest.fixture(scope="module")
def stops(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Stopped | BaseException]:
    """Every stopped ``cdc run`` of this module at once, each a cold process in a thread of its
    own: a run mostly starts its JVM and then waits (its batch's pause, its stop), so side by
    side the four take far less than one after another. The signal of each is sent when its own
    batch is seen paused, and its stop timed from there. A scenario's failure is raised by its
    own test; each test restarts its run's job in this process."""
    scenarios: dict[str, Callable[[], Stopped]] = {
        **{
            case: partial(_stop_finishing, Workspace(tmp_path_factory.mktemp("finish")), *how)
            for case, how in FINISHING.items()
        },
        **{
            how: partial(_stop_cutting, Workspace(tmp_path_factory.mktemp("cut")), how)
            for how in CUTTING
        },
    }
    return side_by_side(scenarios)


@pytest.mark.parametrize("case", list(FINISHING))
def test_a_stop_signal_lets_the_running_batch_finish_and_exits_0(
    spark: SparkSession, stops: dict[str, Stopped | BaseException], case: str
) -> None:
    """Sent to the whole process group, the signal reaches the driver JVM too: it ignores it
    (``runtime.session``), and the stop is the driver's, as when only the driver is signalled."""
    name, _ = FINISHING[case]
    run = taken(stops, case)
    ws, output = run.ws, run.output
    assert run.code == 0, output[-4000:]
    assert run.seconds < FINISH_PAUSE + MARGIN, run.seconds  # the pause, not the 300 s grace
    assert f"{name}: waiting up to 300 s for batch 0 to finish" in output, output[-4000:]
    stops_logged = re.findall(rf"stopping on {name}: .*", output)
    assert len(stops_logged) == 1, output[-4000:]
    assert re.fullmatch(rf"stopping on {name}: batch 0 finished, [0-9.]+ s", stops_logged[0])
    assert "batch 0: 1 transactions (COMMITTED 1)" in output
    clean(output)
    # The batch finished before the process ended: committed once, nothing left to replay.
    assert outcome_rows(ws) == [("tx-1", "COMMITTED", 0)]
    assert ledger_rows(ws) == [("tx-1", 0)]
    assert dog_rows(ws) == [("dog1", 1, "Rex")]
    # The lease given up at the stop: the next start need not wait for it to expire.
    record = lease_record(ws)
    assert record.holder.pid == run.pid and record.released, record
    assert restart(spark, run.cfg) == []  # Spark's checkpoint has batch 0 done
    assert outcome_rows(ws) == [("tx-1", "COMMITTED", 0)]
    assert ledger_rows(ws) == [("tx-1", 0)]
    assert history_rows(ws) == [("dog1", 1, "i")]


@pytest.mark.parametrize("how", CUTTING)
def test_a_batch_that_cannot_finish_is_left_to_the_replay_and_the_job_still_exits_0(
    spark: SparkSession, stops: dict[str, Stopped | BaseException], how: str
) -> None:
    """``grace period``: SIGTERM to the Python process, a 3 s grace period. ``second signal``:
    Ctrl-C pressed twice in a terminal — SIGINT to the whole process group, twice: the driver
    JVM ignores both (``runtime.session``), the driver stops on the first and hurries on the
    second."""
    name = "SIGTERM" if how == "grace period" else "SIGINT"
    run = taken(stops, how)
    ws, output = run.ws, run.output
    assert run.code == 0, output[-4000:]
    waited = 3 if how == "grace period" else 0
    assert run.seconds < waited + MARGIN < CUT_PAUSE, run.seconds  # it did not wait for the batch
    ending = (
        "batch 0 left to the replay after the 3 s grace period"
        if how == "grace period"
        else r"batch 0 left to the replay on a second signal, [0-9.]+ s"
    )
    stops_logged = re.findall(rf"stopping on {name}: .*", output)
    assert len(stops_logged) == 1, output[-4000:]
    assert re.fullmatch(f"stopping on {name}: {ending}", stops_logged[0]), stops_logged
    clean(output)
    # Cut after its tables, before its ledger: nothing recorded; the replay commits it once.
    assert dog_rows(ws) == [("dog1", 1, "Rex")]
    assert outcome_rows(ws) == []
    assert ledger_rows(ws) == []
    assert restart(spark, run.cfg) == [0]
    assert outcome_rows(ws) == [("tx-1", "COMMITTED", 0)]
    assert ledger_rows(ws) == [("tx-1", 0)]
    assert dog_rows(ws) == [("dog1", 1, "Rex")]
    assert history_rows(ws) == [("dog1", 1, "i")]


def test_a_batch_begun_after_the_stop_was_decided_is_refused_and_spark_stops_cleanly(
    spark: SparkSession, ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    """The race a stop closes: Spark starts a batch between the sink's last batch and
    ``query.stop()``. The sink refuses it before reading anything, once ``stop()`` has
    interrupted the stream — which Spark then takes for the interruption it asked for."""
    caplog.set_level(logging.INFO, logger="streaming.runtime.sink")
    cfg = prepare(ws, grace=300)
    job = Job.create(spark, cfg)
    assert job.sink.gate.close(time.monotonic(), lambda: True) is None  # a stop was decided
    query = job.start(once=False)
    try:
        wait_until("batch 0 refused", lambda: job.sink.gate.refused == 0, timeout=300)
    finally:
        job.stop(query)
    assert query.exception() is None  # stopped, not failed
    assert not query.isActive
    # Spark's own word that it took the refusal for the stop's interruption: its message is
    # "Stopped" only then (a failure leaves "Terminated with exception: …", a refusal whose text
    # overflows Spark's regular expression the message of the batch it was in).
    assert query.status["message"] == "Stopped", query.status
    # py4j reports an exception of a Python callback with its traceback; not this one.
    refusals = [r for r in caplog.records if r.exc_info and r.exc_info[0] is StopRequested]
    assert refusals == []
    assert "batch 0 not started: the job is stopping" in caplog.text
    assert outcome_rows(ws) == []
    assert ledger_rows(ws) == []
    assert restart(spark, cfg) == [0]  # Spark replays the refused batch
    assert outcome_rows(ws) == [("tx-1", "COMMITTED", 0)]
    assert ledger_rows(ws) == [("tx-1", 0)]
    assert dog_rows(ws) == [("dog1", 1, "Rex")]


def test_a_query_stopped_while_its_batch_writes_leaves_the_batch_to_the_replay(
    spark: SparkSession,
    ws: Workspace,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``query.stop()`` while a batch is between its commits (the grace period over, or a
    caller that stops the query itself) interrupts the stream's thread: the next call into the
    JVM that waits fails with ``InterruptedException``. That is the stop, not a failure of the
    transactions: the batch ends there as a crash would, nothing is recorded FAILED, and the
    replay goes on from its commits and commits it once. (It was taken for a failure: the
    tables restored, the transaction recorded FAILED, its changes never applied.)"""
    caplog.set_level(logging.INFO, logger="streaming")
    cfg = prepare(ws, grace=300)
    monkeypatch.setenv(PAUSE_ENV, "between_commits:5")
    job = Job.create(spark, cfg)
    query = job.start(once=False)
    try:
        wait_until(
            "batch 0 between its commits",
            lambda: f"{PAUSE_ENV}=between_commits: pausing" in caplog.text,
            timeout=300,
        )
    finally:
        job.stop(query)  # interrupts the paused batch's thread
    monkeypatch.delenv(PAUSE_ENV)
    assert query.exception() is None  # stopped, not failed
    assert outcome_rows(ws) == []
    assert ledger_rows(ws) == []
    assert "a segment failed" not in caplog.text
    assert restart(spark, cfg) == [0]
    assert outcome_rows(ws) == [("tx-1", "COMMITTED", 0)]
    assert dog_rows(ws) == [("dog1", 1, "Rex")]
    assert history_rows(ws) == [("dog1", 1, "i")]
