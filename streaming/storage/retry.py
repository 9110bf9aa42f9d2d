"""Retry of Delta commits that lost a race (docs/architecture.md, "Retries"): only Delta's
concurrent-modification exceptions — another writer (e.g. ``cdc maintain``'s OPTIMIZE) committed
first — are retried, with exponential backoff. Every other error goes up at once: retrying it
blindly would hide it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from delta import exceptions as delta_errors

__all__ = ["ATTEMPTS", "BASE_DELAY", "CONFLICTS", "on_conflict_retry"]

log = logging.getLogger(__name__)
T = TypeVar("T")

CONFLICTS: tuple[type[Exception], ...] = (
    # Delta's Python classes of commit conflicts; most do not derive from the first one.
    delta_errors.DeltaConcurrentModificationException,
    delta_errors.ConcurrentWriteException,
    delta_errors.MetadataChangedException,
    delta_errors.ProtocolChangedException,
    delta_errors.ConcurrentAppendException,
    delta_errors.ConcurrentDeleteReadException,
    delta_errors.ConcurrentDeleteDeleteException,
    delta_errors.ConcurrentTransactionException,
)

ATTEMPTS = 5
BASE_DELAY = 0.5
"""Seconds before the second attempt; doubled for each further one (0.5, 1, 2, 4)."""


def on_conflict_retry(
    operation: Callable[[], T],
    *,
    what: str,
    attempts: int = ATTEMPTS,
    base_delay: float = BASE_DELAY,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``operation()``, again after a Delta commit conflict, at most ``attempts`` times."""
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except CONFLICTS as e:
            if attempt == attempts:
                raise
            delay = base_delay * 2 ** (attempt - 1)
            log.warning(
                "%s: Delta commit conflict (%s), attempt %d of %d, retrying in %.1fs",
                what,
                type(e).__name__,
                attempt,
                attempts,
                delay,
            )
            sleep(delay)
    raise AssertionError("unreachable")
