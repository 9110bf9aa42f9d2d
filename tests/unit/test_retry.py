"""Only Delta's commit conflicts are retried, with backoff; other errors go up at once."""

from __future__ import annotations

import pytest
from delta.exceptions import ConcurrentAppendException

from streaming.storage.retry import on_conflict_retry


class Flaky:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "committed"


def test_a_commit_conflict_is_retried_with_growing_delays() -> None:
    waits: list[float] = []
    flaky = Flaky([ConcurrentAppendException(message="a"), ConcurrentAppendException(message="b")])
    assert on_conflict_retry(flaky, what="t", base_delay=0.5, sleep=waits.append) == "committed"
    assert (flaky.calls, waits) == (3, [0.5, 1.0])


def test_conflicts_beyond_the_attempts_go_up() -> None:
    flaky = Flaky([ConcurrentAppendException(message=str(i)) for i in range(3)])
    with pytest.raises(ConcurrentAppendException):
        on_conflict_retry(flaky, what="t", attempts=3, sleep=lambda _: None)
    assert flaky.calls == 3


def test_other_errors_are_not_retried() -> None:
    flaky = Flaky([OSError("disk full")])
    with pytest.raises(OSError):
        on_conflict_retry(flaky, what="t", sleep=lambda _: None)
    assert flaky.calls == 1
