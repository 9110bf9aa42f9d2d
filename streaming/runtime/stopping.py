"""Clean stops of ``cdc run`` on SIGTERM / SIGINT (issue 37).

Structured Streaming has no graceful stop of its own: ``query.stop()`` cancels the stream's jobs
and interrupts its thread wherever it is. The job therefore stops in two steps. On the first
signal it closes the sink's ``BatchGate``, so that no new batch starts processing, and the batch
running then (if any) may finish, for up to the grace period (``shutdown.grace_period``) — its
foreachBatch function returns and Spark writes it to its commit log (``Job._committed``: a stop
before that would have Spark run it again at the next start). With no batch inside the closed
gate, ``query.stop()`` only interrupts the stream between batches.
A batch Spark starts in between is refused at the gate (``StopRequested``) before it reads or
writes anything, and Spark replays it at the next start; the sink raises it once ``query.stop()``
has interrupted the stream's thread, so that Spark takes it for the interruption it asked for
(``Sink.__call__``) rather than for a failure of the query.

A batch that does not finish within the grace period, or when a second signal comes, is *not*
cut by ``query.stop()``: the cancelled jobs would surface in the batch as errors, and the sink
takes errors for failed transactions or unreadable data — it could record outcomes the replay
would then keep. The process ends at once instead (``streaming.runtime.job.end_now``), as a crash
does, and the batch is replayed at the next start like after any crash (README, "Semantics and
guarantees").

The signals may reach the whole process group (systemd's ``KillMode=control-group``,
supervisord's ``stopasgroup``, a terminal's Ctrl-C) or the Python process only (Kubernetes and
``docker stop`` signal PID 1): the driver JVM this process starts ignores SIGINT (PySpark) and
SIGTERM (``runtime.session``), so its shutdown hooks never stop Spark under the running batch;
it ends when this process does.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from types import FrameType

from pyspark.sql import SparkSession

from streaming.core.errors import CdcError
from streaming.platform.spark import interruption_line, sleep_until_interrupted

__all__ = [
    "POLL_SECONDS",
    "SIGNALS",
    "STOP_WAIT_MS",
    "BatchGate",
    "BatchInterrupted",
    "Ending",
    "QuietStop",
    "Shutdown",
    "Stop",
    "StopRequested",
    "interruption",
    "stop_interrupt",
]

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)
POLL_SECONDS = 0.1
"""How often the waits here look at the clock and at a second signal."""


class StopRequested(Exception):
    """Raised by the sink at the start of a batch that Spark began after the job decided to stop:
    nothing of the batch was read or written; Spark replays it at the next start."""

    def __init__(self, batch_id: int) -> None:
        super().__init__(f"batch {batch_id} not started: the job is stopping (replayed at start)")
        self.batch_id = batch_id


class BatchGate:
    """Whether a batch is running in the sink, and whether new ones may start."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running: int | None = None
        self._closed = False
        self.refused: int | None = None
        """The last batch refused (``enter`` once closed)."""
        self.done: int | None = None
        """The last batch the sink ran to its end (Spark then writes it to its commit log)."""

    @property
    def running(self) -> int | None:
        """The id of the batch running now, None between batches."""
        return self._running

    @property
    def closed(self) -> bool:
        return self._closed

    def enter(self, batch_id: int) -> None:
        """Batch ``batch_id`` starts in the sink; refused (``StopRequested``) once closed."""
        with self._changed:
            if self._closed:
                self.refused = batch_id
                raise StopRequested(batch_id)
            self._running = batch_id

    def leave(self, *, done: bool) -> None:
        """The batch ``enter`` let in has ended: ``done`` (run to its end) or failed."""
        with self._changed:
            if done:
                self.done = self._running
            self._running = None
            self._changed.notify_all()

    def close(self, deadline: float, hurry: Callable[[], bool]) -> int | None:
        """Close the gate (no batch starts any more), then wait until the running batch has
        ended, until the monotonic ``deadline`` or until ``hurry()``. Returns the batch still
        running (None: the sink is idle and stays so)."""
        with self._changed:
            self._closed = True
            while self._running is not None and not hurry():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, POLL_SECONDS))
            return self._running


class Ending(Enum):
    FINISHED = "finished"
    """The running batch (if any) finished; the query stopped between batches."""
    GRACE = "grace"
    """The running batch did not finish within the grace period: left to the replay."""
    SECOND_SIGNAL = "second signal"
    """A second signal came while the batch ran: left to the replay."""
    STUCK = "stuck"
    """The query did not stop within ``job.STOP_SECONDS`` of being asked to (no batch ran)."""


