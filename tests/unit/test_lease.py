"""One runner per checkpoint: the lease's rules (streaming/core/lease.py) and the lease itself
(streaming/runtime/lease.py) over local files (streaming/storage/lease.py), with clocks of the
test's — no Spark. The real processes are tests/integration/test_one_runner.py's."""

from __future__ import annotations

import gc
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from streaming.core import lease as rules
from streaming.core.config import LeaseConfig
from streaming.core.errors import CheckpointHeld, LeaseLost
from streaming.core.lease import Holder, Record
from streaming.runtime.lease import Lease, process_started, this_process
from streaming.storage.lease import LocalFiles

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
NODE = "boot/pid:[1]"
A = Holder("a" * 32, "host-a", 101, NODE, 5000)
B = Holder("b" * 32, "host-b", 202, NODE, 6000)
TERMS = LeaseConfig(duration="30 seconds", renew_every="10 seconds")


def nobody(_: int) -> int | None:
    return None


def everybody(pid: int) -> int | None:
    return {101: 5000, 202: 6000}.get(pid)


# -- the rules ---------------------------------------------------------------------------------
def test_a_record_round_trips_through_its_json() -> None:
    record = rules.taken(A, 7, T0, 30)
    back = Record.from_json(record.to_json())
    assert back == record
    assert back.expires == T0 + timedelta(seconds=30)
    assert rules.released(record, T0).to_json() != record.to_json()
    assert Record.from_json(rules.released(record, T0).to_json()).released


@pytest.mark.parametrize("text", ["", "{", "[]", '{"epoch": 1}', '{"epoch": "x", "holder": 1}'])
def test_what_is_not_a_record_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="not a lease record"):
        Record.from_json(text)


def test_epoch_files_sort_as_epochs_and_other_files_are_none() -> None:
    assert rules.file_name(7) == "0000000007.json"
    assert sorted([rules.file_name(10), rules.file_name(9)]) == [
        rules.file_name(9),
        rules.file_name(10),
    ]
    assert rules.epoch_of(rules.file_name(123)) == 123
    for name in (".abc.tmp", "7.json", "000000000x.json", "0000000007.json.crc", "notes"):
        assert rules.epoch_of(name) is None


def test_a_lease_expires_at_its_time_or_when_released() -> None:
    record = rules.taken(A, 1, T0, 30)
    assert not record.expired(T0 + timedelta(seconds=29.9))
    assert record.expired(T0 + timedelta(seconds=30))
    assert rules.renewed(record, T0 + timedelta(seconds=20), 30).expires == T0 + timedelta(
        seconds=50
    )
    assert rules.released(record, T0).expired(T0)


def test_who_may_take_a_checkpoint() -> None:
    held = rules.taken(A, 1, T0, 30)
    soon = T0 + timedelta(seconds=5)
    assert rules.may_take(None, B, soon, holder_gone=False)
    assert not rules.may_take(held, B, soon, holder_gone=False)
    assert rules.may_take(held, B, T0 + timedelta(seconds=30), holder_gone=False)  # expired
    assert rules.may_take(rules.released(held, soon), B, soon, holder_gone=False)
    assert rules.may_take(held, A, soon, holder_gone=False)  # the same process
    assert rules.may_take(held, B, soon, holder_gone=True)


def test_a_holder_is_known_gone_only_on_the_same_node() -> None:
    held = rules.taken(A, 1, T0, 30)
    assert not rules.gone(held, B, everybody)  # alive, started when it did
    assert rules.gone(held, B, nobody)  # no such process
    assert rules.gone(held, B, lambda pid: 9999)  # the pid is another process's now
    elsewhere = replace(B, node="another-boot/pid:[1]")
    assert not rules.gone(held, elsewhere, nobody)  # its pid means nothing here
    unknown = rules.taken(replace(A, node=None), 1, T0, 30)
    assert not rules.gone(unknown, replace(B, node=None), nobody)


def test_the_errors_name_the_holder_and_when_it_expires() -> None:
    held = rules.taken(A, 3, T0, 30)
    error = rules.held("/ck/cdc", held, T0 + timedelta(seconds=10))
    assert error.code == "CHECKPOINT_HELD"
    for part in ("/ck/cdc", "host-a pid 101", "since 2026-01-01T12:00:00+00:00", "epoch 3"):
        assert part in error.message
    assert "start again after 2026-01-01T12:00:30+00:00" in error.message
    assert "in 20 s" in error.message
    gone = rules.lost("/ck/cdc", held, rules.taken(B, 4, T0, 30), "another runner took it")
    assert gone.code == "LEASE_LOST"
    assert "host-a pid 101, lease epoch 3" in gone.message
    assert "held by host-b pid 202 since" in gone.message
    assert "stopped before its next commit" in gone.message


def test_renewals_must_be_well_within_the_duration() -> None:
    with pytest.raises(ValueError, match="at most a third of duration"):
        LeaseConfig(duration="20 seconds", renew_every="10 seconds")
    with pytest.raises(ValueError, match="at least 1 second"):
        LeaseConfig(duration="0 seconds", renew_every="0 seconds")
    assert LeaseConfig().duration_seconds == 60 and LeaseConfig().renew_seconds == 10


# -- the lease over local files -------------------------------------------------------------------
class Clocks:
    """A wall clock and a monotonic clock the test moves together (or apart)."""

    def __init__(self) -> None:
        self.wall = T0
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


def lease(tmp_path: Path, me: Holder, clocks: Clocks, alive: object = everybody) -> Lease:
    return Lease(
        LocalFiles(tmp_path / "lease"),
        str(tmp_path),
        TERMS,
        me=me,
        clock=lambda: clocks.wall,
        monotonic=lambda: clocks.mono,
        alive=alive,  # type: ignore[arg-type]
        settle=0,
    )


