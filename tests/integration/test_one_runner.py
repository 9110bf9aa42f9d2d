"""One runner per checkpoint (issue 37; streaming/runtime/lease.py): real ``cdc run`` processes on
one config. Two started together: one runs, the other stops at startup with CHECKPOINT_HELD
naming the first. The one that runs, killed (SIGKILL) in its batch: its lease is taken over — at
once on this machine, where its process is seen gone, after its expiry when its liveness cannot
be seen. One frozen (SIGSTOP) past its lease while another takes over: resumed, it stops before
its next commit with LEASE_LOST. Whichever way they interleave, every transaction is committed
exactly once: counted in rows of the outcomes table, the ledger and the history, not in keys.

Short leases (``lease.duration`` 6 or 8 s) and a 1 s trigger keep the waits short; a cold ``cdc``
process (a JVM of its own) costs 15 to 50 s here, so the module starts three: the two started
together (the runner of the two is the one killed) and the frozen one; the runners that take a
checkpoint over are jobs in this process, on the shared session."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core import lease as rules
from streaming.core.config import AppConfig
from streaming.core.errors import CheckpointHeld
from streaming.core.faults import CRASH_ENV, PAUSE_ENV
from streaming.core.lease import Record
from streaming.runtime.job import Job
from streaming.runtime.lease import process_started, this_process
from tests.support import Workspace, request, upsert
from tests.support.cdc import cdc_env, kill_group, start_cdc, wait_until
from tests.support.datasets import DOG

pytestmark = pytest.mark.spark

TRANSACTIONS = ("tx-1", "tx-2", "tx-3")


def prepare(ws: Workspace, duration: int, renew: int) -> AppConfig:
    """One dataset, three transactions in one landing file, the config in ``cdc.json``: a 1 s
    trigger and a short lease."""
    ws.dataset("petstore", DOG)
    for n, tid in enumerate(TRANSACTIONS, start=1):
        ws.data(f"{tid}/petstore/Dog/part.json", {"id": f"dog{n}", "name": f"Dog {n}"})
    ws.requests(*(request(tid, upsert(f"./data/{tid}")) for tid in TRANSACTIONS))
    cfg = ws.config(
        trigger={"interval": "1 second"},
        shutdown={"grace_period": "60 seconds"},
        lease={"duration": f"{duration} seconds", "renew_every": f"{renew} seconds"},
    )
    (ws.root / "cdc.json").write_text(cfg.model_dump_json())
    return cfg


def start(ws: Workspace, name: str, *args: str, **env: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = ws.root / f"{name}.log"
    environ = cdc_env(env, drop=(CRASH_ENV, PAUSE_ENV, "CDC_"))
    return start_cdc("run", "--config", "cdc.json", *args, cwd=ws.root, log=log, env=environ), log


def lease_record(ws: Workspace) -> Record:
    folder = ws.root / "checkpoints" / "cdc" / rules.FOLDER
    epochs = sorted(e for e in map(rules.epoch_of, os.listdir(folder)) if e is not None)
    return Record.from_json((folder / rules.file_name(epochs[-1])).read_text())


def held_by(ws: Workspace, pid: int) -> bool:
    try:
        return lease_record(ws).holder.pid == pid
    except (OSError, IndexError, ValueError):
        return False


def rows(ws: Workspace, *parts: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (
        deltalake.DeltaTable(str(ws.root.joinpath("warehouse", *parts)))
        .to_pyarrow_table()
        .to_pylist()
    )
    return found


def outcome_rows(ws: Workspace) -> list[tuple[str, str]]:
    return sorted((r["transaction_id"], r["status"]) for r in rows(ws, "_system", "outcomes"))


def ledger_rows(ws: Workspace) -> list[str]:
    return sorted(r["transaction_id"] for r in rows(ws, "_system", "transactions"))


def history_rows(ws: Workspace) -> list[tuple[str, int, str]]:
    history = rows(ws, "petstore", "_history", "petstore", "Dog")
    return sorted((r["id"], r["version"], r["__op"]) for r in history)


def committed(ws: Workspace) -> int:
    try:
        return len(outcome_rows(ws))
    except Exception:  # not created yet
        return 0


def assert_exactly_once(ws: Workspace) -> None:
    """Every transaction committed once: one outcome row, one ledger row, one history row (an
    insert) each, and one current row per key."""
    assert outcome_rows(ws) == [(tid, "COMMITTED") for tid in TRANSACTIONS]
    assert ledger_rows(ws) == list(TRANSACTIONS)
    assert history_rows(ws) == [(f"dog{n}", 1, "i") for n in range(1, len(TRANSACTIONS) + 1)]
    current = rows(ws, "petstore", "petstore", "Dog")
    assert sorted((r["id"], r["version"]) for r in current) == [
        (f"dog{n}", 1) for n in range(1, len(TRANSACTIONS) + 1)
    ]


def clean(output: str) -> None:
    """No Python traceback, no error line but our own one-line ``cdc: error``."""
    assert "Traceback" not in output, output[-4000:]
    errors = [line for line in output.splitlines() if re.search(r"\bERROR\b", line)]
    assert errors == [], output[-4000:]


def ended(process: subprocess.Popen[bytes], timeout: float = 300) -> int:
    code = process.wait(timeout=timeout)
    kill_group(process)  # its JVM, if it outlived it
    return code


@dataclass
class Started:
    """Two ``cdc run`` started together on one config: the one that stopped at startup (its exit
    code and output) and the one that runs, its batch 0 paused after writing its tables."""

    ws: Workspace
    cfg: AppConfig
    loser: subprocess.Popen[bytes]
    loser_output: str
    runner: subprocess.Popen[bytes]
    runner_log: Path


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    """Two runners started at once on one workspace, both paused after their batch's tables
    (``after_tables:300``): the one that gets the lease is left in its batch 0 — tables written,
    ledger not — for the kill of the test after. Its JVM is killed at the end of the module at
    the latest."""
    ws = Workspace(tmp_path_factory.mktemp("runners"))
    cfg = prepare(ws, duration=8, renew=2)
    pause = {PAUSE_ENV: "after_tables:300"}
    runners = [start(ws, "first", **pause), start(ws, "second", **pause)]  # JVMs side by side
    try:
        wait_until(
            "one runner to stop at startup",
            lambda: any(p.poll() is not None for p, _ in runners),
            timeout=300,
        )
        (loser,) = [r for r in runners if r[0].poll() is not None]
        (runner,) = [r for r in runners if r is not loser]
        pausing = f"{PAUSE_ENV}=after_tables: pausing"
        wait_until(
            "batch 0 to write its tables",
            lambda: pausing in runner[1].read_text(),
            runner[0],
            runner[1],
        )
        yield Started(ws, cfg, loser[0], loser[1].read_text(), runner[0], runner[1])
    finally:
        for process, _ in runners:
            kill_group(process)


def test_of_two_runners_started_together_one_runs_and_the_other_stops_at_startup(
    started: Started,
) -> None:
    """The one that runs holds the lease and is in its batch 0 (which the next test kills); a
    lease given up at a clean stop: tests/integration/test_clean_stop.py."""
    ws, out = started.ws, started.loser_output
    assert started.loser.returncode == 2, out[-4000:]
    held = re.search(
        r"cdc: error \[CHECKPOINT_HELD\]: the checkpoint (\S+) is held by another runner: "
        r"(\S+) pid (\d+) since (\S+) \(lease epoch 1, .*expires (\S+), in \d+ s\)",
        out,
    )
    assert held, out[-4000:]
    assert held[1] == str(ws.root / "checkpoints" / "cdc")
    assert (held[2], int(held[3])) == (socket.gethostname(), started.runner.pid)
    since, expires = datetime.fromisoformat(held[4]), datetime.fromisoformat(held[5])
    assert since <= datetime.now(UTC) and since < expires
    assert "query cdc started" not in out  # refused before it created or read anything
    clean(out.replace(held[0], ""))
    assert started.runner.poll() is None, started.runner_log.read_text()[-4000:]
    assert held_by(ws, started.runner.pid)
    assert lease_record(ws).epoch == 1
    clean(started.runner_log.read_text())


def test_a_killed_runners_lease_is_taken_over_once_it_is_known_gone_or_expired(
    spark: SparkSession, started: Started
) -> None:
    """The runner of the test above, killed (SIGKILL) in the middle of batch 0, its tables
    written, its ledger not.
    Seen from this machine its process is gone: the checkpoint is free at once. As a runner on
    another machine (its record's node changed) it is not known gone: the checkpoint is held until
    its lease expires, and then taken over; the replay commits everything once."""
    ws, cfg, killed = started.ws, started.cfg, started.runner
    pausing = f"{PAUSE_ENV}=after_tables: pausing"
    assert pausing in started.runner_log.read_text()  # in batch 0, its tables written
    assert held_by(ws, killed.pid)
    kill_group(killed)  # the driver and its JVM: SIGKILL, no clean-up
    record = lease_record(ws)
    assert not record.released
    me = this_process()
    assert rules.gone(record, me, process_started)  # this machine: the pid is no process now

    # On another machine: its pid tells nothing here; held until it expires.
    folder = ws.root / "checkpoints" / "cdc" / rules.FOLDER
    path = folder / rules.file_name(record.epoch)
    elsewhere = json.loads(path.read_text()) | {"node": "another-machine/pid:[1]"}
    path.write_text(json.dumps(elsewhere))
    assert datetime.now(UTC) < record.expires, "the kill took longer than the lease"
    with pytest.raises(CheckpointHeld) as refused:
        Job.create(spark, cfg)
    assert f"{record.holder.host} pid {killed.pid} since" in refused.value.message
    assert f"expires {record.expires.isoformat(timespec='seconds')}" in refused.value.message
    assert lease_record(ws).epoch == record.epoch  # nothing taken
    time.sleep(max(0.0, (record.expires - datetime.now(UTC)).total_seconds()) + 0.5)

    job = Job.create(spark, cfg)
    assert job.lease is not None and job.lease.mine is not None
    assert (job.lease.mine.epoch, job.lease.mine.holder) == (record.epoch + 1, me)
    assert job.run(once=True) is None
    assert [int(str(e["batchId"])) for e in job.sink.history] == [0]  # batch 0 replayed
    assert_exactly_once(ws)
    assert lease_record(ws).released

    # The same lease seen from this machine: taken over at once, before it expires.
    path.write_text(json.dumps(elsewhere | {"node": me.node, "released": False}))
    for newer in range(record.epoch + 1, record.epoch + 3):
        (folder / rules.file_name(newer)).unlink(missing_ok=True)
    stale = lease_record(ws)
    assert (stale.epoch, stale.holder.pid) == (record.epoch, killed.pid)
    fresh = rules.renewed(stale, datetime.now(UTC), 60)  # as if renewed just now, for 60 s
    path.write_text(fresh.to_json())
    again = Job.create(spark, cfg)
    assert again.lease is not None and again.lease.mine is not None
    assert again.lease.mine.epoch == record.epoch + 1
    assert datetime.now(UTC) < fresh.expires  # not waited for
    again.run(once=True)
    assert_exactly_once(ws)


def test_a_runner_frozen_past_its_lease_stops_before_its_next_commit_when_resumed(
    spark: SparkSession, ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    """The first runner is frozen (SIGSTOP, with its JVM) in batch 0 — planned, nothing written —
    past its lease; a second runner takes the checkpoint over and commits batch 0; the first,
    resumed, must not commit it again: it stops at the fence with LEASE_LOST. The second runner
    is a job in this process, on the shared session: a runner of its own pid that takes the lease
    as a ``cdc run --once`` would (``Job.create``), without a cold JVM of its own."""
    caplog.set_level(logging.INFO, logger="streaming")
    cfg = prepare(ws, duration=6, renew=2)
    frozen, frozen_log = start(ws, "frozen", **{PAUSE_ENV: "before_first_commit:4"})
    try:
        pausing = f"{PAUSE_ENV}=before_first_commit: pausing"
        wait_until("batch 0 to be planned", lambda: pausing in frozen_log.read_text(), frozen)
        os.killpg(frozen.pid, signal.SIGSTOP)  # the driver and its JVM, as a paused VM
        frozen_record = lease_record(ws)
        assert frozen_record.holder.pid == frozen.pid
        # Expired: by its own clock, the frozen runner can no longer tell it still holds it.
        wait_until(
            "the frozen runner's lease to expire",
            lambda: lease_record(ws).expired(datetime.now(UTC)),
            timeout=60,
        )
        taker = Job.create(spark, cfg)
        assert taker.lease is not None and taker.lease.mine is not None
        assert (taker.lease.mine.holder, taker.lease.mine.epoch) == (
            this_process(),
            frozen_record.epoch + 1,
        )
        assert taker.run(once=True) is None
        assert [int(str(e["batchId"])) for e in taker.sink.history] == [0]
        assert "batch 0: 3 transactions (COMMITTED 3)" in caplog.text, caplog.text[-4000:]
        assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
        assert_exactly_once(ws)
        record = lease_record(ws)
        assert (record.holder.pid, record.epoch) == (os.getpid(), frozen_record.epoch + 1)
        os.killpg(frozen.pid, signal.SIGCONT)
        code = ended(frozen)
    finally:
        kill_group(frozen)
    out = frozen_log.read_text()
    resumed = out[out.index(pausing) :]
    assert code == 2, out[-4000:]
    lost = re.search(
        r"cdc: error \[LEASE_LOST\]: this runner \((\S+) pid (\d+), lease epoch (\d+)\) lost its "
        r"lease .*: it was not renewed for \d+ s \(lease.duration 6 s\), and another runner took "
        r"it; it is held by (\S+) pid (\d+) since",
        resumed,
    )
    assert lost, out[-4000:]
    assert (int(lost[2]), int(lost[3])) == (frozen.pid, frozen_record.epoch)
    assert int(lost[5]) == os.getpid()
    assert "batch 0 stopped before its next commit: the lease was lost" in resumed, out[-4000:]
    assert not re.search(r"batch 0: \d+ transactions", resumed), out[-4000:]  # not run to its end
    assert "stopping on LEASE_LOST: no batch running" in resumed, out[-4000:]
    clean(out.replace(lost[0], ""))
    assert_exactly_once(ws)  # nothing committed twice, nothing lost
