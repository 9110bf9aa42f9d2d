"""Named fault points for fault-injection tests (issue 5, issue 37). Unset (always, in
production) the variables do nothing; they are not ``CDC_*`` names: those are configuration
overrides.

``FAULT_CRASH_AT=<point>`` makes the driver kill itself with SIGKILL when it reaches that point —
no cleanup, no ``finally``, as a power cut or an OOM kill would; ``FAULT_CRASH_AT=<point>:<n>``
the n-th time the process reaches it (a later batch of a continuous job, its first having reached
it too).

``FAULT_PAUSE_AT=<point>:<seconds>`` makes the batch sleep there for that many seconds (a
decimal number), after logging ``FAULT_PAUSE_AT=<point>: pausing <seconds> s`` — a batch that is
observably in progress, e.g. for a test that stops the job while a batch runs.

Points, in the order a batch reaches them:
  before_first_commit   the batch is validated and planned; no table written yet
  between_commits       right after the batch's first table commit (others still to come)
  after_tables          every current table written; history and ledger not yet
  after_ledger          history, ledger and quarantine written; outcomes not yet
  mid_outcomes          the outcomes table written; the outcomes topic not yet
  mid_upkeep            the batch done and published; an upkeep task after it committed
                        (reached only when upkeep runs a task: ``runtime.upkeep``)
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import Counter

__all__ = ["CRASH_ENV", "PAUSE_ENV", "POINTS", "crash_point"]

CRASH_ENV = "FAULT_CRASH_AT"
PAUSE_ENV = "FAULT_PAUSE_AT"
POINTS = (
    "before_first_commit",
    "between_commits",
    "after_tables",
    "after_ledger",
    "mid_outcomes",
    "mid_upkeep",
)

log = logging.getLogger(__name__)
_reached: Counter[str] = Counter()
_lock = threading.Lock()  # tables of a wave reach between_commits in threads of their own


def crash_point(name: str) -> None:
    """Die here, at once, if ``FAULT_CRASH_AT`` names this point (and, with ``:<n>``, this is the
    n-th time the process reaches it); pause here if ``FAULT_PAUSE_AT`` names it."""
    assert name in POINTS, name
    point, _, nth = os.environ.get(CRASH_ENV, "").partition(":")
    if point == name:
        with _lock:
            _reached[name] += 1
            crash = _reached[name] >= int(nth or 1)
        if crash:
            log.warning("%s=%s: killing the driver (fault injection)", CRASH_ENV, name)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    pause = os.environ.get(PAUSE_ENV)
    if pause:
        point, _, seconds = pause.partition(":")
        if point == name:
            log.warning("%s=%s: pausing %s s (fault injection)", PAUSE_ENV, name, seconds)
            for handler in logging.getLogger().handlers:
                handler.flush()
            time.sleep(float(seconds))
