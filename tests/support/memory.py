"""Peak memory of a ``cdc`` process and of its JVM, from ``/proc`` (Linux).

A PySpark driver is two processes: the Python one (``cdc run``) and the JVM it starts (a child,
``java``). ``VmHWM`` in ``/proc/<pid>/status`` is a process's peak resident set ("high water
mark"): it only grows, so a poll every ``EVERY`` seconds misses nothing but what a process
takes in its last moments. ``PeakWatch`` polls both from the parent; ``own_peaks`` is what a
process reads of itself (and of its JVM) just before it exits.

Shared by the CatchUp benchmark (``bench/catchup.py``, ``bench/cold_driver.py``) and the
driver-memory test (``tests/integration/test_feed_driver_memory.py``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

EVERY = 0.2
"""Seconds between two polls."""


def status_mb(pid: int, field: str) -> float | None:
    """A ``/proc/<pid>/status`` memory field (``VmHWM``, ``VmRSS``) in MiB; None when the
    process is gone or has no such line (a zombie)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return None


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after "pid (comm)": state, ppid, ...
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def java_below(pid: int) -> int | None:
    """The JVM below the process ``pid`` (the driver's: PySpark starts it as a child)."""
    for child in descendants(pid):
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "java":
                return child
        except OSError:
            continue
    return None


def own_peaks() -> dict[str, float]:
    """This process's peak RSS and its JVM's (if it has one, still running), in MiB:
    ``peak_python_mb``, ``peak_jvm_mb``."""
    out: dict[str, float] = {}
    mine = status_mb(os.getpid(), "VmHWM")
    if mine is not None:
        out["peak_python_mb"] = round(mine, 1)
    jvm = java_below(os.getpid())
    peak = status_mb(jvm, "VmHWM") if jvm is not None else None
    if peak is not None:
        out["peak_jvm_mb"] = round(peak, 1)
    return out


class PeakWatch:
    """Polls, every ``every`` seconds until ``stop``, the peak RSS (``VmHWM``) of the process
    ``pid`` and of the JVM below it (looked for again whenever the one found is gone), and the
    largest ``VmRSS`` of that JVM seen."""

    def __init__(self, pid: int, every: float = EVERY) -> None:
        self.pid = pid
        self.every = every
        self.python_mb = 0.0
        self.jvm_mb = 0.0
        self.jvm_rss_mb = 0.0
        self.jvm: int | None = None
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"peak-{pid}", daemon=True)

    def start(self) -> PeakWatch:
        self._thread.start()
        return self

    def poll(self) -> None:
        self.polls += 1
        peak = status_mb(self.pid, "VmHWM")
        if peak is not None:
            self.python_mb = max(self.python_mb, peak)
        # spark-submit runs a short-lived java first (Spark's launcher, which builds the
        # command), then the driver's: a JVM gone is looked for again
        hwm = status_mb(self.jvm, "VmHWM") if self.jvm is not None else None
        if hwm is None:
            self.jvm = java_below(self.pid)
            hwm = status_mb(self.jvm, "VmHWM") if self.jvm is not None else None
        if self.jvm is not None and hwm is not None:
            self.jvm_mb = max(self.jvm_mb, hwm)
            self.jvm_rss_mb = max(self.jvm_rss_mb, status_mb(self.jvm, "VmRSS") or 0.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.every)

    def stop(self) -> dict[str, float]:
        """Stop polling; the peaks in MiB (0 for a process never seen)."""
        self._stop.set()
        self._thread.join(timeout=10)
        return {
            "python_mb": round(self.python_mb, 1),
            "jvm_mb": round(self.jvm_mb, 1),
            "jvm_rss_mb": round(self.jvm_rss_mb, 1),
        }