@dataclass(frozen=True)
class Stop:
    """How a signal stopped the job."""

    signal: str
    batch: int | None
    """The batch running when the signal came (or the one the stop waited for), else None."""
    ending: Ending
    seconds: float
    """From the signal to the query stopped (or to giving up on it)."""
    grace: int
    error: CdcError | None = None
    """Why the job stopped itself, when no signal did (``Shutdown.request``): ``cdc run``
    ends with its code and exit 2."""

    @property
    def clean(self) -> bool:
        """The query stopped: nothing runs any more. Otherwise a batch is left running and the
        process must end at once (``job.end_now``), as a crash would."""
        return self.ending is Ending.FINISHED

    def describe(self) -> str:
        """The stop's log line."""
        head = f"stopping on {self.signal}"
        batch = f"batch {self.batch}"
        if self.ending is Ending.FINISHED:
            done = f"{batch} finished" if self.batch is not None else "no batch running"
            return f"{head}: {done}, {self.seconds:.1f} s"
        if self.ending is Ending.GRACE:
            return f"{head}: {batch} left to the replay after the {self.grace} s grace period"
        if self.ending is Ending.SECOND_SIGNAL and self.batch is not None:
            return f"{head}: {batch} left to the replay on a second signal, {self.seconds:.1f} s"
        if self.ending is Ending.SECOND_SIGNAL:
            return f"{head}: ended on a second signal while the query stopped, {self.seconds:.1f} s"
        return f"{head}: the query did not stop within {self.seconds:.1f} s; ended without it"


class Shutdown:
    """The signals the job received: the first asks for a clean stop, a second one hurries it."""

    def __init__(self, grace: int) -> None:
        self.grace = grace
        self.signal: str | None = None
        self.at = 0.0
        """When the first signal came (``time.monotonic``)."""
        self.hurried = False

    @property
    def requested(self) -> bool:
        return self.signal is not None

    @property
    def deadline(self) -> float:
        return self.at + self.grace

    def request(self, reason: str) -> None:
        """A stop the job asks for itself (the broker refused its credentials, its lease was
        lost), taken as a first signal named ``reason``; any thread may call it."""
        if self.signal is None:
            self.signal, self.at = reason, time.monotonic()

    def receive(self, signum: int, _frame: FrameType | None = None) -> None:
        """The signal handler: only records (it runs between two bytecodes of the main thread,
        which may hold any lock; the main thread's wait loop acts on it)."""
        if self.signal is None:
            self.signal, self.at = signal.Signals(signum).name, time.monotonic()
        else:
            self.hurried = True

    @contextmanager
    def handling(self) -> Iterator[Shutdown]:
        """SIGTERM and SIGINT handled by ``receive`` inside (the main thread only: Python runs
        handlers there; elsewhere nothing is installed), the previous handlers back after."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        before = {s: signal.signal(s, self.receive) for s in SIGNALS}
        try:
            yield self
        finally:
            for s, handler in before.items():
                signal.signal(s, handler)


class QuietStop(logging.Filter):
    """Drops py4j's record of the sink's ``StopRequested`` (py4j logs, with its traceback, every
    exception a Python callback raises; this one is the stop working as meant), and of a
    ``CdcError`` a batch raised — a ``LeaseLost`` among them (the job ends with its code line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, StopRequested | CdcError)


# -- a batch the stop interrupts -----------------------------------------------------------

STOP_WAIT_MS = 60_000
"""How long a batch refused at the gate waits for ``query.stop()`` to interrupt it."""


def stop_interrupt(spark: SparkSession) -> str | None:
    """Wait, in the JVM, on this thread — the stream's own, for a foreachBatch function (PySpark's
    pinned thread mode) — until the stopping job's ``query.stop()`` interrupts it; the
    interruption as a traceback names it: ``py4j.protocol.Py4JJavaError: An error occurred while
    calling z:java.lang.Thread.sleep.`` and ``: java.lang.InterruptedException: …``. None if no
    interruption came within ``STOP_WAIT_MS``.

    The refusal carries that text: Spark takes an error of a Python foreachBatch function whose
    text holds it for the interruption of a stop (``StreamExecution.isInterruptionException``,
    SPARK-39218): the query ends stopped, not failed, and logs no error. Only that line, not the
    Py4JJavaError itself with its Java stack trace: Spark matches the text with a regular
    expression that recurses once per character, and a whole stack trace overflows the stream
    thread's stack (``StackOverflowError``, printed by the JVM)."""
    return sleep_until_interrupted(spark, STOP_WAIT_MS)


class BatchInterrupted(Exception):
    """A batch whose stream thread ``query.stop()`` interrupted while it wrote: it ends where it
    is, as a crash there would end it, and Spark replays it at the next start (which finds its
    commits and goes on from them). Its text ends with the interruption as ``stop_interrupt``
    gives it, for Spark to take it for the stop."""

    def __init__(self, batch_id: int, interruption: str) -> None:
        super().__init__(f"batch {batch_id} interrupted by the stop: {interruption}")


def interruption(error: BaseException) -> str | None:
    """The interruption of the stream's thread an error of a JVM call is (a stopping query's
    ``InterruptedException``, or the I/O it cut short), as one short line; None for any other
    error."""
    return interruption_line(error)
