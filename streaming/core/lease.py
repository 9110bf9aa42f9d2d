"""One runner per checkpoint (issue 37): the lease's record and the rules over it — plain values
and a clock, no I/O (the files are ``storage.lease``'s, the renewals and the fence
``runtime.lease``'s).

The lease lives with the checkpoint, one small JSON file per *epoch*:
``<checkpoint>/lease/<epoch>.json``. The file of the highest epoch is the lease; the runner named
in it holds the checkpoint until ``expires`` unless it ``released`` it. A runner takes the lease
by *creating* the next epoch's file, which succeeds for one runner only where the store can
create a file exclusively (a local file system, HDFS, S3 with conditional writes); it renews the
lease by rewriting its own epoch's file. A runner that finds a higher epoch than its own has lost
the lease. Nothing is compared-and-swapped in place, so stores without that primitive work too.

The lease is a fence, not the guarantee: exactly once rests on the idempotent commits
(``storage.commits``). It keeps a second runner from doing the first one's work again, and from
racing it into creating tables, and stops a runner that lost its lease before its next commit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from streaming.core.errors import CheckpointHeld, LeaseLost

__all__ = [
    "DIGITS",
    "FOLDER",
    "SUFFIX",
    "Holder",
    "Record",
    "epoch_of",
    "file_name",
    "gone",
    "held",
    "held_unreadable",
    "lost",
    "may_take",
    "released",
    "renewed",
    "retaken",
    "taken",
]

FOLDER = "lease"
"""The lease's folder in the checkpoint."""
SUFFIX = ".json"
DIGITS = 10


def file_name(epoch: int) -> str:
    """The file of an epoch: zero-padded, so names sort as epochs do."""
    return f"{epoch:0{DIGITS}d}{SUFFIX}"


def epoch_of(name: str) -> int | None:
    """The epoch a file name stands for; None for any other file (a temporary one, a marker)."""
    stem = name.removesuffix(SUFFIX)
    if stem == name or len(stem) != DIGITS or not stem.isdigit():
        return None
    return int(stem)


@dataclass(frozen=True)
class Holder:
    """A runner: one per process (``id``); where it runs, for people (``host``, ``pid``) and for
    telling whether it still lives (``node``, ``started``)."""

    id: str
    host: str
    pid: int
    node: str | None = None
    """The machine and process namespace ``pid`` belongs to (boot id + pid namespace); None when
    unknown: then only the lease's expiry tells that the holder is gone."""
    started: int | None = None
    """When process ``pid`` started (clock ticks since boot): a pid used again by another process
    does not pass for the holder."""

    def describe(self) -> str:
        return f"{self.host} pid {self.pid}"


