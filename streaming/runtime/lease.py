"""One runner per checkpoint (issue 37): the running job's lease on its checkpoint — taken at
startup, renewed by a thread of its own, checked by the sink before each commit (the fence),
released at a clean end. The record and the rules are ``core.lease``'s, the files
``storage.lease``'s.

- **Taking** (``Job.create``, before anything is written): read the highest epoch's record; if
  another runner holds it — not released, not expired, and not known gone (a holder that ran on
  this machine, in this pid namespace, whose process is no more) — stop with ``CHECKPOINT_HELD``
  naming it. Otherwise create the next epoch's file, exclusively: of several runners starting
  together one creates it, the others read the winner and stop with ``CHECKPOINT_HELD``.
- **Renewing** (every ``lease.renew_every``): rewrite the own epoch's file with a new expiry,
  then list the epochs: a higher one than ours means another runner took the checkpoint — the
  lease is lost. A lease that lapsed (not renewed within ``lease.duration``, by this process's
  own monotonic clock: it was frozen, or the store did not answer) is not renewed in place:
  another runner may be taking it at this moment. It is taken again like any free lease, by
  creating the next epoch exclusively — or lost to whoever created it first.
- **The fence** (``Lease.check``, the sink before its first commit, between segments and before
  the ledger and outcomes): lost → ``LEASE_LOST``; less than ``renew_every`` left → renew first.
  A commit thus starts only while the lease has at least ``renew_every`` to run, and another
  runner takes a lease only once it expired, by its own clock: clocks must agree to well within
  ``renew_every``.

Nothing in exactly once rests on this: the commits are idempotent per batch (``storage.commits``),
so two runners that both got through — a process frozen between the fence and its commit,
clocks far apart, a store without exclusive creates — still commit every transaction once. The
lease keeps a second runner from doing the work again, and from failing on Spark's checkpoint.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession

from streaming.core import lease as rules
from streaming.core.config import LeaseConfig
from streaming.core.errors import LeaseLost
from streaming.core.lease import Holder, Record
from streaming.storage.lease import LeaseFiles, lease_files

__all__ = ["SETTLE_SECONDS", "UNREADABLE_RETRIES", "Lease", "process_started", "this_process"]

log = logging.getLogger(__name__)

SETTLE_SECONDS = 2.0
"""How long a lease created on a store without exclusive creates waits before reading its record
back (a runner that created the same epoch a moment later has overwritten it by then)."""
UNREADABLE_RETRIES = 3
"""Reads of a record being written (empty, on HDFS) before it counts as held."""

_holder: Holder | None = None


def this_process() -> Holder:
    """This process as a lease holder: one id per process (a job that ends and a job that starts
    in the same process are the same holder)."""
    global _holder
    pid = os.getpid()
    if _holder is None or _holder.pid != pid:  # a forked child is a process of its own
        _holder = Holder(
            id=uuid.uuid4().hex,
            host=socket.gethostname(),
            pid=pid,
            node=_node(),
            started=process_started(pid),
        )
    return _holder


def _node() -> str | None:
    """This machine's boot and this process's pid namespace: where a pid names one process."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


