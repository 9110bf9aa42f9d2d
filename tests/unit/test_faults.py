"""``FAULT_CRASH_AT``: which call of ``crash_point`` kills the driver (the kill itself is proved
by tests/integration/test_crash_points.py, in a process of its own)."""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

from streaming.core import faults

CALLS = [
    "before_first_commit",  # batch 0
    "between_commits",
    "after_tables",
    "before_first_commit",  # batch 1, two tables in its wave
    "between_commits",
    "between_commits",
    "after_tables",
]


@pytest.mark.parametrize(
    ("setting", "killed_at"),
    [
        (None, None),
        ("", None),
        ("mid_outcomes", None),
        ("after_tables", 3),
        ("after_tables:1", 3),
        ("after_tables:2", 7),
        ("after_tables:3", None),
        ("between_commits:3", 6),
    ],
)
def test_the_point_named_kills_the_nth_time_it_is_reached(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, killed_at: int | None
) -> None:
    if setting is None:
        monkeypatch.delenv(faults.CRASH_ENV, raising=False)
    else:
        monkeypatch.setenv(faults.CRASH_ENV, setting)
    monkeypatch.setattr(faults, "_reached", Counter())  # a new process
    kills: list[int] = []

    def kill(pid: int, sig: int) -> None:
        assert sig == signal.SIGKILL
        kills.append(pid)

    monkeypatch.setattr(os, "kill", kill)  # what faults calls: os.kill
    died = None
    for number, name in enumerate(CALLS, start=1):
        faults.crash_point(name)
        if kills:
            died = number
            break  # a real kill ends the process here
    assert died == killed_at