@dataclass(frozen=True)
class Record:
    """One epoch's file."""

    epoch: int
    holder: Holder
    since: datetime
    """When this holder took the checkpoint (kept across its renewals and re-takes)."""
    renewed: datetime
    expires: datetime
    released: bool = False

    def to_json(self) -> str:
        h = self.holder
        return json.dumps(
            {
                "epoch": self.epoch,
                "holder": h.id,
                "host": h.host,
                "pid": h.pid,
                "node": h.node,
                "started": h.started,
                "since": self.since.isoformat(),
                "renewed": self.renewed.isoformat(),
                "expires": self.expires.isoformat(),
                "duration": round((self.expires - self.renewed).total_seconds(), 3),
                "released": self.released,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Record:
        """A record read back; ValueError when it is not one (a file cut short, another tool's)."""
        try:
            data = json.loads(text)
            holder = Holder(
                id=str(data["holder"]),
                host=str(data["host"]),
                pid=int(data["pid"]),
                node=None if data.get("node") is None else str(data["node"]),
                started=None if data.get("started") is None else int(data["started"]),
            )
            return cls(
                epoch=int(data["epoch"]),
                holder=holder,
                since=datetime.fromisoformat(data["since"]),
                renewed=datetime.fromisoformat(data["renewed"]),
                expires=datetime.fromisoformat(data["expires"]),
                released=bool(data.get("released", False)),
            )
        except (TypeError, KeyError, ValueError, AttributeError) as e:
            raise ValueError(f"not a lease record: {text[:200]!r}") from e

    def expired(self, now: datetime) -> bool:
        """Free to take by anyone: released, or not renewed in time."""
        return self.released or now >= self.expires

    def describe(self) -> str:
        return f"{self.holder.describe()} since {self.since.isoformat(timespec='seconds')}"


def taken(holder: Holder, epoch: int, now: datetime, duration: float) -> Record:
    """The record of a holder taking the checkpoint at ``epoch``."""
    return Record(epoch, holder, now, now, now + timedelta(seconds=duration))


def renewed(record: Record, now: datetime, duration: float) -> Record:
    return replace(record, renewed=now, expires=now + timedelta(seconds=duration))


def retaken(record: Record, epoch: int, now: datetime, duration: float) -> Record:
    """A holder's lease that lapsed while nobody took it, taken again at the next epoch."""
    return replace(renewed(record, now, duration), epoch=epoch)


def released(record: Record, now: datetime) -> Record:
    return replace(record, renewed=now, expires=now, released=True)


def gone(record: Record, me: Holder, alive: Callable[[int], int | None]) -> bool:
    """Whether the holder is known to have ended: it ran where this process runs (the same
    ``node``) and its pid is not a live process, or is one that started at another time.
    ``alive(pid)``: the start time of the live process ``pid``, None if there is none.
    A holder elsewhere (or on an unknown node) is never known gone: its lease must expire."""
    holder = record.holder
    if holder.node is None or holder.node != me.node:
        return False
    started = alive(holder.pid)
    return started is None or (holder.started is not None and started != holder.started)


def may_take(current: Record | None, me: Holder, now: datetime, holder_gone: bool) -> bool:
    """Whether ``me`` may take the checkpoint whose lease is ``current`` (None: never taken):
    it is free (released or expired), this process holds it (a job of the same process that did
    not release it), or its holder is known gone (``gone``)."""
    return current is None or current.expired(now) or current.holder.id == me.id or holder_gone


def held(checkpoint: str, current: Record, now: datetime) -> CheckpointHeld:
    """The error of a start refused: who holds the checkpoint, and until when."""
    until = current.expires.isoformat(timespec="seconds")
    left = max(0.0, (current.expires - now).total_seconds())
    return CheckpointHeld(
        f"the checkpoint {checkpoint} is held by another runner: {current.describe()} "
        f"(lease epoch {current.epoch}, renewed {current.renewed.isoformat(timespec='seconds')}, "
        f"expires {until}, in {left:.0f} s). Stop the other runner, or — if it is gone — "
        f"start again after {until}"
    )


def held_unreadable(checkpoint: str, where: str) -> CheckpointHeld:
    """The error of a start that finds the lease's record unreadable (being written, or left half
    written by a runner that died while taking the checkpoint)."""
    return CheckpointHeld(
        f"the checkpoint {checkpoint} may be held by another runner: its lease record {where} "
        "cannot be read (another runner is taking the checkpoint, or died while doing so). "
        "Start again; if no other runner runs and it persists, delete that file"
    )


def lost(checkpoint: str, mine: Record, current: Record | None, why: str) -> LeaseLost:
    """The error of a runner that lost its lease: why, and who holds the checkpoint now."""
    now_held = f"; it is held by {current.describe()} (epoch {current.epoch})" if current else ""
    return LeaseLost(
        f"this runner ({mine.holder.describe()}, lease epoch {mine.epoch}) lost its lease on "
        f"the checkpoint {checkpoint}: {why}{now_held}. It stopped before its next commit; "
        "what it left unfinished is the other runner's (or the next start's) to replay"
    )