def process_started(pid: int) -> int | None:
    """When the live process ``pid`` started (clock ticks since boot); None if there is none (or
    only its zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _now() -> datetime:
    return datetime.now(UTC)


class Lease:
    """This runner's lease on one checkpoint."""

    def __init__(
        self,
        files: LeaseFiles,
        checkpoint: str,
        terms: LeaseConfig,
        *,
        me: Holder | None = None,
        clock: Callable[[], datetime] = _now,
        monotonic: Callable[[], float] = time.monotonic,
        alive: Callable[[int], int | None] = process_started,
        settle: float = SETTLE_SECONDS,
    ) -> None:
        self.files = files
        self.checkpoint = checkpoint
        self.duration = float(terms.duration_seconds)
        self.renew_every = float(terms.renew_seconds)
        self.me = me or this_process()
        self.clock, self.monotonic, self.alive, self.settle = clock, monotonic, alive, settle
        self.mine: Record | None = None
        """The record this runner wrote last; None before ``take`` and after ``release``."""
        self.valid_until = 0.0
        """Until when (``monotonic``) the lease is this runner's for sure: the start of its last
        write plus the duration."""
        self.lost: LeaseLost | None = None
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, spark: SparkSession, checkpoint: str, terms: LeaseConfig) -> Lease:
        return cls(lease_files(spark, checkpoint), checkpoint, terms)

    # -- reading ---------------------------------------------------------------------------
    def current(self) -> Record | None:
        """The lease as it stands: the highest epoch's record (None: never taken)."""
        return self._latest(self.files.epochs())

    def _latest(self, epochs: list[int]) -> Record | None:
        if not epochs:
            return None
        for attempt in range(UNREADABLE_RETRIES):
            text = self.files.read(epochs[-1])
            try:
                return Record.from_json(text or "")
            except ValueError:
                if text is None:  # removed meanwhile: read the listing again
                    return self._latest(self.files.epochs())
                if attempt + 1 < UNREADABLE_RETRIES:
                    time.sleep(self.settle / 2 or 0.1)
        raise rules.held_unreadable(self.checkpoint, f"{self.files.where}/{epochs[-1]}")

    # -- taking ----------------------------------------------------------------------------
    def take(self) -> None:
        """Take the checkpoint (at startup), or raise ``CheckpointHeld`` naming its holder."""
        with self._lock:
            self.lost = None
            epochs = self.files.epochs()
            current = self._latest(epochs)
            now = self.clock()
            if current is not None and not rules.may_take(
                current, self.me, now, rules.gone(current, self.me, self.alive)
            ):
                raise rules.held(self.checkpoint, current, now)
            if current is not None and current.holder.id != self.me.id and not current.expired(now):
                log.info("lease: %s has ended; taking its checkpoint", current.describe())
            epoch = max(epochs, default=0) + 1
            started = self.monotonic()
            record = rules.taken(self.me, epoch, self.clock(), self.duration)
            if not self._create(record):
                winner = self.current()
                raise rules.held(self.checkpoint, winner or record, self.clock())
            self._hold(record, started)
            for old in epochs[:-1]:  # the previous holder's record stays, for a post-mortem
                self.files.delete(old)
            log.info("lease: checkpoint %s taken (epoch %s)", self.checkpoint, epoch)

    def _create(self, record: Record) -> bool:
        """Create ``record``'s epoch file; whether it is this runner's: also after a store's
        retry that found its own first attempt, and — where creates are not exclusive — still
        after a pause."""
        text = record.to_json()
        if not self.files.create(record.epoch, text):
            return self.files.read(record.epoch) == text
        if not self.files.atomic:
            time.sleep(self.settle)
            return self.files.read(record.epoch) == text
        return True

    def _hold(self, record: Record, started: float) -> None:
        self.mine = record
        self.valid_until = started + self.duration

    def hold(self) -> None:
        """At the start of a run: take the lease again if a run of this job released it (or lost
        it), else make sure it is still held."""
        if self.mine is None or self.lost is not None:
            self.take()
        else:
            self.check()

    # -- keeping ---------------------------------------------------------------------------
    def check(self) -> None:
        """The fence, before a commit: ``LeaseLost`` if the lease is lost; renewed first when it
        has less than ``renew_every`` to run."""
        with self._lock:
            if self.lost is not None:
                raise self.lost
            if self.mine is None:  # a run of this job released it: a batch run by hand (tests)
                self.take()
            elif self.monotonic() >= self.valid_until - self.renew_every:
                self.renew()

    def renew(self) -> None:
        """Renew the lease (the thread, or the fence when it runs short); ``LeaseLost`` if
        another runner has taken it."""
        with self._lock:
            if self.lost is not None:
                raise self.lost
            mine = self.mine
            assert mine is not None, "renew: the lease is not taken"
            started = self.monotonic()
            if started >= self.valid_until:
                self._take_again(mine, started)
                return
            record = rules.renewed(mine, self.clock(), self.duration)
            self.files.write(mine.epoch, record.to_json())
            epochs = self.files.epochs()
            if epochs and epochs[-1] > mine.epoch:
                raise self._lose(self._latest(epochs), "another runner took it")
            self._hold(record, started)

    def _take_again(self, mine: Record, started: float) -> None:
        """The lease lapsed: it is this runner's again only if nobody took it, by creating the
        next epoch before anyone else does."""
        lapsed = started - self.valid_until + self.duration
        why = f"it was not renewed for {lapsed:.0f} s (lease.duration {self.duration:.0f} s)"
        current = self.current()
        if current is None or current.epoch != mine.epoch or current.holder.id != self.me.id:
            raise self._lose(current, f"{why}, and another runner took it")
        record = rules.retaken(mine, mine.epoch + 1, self.clock(), self.duration)
        if not self._create(record):
            raise self._lose(self.current(), f"{why}, and another runner took it")
        log.warning("lease: %s; nobody took it: held again (epoch %s)", why, record.epoch)
        self._hold(record, started)
        self.files.delete(mine.epoch - 1)

    def _lose(self, current: Record | None, why: str) -> LeaseLost:
        assert self.mine is not None
        self.lost = rules.lost(self.checkpoint, self.mine, current, why)
        log.warning("lease lost: %s", self.lost.message)
        return self.lost

    # -- the renewing thread -----------------------------------------------------------------
    def start(self) -> None:
        """Renew every ``renew_every`` in a thread of its own, until ``stop`` (or ``release``) —
        or until nothing refers to this lease any more (a job dropped without either)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=_renewing,
            args=(weakref.ref(self), self._stopping, self.renew_every),
            name="cdc-lease",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (the lease stays held until it expires or is released)."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)

    def release(self) -> None:
        """Stop renewing and give the checkpoint up (a clean end): the next runner need not wait
        for the lease to expire. Nothing is released that another runner holds."""
        self.stop()
        with self._lock:
            mine, self.mine = self.mine, None
            if mine is None or self.lost is not None:
                return
            try:
                epochs = self.files.epochs()
                if epochs and epochs[-1] == mine.epoch:
                    self.files.write(mine.epoch, rules.released(mine, self.clock()).to_json())
            except Exception as e:  # it expires instead
                log.warning("lease: not released (%s: %s); it expires", type(e).__name__, e)


def _renewing(ref: weakref.ref[Lease], stopping: threading.Event, every: float) -> None:
    """The renewing thread's loop; it holds its lease only while it renews it."""
    while not stopping.wait(every):
        lease = ref()
        if lease is None:
            return
        try:
            lease.renew()
        except LeaseLost:
            return
        except Exception as e:  # the store did not answer: the next round tries again
            log.warning("lease: renewal failed (%s: %s); trying again", type(e).__name__, e)
        del lease
