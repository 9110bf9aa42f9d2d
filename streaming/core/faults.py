"""Named crash points for fault-injection tests (issue 5): ``FAULT_CRASH_AT=<point>`` makes the
driver kill itself with SIGKILL when it reaches that point — no cleanup, no ``finally``, as a
power cut or an OOM kill would; ``FAULT_CRASH_AT=<point>:<n>`` the n-th time the process reaches
it (a later batch of a continuous job, its first having reached it too). Unset (always, in
production) it does nothing. The variable is not a ``CDC_*`` name: those are configuration
overrides.

Points, in the order a batch reaches them:
  before_first_commit   the batch is validated and planned; no table written yet
  between_commits       right after the batch's first table commit (others still to come)
  after_tables          every current table written; history and ledger not yet
  after_ledger          history, ledger and quarantine written; outcomes not yet
  mid_outcomes          the outcomes table written; the outcomes topic not yet
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections import Counter

CRASH_ENV = "FAULT_CRASH_AT"
POINTS = (
    "before_first_commit",
    "between_commits",
    "after_tables",
    "after_ledger",
    "mid_outcomes",
)

log = logging.getLogger(__name__)
_reached: Counter[str] = Counter()
_lock = threading.Lock()  # tables of a wave reach between_commits in threads of their own


def crash_point(name: str) -> None:
    """Die here, at once, if ``FAULT_CRASH_AT`` names this point (and, with ``:<n>``, this is the
    n-th time the process reaches it)."""
    assert name in POINTS, name
    point, _, nth = os.environ.get(CRASH_ENV, "").partition(":")
    if point != name:
        return
    with _lock:
        _reached[name] += 1
        if _reached[name] < int(nth or 1):
            return
    log.warning("%s=%s: killing the driver (fault injection)", CRASH_ENV, name)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGKILL)