def test_a_second_runner_is_refused_until_the_first_releases(tmp_path: Path) -> None:
    clocks = Clocks()
    first, second = lease(tmp_path, A, clocks), lease(tmp_path, B, clocks)
    first.take()
    with pytest.raises(CheckpointHeld, match="held by another runner: host-a pid 101"):
        second.take()
    first.release()
    second.take()
    assert second.current() == second.mine and second.mine is not None
    assert second.mine.epoch == 2 and second.mine.holder == B


def test_renewals_keep_the_lease_and_a_lapsed_one_is_taken_over(tmp_path: Path) -> None:
    clocks = Clocks()
    first, second = lease(tmp_path, A, clocks), lease(tmp_path, B, clocks)
    first.take()
    for _ in range(5):  # 50 s of renewals every 10 s: never free
        clocks.advance(10)
        first.renew()
        with pytest.raises(CheckpointHeld):
            second.take()
    clocks.advance(30)  # frozen past its lease
    second.take()
    with pytest.raises(LeaseLost, match=r"not renewed for 30 s .*another runner took it"):
        first.check()
    with pytest.raises(LeaseLost):  # lost stays lost
        first.check()
    first.release()  # releases nothing of the other runner's
    assert second.current() == second.mine


def test_a_lapsed_lease_nobody_took_is_taken_again_at_the_next_epoch(tmp_path: Path) -> None:
    clocks = Clocks()
    first = lease(tmp_path, A, clocks)
    first.take()
    clocks.advance(100)
    first.check()
    assert first.mine is not None and first.mine.epoch == 2
    assert first.current() == first.mine


def test_the_fence_renews_a_lease_that_runs_short_and_stops_one_taken_meanwhile(
    tmp_path: Path,
) -> None:
    clocks = Clocks()
    first, second = lease(tmp_path, A, clocks), lease(tmp_path, B, clocks)
    first.take()
    clocks.advance(15)
    first.check()  # 15 s left: more than renew_every, nothing written
    assert first.current() is not None and first.current().renewed == T0  # type: ignore[union-attr]
    clocks.advance(6)
    first.check()  # 9 s left: renewed first
    assert first.current().renewed == clocks.wall  # type: ignore[union-attr]
    # Clocks apart: the other machine's clock runs 40 s ahead and takes the lease early.
    clocks.wall += timedelta(seconds=40)
    second.take()
    clocks.wall -= timedelta(seconds=40)
    with pytest.raises(LeaseLost, match="another runner took it"):
        first.renew()  # its renewal finds the later epoch


def test_a_holder_gone_from_this_machine_is_taken_over_at_once(tmp_path: Path) -> None:
    clocks = Clocks()
    lease(tmp_path, A, clocks).take()  # and then the process died
    with pytest.raises(CheckpointHeld):
        lease(tmp_path, B, clocks, alive=everybody).take()
    taker = lease(tmp_path, B, clocks, alive=nobody)
    taker.take()
    assert taker.mine is not None and taker.mine.epoch == 2


def test_the_same_process_takes_its_own_lease_again(tmp_path: Path) -> None:
    clocks = Clocks()
    lease(tmp_path, A, clocks).take()  # a job that never released it
    again = lease(tmp_path, A, clocks)
    again.take()
    assert again.mine is not None and again.mine.epoch == 2


def test_old_epochs_are_removed_but_the_previous_one(tmp_path: Path) -> None:
    clocks = Clocks()
    for _ in range(4):
        taker = lease(tmp_path, A, clocks)
        taker.take()
        taker.release()
    assert LocalFiles(tmp_path / "lease").epochs() == [3, 4]


def test_of_many_runners_taking_at_once_exactly_one_gets_the_checkpoint(tmp_path: Path) -> None:
    clocks = Clocks()
    holders = [Holder(f"{n:032d}", f"host-{n}", 1000 + n, None, None) for n in range(16)]
    leases = [lease(tmp_path, h, clocks) for h in holders]
    barrier = threading.Barrier(len(leases))
    won: list[Holder] = []
    refused: list[str] = []

    def start(one: Lease) -> None:
        barrier.wait()
        try:
            one.take()
            won.append(one.me)
        except CheckpointHeld as e:
            refused.append(e.message)

    threads = [threading.Thread(target=start, args=(one,)) for one in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1, won
    assert len(refused) == len(leases) - 1
    winner = won[0].describe()
    assert all(winner in message for message in refused), refused  # they name the winner


def test_this_process_is_a_live_holder_on_this_node() -> None:
    me = this_process()
    assert me is this_process()  # one id per process
    assert me.started is not None and process_started(me.pid) == me.started
    record = rules.taken(me, 1, T0, 30)
    assert not rules.gone(record, replace(me, id="other"), process_started)


def test_the_renewing_thread_renews_and_ends_with_its_lease(tmp_path: Path) -> None:
    terms = LeaseConfig(duration="3 seconds", renew_every="1 second")
    held = Lease(LocalFiles(tmp_path / "lease"), str(tmp_path), terms, me=A, alive=everybody)
    held.take()
    taken = held.current()
    held.start()
    thread = held._thread
    assert thread is not None
    wait = time.monotonic() + 10
    while held.current() == taken and time.monotonic() < wait:
        time.sleep(0.1)
    renewed = held.current()
    assert renewed is not None and taken is not None and renewed.expires > taken.expires
    assert renewed.epoch == taken.epoch
    del held
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()  # a job dropped without release leaves no thread behind
