"""Workload **Soak** (issue 36, item 3): the real job running unattended for many micro-batches.

The job is run as users run it: a subprocess ``python -m streaming.cli.main run --config
cdc.yaml`` (``cdc run``), with a 1-second processing-time trigger, a Kafka source (the local
broker the runner starts) and a landing folder, metrics on (127.0.0.1, a free port) and,
unless ``--soak-no-upkeep``, no ``upkeep`` key (the job's defaults). A separate process is the
point: its memory (the driver's Python process and its JVM) is the job's alone, nothing of the
benchmark's own session is in it, and it stops as in production (SIGTERM, docs/interface.md
"Stopping it").

Transactions (``SoakStream``): one object table ``shop.Item`` of ``Sizes.soak_keys`` keys (5,000),
created by one seed transaction (an UPSERT of every key, the first batch); then UPSERTs of 1-5
rows (about a third of their rows re-insert a deleted key when there is one) and, one in ten,
DELETEs of 1-5 live keys, published to the requests topic at ``Sizes.soak_rate`` per second
(8) until the job has logged ``Sizes.soak_batches`` batches. Every ``LANDING_EVERY`` batches one
more transaction (an UPSERT of a key of a range the Kafka transactions never touch, so the two
sources' order does not matter) is dropped as a request file into the landing folder: the file
source's metadata log in the checkpoint grows too. Then publishing stops, the job drains (until
``_system/outcomes`` holds an outcome for every transaction published) and gets a SIGTERM.

Measured (the pure parts are functions, tested in tests/bench/test_bench_soak.py):

- batch time: the sink's own line per batch (``batch N: … , 1.23s``,
  ``runtime.batch.progress.report_progress``): the seconds the batch spent in the job's
  foreachBatch; and Spark's duration of the batch from the progress line (``query cdc batch
  N: …, 1234 ms``: planning, offsets and commit logs too).
  Median and p90 per decile of the first ``soak_batches`` batches (in log order);
- memory: VmRSS (``/proc/<pid>/status``) of the ``cdc run`` process and of its JVM child, every
  ``SAMPLE_SECONDS``; a sample belongs to the decile of the batch running when it was taken; the
  median per decile. RSS is resident memory, not what is in use: the JVM's includes its heap as
  far as it has grown (the heap is not given back to the system after a collection), metaspace,
  code cache, thread stacks and direct buffers. A heap that fills up towards its maximum shows
  as rising RSS, one that cycles within what it already took does not: the job runs with a
  fixed heap (``-Xms`` = ``spark.driver.memory``, ``DRIVER_MEMORY``). What is in use: the live
  heap after a full collection (``jcmd GC.class_histogram``) at the end of each decile, and the
  classes that grew most from decile 2 to the last (a leak shows there);
- storage, at the end of each decile (and after the first batch, and after the drain): per Delta
  table of the warehouse, its live data files (delta-rs ``DeltaTable.file_uris()``: an
  independent reader) and the entries of its ``_delta_log`` (commit ``*.json`` files and
  checkpoint parquet files); the streaming checkpoint's bytes and files (the whole tree), its
  offsets and commits log files and each ``sources/<n>`` metadata log's files;
- upkeep: the job's log lines that name upkeep and OPTIMIZE or VACUUM, and the metric
  ``cdc_upkeep_runs_total`` if the job serves it (none of either before in-job upkeep exists);
- at the end, with delta-rs: every transaction published has exactly one COMMITTED outcome in
  ``_system/outcomes``, none is REJECTED or FAILED, and the current table holds exactly the
  rows the generator expects.

Targets: the last decile's median batch time <= ``BATCH_TIME_BOUND`` x the second's; the
driver's Python and JVM RSS in deciles 2-10 within ``MEMORY_BAND`` of decile 2's. Files per
table: the value at each decile and the maximum, no bound here (in-job upkeep states its own).
"""

from __future__ import annotations

import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import yaml

from bench import data
from bench.common import SHUFFLE_PARTITIONS, say
from bench.kafka import SteadyPublisher
from bench.ours import TABLES
from bench.sizes import Sizes
from streaming.core.layout import Layout
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.memory import java_below, status_mb
from tests.support.ports import free_port

DATASET = data.W1_DATASET
"""``SmallTx.request`` names W1's dataset; the soak's has one schema of its own."""
SCHEMA = f"{DATASET}.Item"
PROPS = ("name", "qty", "price", "status")
YAML = (
    f"{SCHEMA}:\n  properties:\n    name: {{type: string}}\n    qty: {{type: integer}}\n"
    "    price: {type: number}\n    status: {type: string}\n"
)
KEY_PREFIX = "k"
LANDING_KEYS = 100
"""The last keys of the table: only the landing folder's transactions write them."""
LANDING_EVERY = 20
"""A request file is dropped into the landing folder every this many batches."""
DELETE_SHARE = 0.10
REINSERT_SHARE = 0.3
"""Of an UPSERT's rows, this share re-inserts a deleted key (when one is deleted)."""
TRIGGER = "1 second"
SAMPLE_SECONDS = 5.0
DECILES = 10
BATCH_TIME_BOUND = 1.1
"""Target: the last decile's median batch time <= this x the second decile's."""
MEMORY_BAND = 0.10
"""Target: the driver's RSS (Python, JVM) in deciles 2..10 within this share of decile 2's."""
DRIVER_MEMORY = "2g"
"""The job's ``spark.driver.memory``, as a deployment sets it, and its initial heap too
(``-Xms``, ``DRIVER_JAVA_OPTIONS``): a fixed heap, as long-running JVMs are given. With the
maximum alone, G1 grew the heap in steps for 600 of 1,000 batches (JVM RSS +18% from decile 2
to 10, session 17): growth, not a leak; with ``-Xms`` the RSS stayed within ±3.6% (the batch
time drifted all the same: it is not the heap's doing). Left unset, the heap may grow to a
quarter of the machine's memory."""
DRIVER_JAVA_OPTIONS = f"-Xms{DRIVER_MEMORY}"
HISTOGRAM_SECONDS = 120.0
"""``jcmd <jvm> GC.class_histogram`` (a full collection, then the live objects by class): its
time limit."""
HISTOGRAM_TOP = 12
"""Classes kept per live-heap histogram (the largest by bytes)."""
START_SECONDS = 600.0
"""How long the job may take to start and run its first batch (the seed)."""
DRAIN_SECONDS = 600.0
"""After the last publish: how long to wait for every outcome."""
STOP_SECONDS = 120.0
"""After SIGTERM: how long the job may take to exit (its grace period is 20 s)."""


# -- the transactions ------------------------------------------------------------------------
def item_key(number: int) -> str:
    return f"{KEY_PREFIX}{number:06d}"


class SoakStream:
    """The soak's transactions, made on demand (deterministic for a seed), and the state of
    the current table they lead to (``expected``: id → properties). Kafka's transactions touch
    the keys ``0 .. keys - LANDING_KEYS - 1``; the landing folder's, the last ``LANDING_KEYS``."""

    def __init__(self, keys: int, seed: int = data.SEED) -> None:
        if keys <= LANDING_KEYS:
            raise ValueError(f"soak keys: expected more than {LANDING_KEYS}, not {keys}")
        self.keys = keys
        self.kafka_keys = keys - LANDING_KEYS
        self.rng = random.Random(seed + 36)
        self.expected: dict[str, dict[str, Any]] = {}
        self.deleted: set[str] = set()
        self.count = 0
        self.landing_count = 0
        self.live = 0
        """Keys of the Kafka range in ``expected``."""
        self.deletes = 0
        self.reinserts = 0

    def _row(self, key: str) -> dict[str, Any]:
        rng = self.rng
        return {
            "id": key,
            "name": f"name-{rng.randrange(100_000)}",
            "qty": rng.randrange(100),
            "price": rng.randrange(100_000) / 100,
            "status": rng.choice(data.STATUSES),
        }

    def _upsert(self, tid: str, keys: Iterable[str]) -> data.SmallTx:
        rows = [self._row(k) for k in sorted(keys)]
        for row in rows:
            if row["id"] not in self.expected and self._kafka(row["id"]):
                self.live += 1
            self.expected[row["id"]] = {p: row[p] for p in PROPS}
            if row["id"] in self.deleted:
                self.deleted.discard(row["id"])
                self.reinserts += 1
        return data.SmallTx(tid, "UPSERT", SCHEMA, rows, f"./data/soak/{tid}")

    def seed(self) -> data.SmallTx:
        """An UPSERT of every key (the first transaction)."""
        return self._upsert("soak-seed", (item_key(n) for n in range(self.keys)))

    def next(self) -> data.SmallTx:
        """The next Kafka transaction: a DELETE of 1-5 live keys (one in ten), else an UPSERT
        of 1-5 keys, some of them deleted ones."""
        rng = self.rng
        self.count += 1
        tid = f"soak-{self.count:07d}"
        size = rng.randint(1, 5)
        if rng.random() < DELETE_SHARE and self.live > 2 * size:
            chosen: set[str] = set()
            while len(chosen) < size:
                key = item_key(rng.randrange(self.kafka_keys))
                if key in self.expected:
                    chosen.add(key)
            for key in chosen:
                del self.expected[key]
                self.deleted.add(key)
            self.live -= len(chosen)
            self.deletes += len(chosen)
            rows = [{"id": k} for k in sorted(chosen)]
            return data.SmallTx(tid, "DELETE", SCHEMA, rows, f"./data/soak/{tid}")
        keys: set[str] = set()
        while len(keys) < size:
            gone = sorted(self.deleted - keys)
            if gone and rng.random() < REINSERT_SHARE:
                keys.add(rng.choice(gone))
            else:
                keys.add(item_key(rng.randrange(self.kafka_keys)))
        return self._upsert(tid, keys)

    def landing(self) -> data.SmallTx:
        """The next landing-folder transaction: an UPSERT of one key of the landing range."""
        self.landing_count += 1
        key = item_key(self.kafka_keys + (self.landing_count - 1) % LANDING_KEYS)
        return self._upsert(f"soak-landing-{self.landing_count:05d}", [key])

    def _kafka(self, key: str) -> bool:
        return int(key[len(KEY_PREFIX) :]) < self.kafka_keys


# -- the job's log ---------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchLine:
    """The sink's line of one micro-batch (``runtime.batch.progress.report_progress``)."""

    batch_id: int
    transactions: int
    statuses: dict[str, int]
    rows: int
    commits: int
    jobs: int
    seconds: float


_BATCH = re.compile(
    r"batch (\d+): (\d+) transactions \(([^)]*)\), (\d+) rows changed in \d+ tables, "
    r"(\d+) Delta commits, (\d+) Spark jobs, (\d+(?:\.\d+)?)s\s*$"
)
_PROGRESS = re.compile(r"query \S+ batch (\d+): \d+ input rows, .* processed, (\d+) ms")
_LEVEL = re.compile(r"\b(WARN|WARNING|ERROR)\b")
_STAMP = re.compile(r"^\d{2,4}[-/]\d{2}[-/]\d{2}[ T]\d{2}:\d{2}:\d{2}[,.\d]*\s+")
_NUMBER = re.compile(r"\d+")


def parse_batch_line(line: str) -> BatchLine | None:
    """The sink's per-batch line, e.g. ``… batch 7: 9 transactions (COMMITTED 9), 21 rows
    changed in 1 tables, 4 Delta commits, 12 Spark jobs, 1.23s``; None for any other line."""
    m = _BATCH.search(line)
    if m is None:
        return None
    statuses = {}
    for part in m.group(3).split(","):
        name, _, count = part.strip().partition(" ")
        if name and count.isdigit():
            statuses[name] = int(count)
    return BatchLine(
        batch_id=int(m.group(1)),
        transactions=int(m.group(2)),
        statuses=statuses,
        rows=int(m.group(4)),
        commits=int(m.group(5)),
        jobs=int(m.group(6)),
        seconds=float(m.group(7)),
    )


def parse_progress_line(line: str) -> tuple[int, float] | None:
    """(batch id, seconds) of the query's progress line (``streaming.runtime.observe``):
    ``query cdc batch 7: 9 input rows, … rows/s processed, 1234 ms[, lag …]``."""
    m = _PROGRESS.search(line)
    return (int(m.group(1)), int(m.group(2)) / 1000) if m else None


_UPKEEP = re.compile(r"upkeep: (\w+) of \S+ .*?(?:, |failed after )(\d+(?:\.\d+)?)s\b")


def parse_upkeep_line(line: str) -> tuple[str, float] | None:
    """(action, seconds) of an upkeep task's line (``streaming.runtime.upkeep``): ``upkeep:
    compact of _system/outcomes (50 small files of 50): files 50 → 1, 1.23s``, or ``upkeep:
    vacuum of … failed after 2.00s (…)``."""
    if "streaming.runtime.upkeep" not in line:
        return None
    m = _UPKEEP.search(line)
    return (m.group(1), float(m.group(2))) if m else None


def warning_of(line: str) -> str | None:
    """The text of a WARN/WARNING/ERROR line without its leading date and time (None for other
    lines)."""
    if _LEVEL.search(line) is None:
        return None
    return _STAMP.sub("", line.strip(), count=1)[:240]


def warning_kind(text: str) -> str:
    """A warning with its numbers as ``N``: repeats of one warning (``… spent 8215
    milliseconds``) count as one kind."""
    return _NUMBER.sub("N", text)


# -- statistics ------------------------------------------------------------------------------
def quantile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-quantile (None of nothing)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def median(values: Sequence[float]) -> float | None:
    """The median (the mean of the middle two of an even count; None of nothing)."""
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def decile_bounds(n: int, parts: int = DECILES) -> list[tuple[int, int]]:
    """[start, end) of each part of ``n`` batches (indexes 0..n-1): ``ceil(d * n / parts)``
    on, so that ``decile_of`` is ``index * parts // n``; every part non-empty for n >= parts."""
    if n < parts:
        raise ValueError(f"{n} batches: expected at least {parts}")
    starts = [-(-d * n // parts) for d in range(parts + 1)]
    return [(starts[d], starts[d + 1]) for d in range(parts)]


def decile_of(index: int, n: int, parts: int = DECILES) -> int | None:
    """The part (0-based) of the batch at ``index`` of ``n``; None outside 0..n-1."""
    return index * parts // n if 0 <= index < n else None


@dataclass(frozen=True)
class Sample:
    """The driver's memory at one moment: ``done`` batches had finished."""

    at: float
    done: int
    python_mb: float | None
    jvm_mb: float | None


def decile_rows(
    batches: Sequence[BatchLine],
    spark_seconds: Mapping[int, float],
    samples: Sequence[Sample],
    n: int,
    upkeep: Sequence[tuple[int, str, float]] = (),
) -> list[dict[str, Any]]:
    """Per decile of the first ``n`` batches: their ids, median transactions, the sink's
    seconds (median, p90), Spark's seconds (median), the median RSS of the samples taken
    while a batch of the decile ran (a sample after ``done`` batches: batch index ``done``),
    and the upkeep tasks that followed its batches (``JobLog.upkeep_runs``) and their seconds."""
    rows = []
    for d, (start, end) in enumerate(decile_bounds(n)):
        part = batches[start:end]
        tasks = [seconds for index, _, seconds in upkeep if start <= index < end]
        mine = [s for s in samples if decile_of(s.done, n) == d]
        seconds = [b.seconds for b in part]
        spark = [spark_seconds[b.batch_id] for b in part if b.batch_id in spark_seconds]
        rows.append(
            {
                "decile": d + 1,
                "batches": len(part),
                "first_batch": part[0].batch_id if part else None,
                "last_batch": part[-1].batch_id if part else None,
                "transactions": median([b.transactions for b in part]),
                "seconds_p50": _round(median(seconds)),
                "seconds_p90": _round(quantile(seconds, 0.9)),
                "spark_seconds_p50": _round(median(spark)),
                "python_rss_mb": _round(median([s.python_mb for s in mine if s.python_mb]), 1),
                "jvm_rss_mb": _round(median([s.jvm_mb for s in mine if s.jvm_mb]), 1),
                "samples": len(mine),
                "upkeep_tasks": len(tasks),
                "upkeep_seconds": round(sum(tasks), 2),
            }
        )
    return rows


def _round(value: float | None, places: int = 3) -> float | None:
    return None if value is None else round(value, places)


def evaluate_targets(deciles: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The soak's targets over the decile rows: batch time (last decile's median / the
    second's <= ``BATCH_TIME_BOUND``) and the driver's Python and JVM RSS (deciles 2..10 within
    ``MEMORY_BAND`` of decile 2's: the largest deviation). ``met`` None: not measurable."""
    second, last = deciles[1], deciles[-1]
    out = []
    ratio = _ratio(last.get("seconds_p50"), second.get("seconds_p50"))
    out.append(
        {
            "name": "Soak: median batch time, last decile / second",
            "value": _round(ratio),
            "bound": BATCH_TIME_BOUND,
            "unit": "x",
            "met": None if ratio is None else ratio <= BATCH_TIME_BOUND,
            "detail": f"{_fmt(last.get('seconds_p50'))}s / {_fmt(second.get('seconds_p50'))}s",
        }
    )
    for key, label in (("python_rss_mb", "Python"), ("jvm_rss_mb", "JVM")):
        base = second.get(key)
        ratios = [_ratio(d.get(key), base) for d in deciles[1:]]
        known = [r for r in ratios if r is not None]
        deviation = max((abs(r - 1) for r in known), default=None)
        whole = len(known) == len(ratios)
        out.append(
            {
                "name": f"Soak: driver {label} RSS, deciles 2-10 vs decile 2",
                "value": _round(deviation),
                "bound": MEMORY_BAND,
                "unit": "±",
                "met": None if deviation is None or not whole else deviation <= MEMORY_BAND,
                "detail": (
                    f"{min(known):.2f}-{max(known):.2f}x of {base:.0f} MB"
                    if known and base
                    else "not sampled"
                ),
            }
        )
    return out


def _ratio(value: Any, base: Any) -> float | None:
    if value is None or not base:
        return None
    return float(value) / float(base)


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def files_max(snapshots: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Per table: the most live files any snapshot saw."""
    out: dict[str, int] = {}
    for snap in snapshots:
        for table, entry in snap["tables"].items():
            if entry.get("files") is not None:
                out[table] = max(out.get(table, 0), int(entry["files"]))
    return out


def counter_total(text: str, name: str) -> float | None:
    """The sum of a Prometheus counter's samples (all label sets) in exposition ``text``;
    None when the metric is not there."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        metric, _, value = line.rpartition(" ")
        if metric.split("{", 1)[0].strip() != name:
            continue
        try:
            total += float(value)
        except ValueError:
            continue
        seen = True
    return total if seen else None


def exactly_once(
    published: Iterable[str], outcomes: Iterable[tuple[str | None, str]]
) -> dict[str, Any]:
    """Outcomes (transaction id, status) against the ids published: each published id has
    exactly one COMMITTED outcome, there is no REJECTED or FAILED one, no COMMITTED one of an
    id not published, and as many COMMITTED outcomes as ids published."""
    wanted = set(published)
    statuses: Counter[str] = Counter()
    committed: Counter[str] = Counter()
    for tid, status in outcomes:
        statuses[status] += 1
        if status == "COMMITTED":
            committed[tid or ""] += 1
    once = sum(1 for t in wanted if committed[t] == 1)
    missing = sorted(t for t in wanted if committed[t] == 0)
    repeated = sorted(t for t, c in committed.items() if c > 1)
    unknown = sorted(t for t in committed if t not in wanted)
    ok = (
        once == len(wanted)
        and statuses["COMMITTED"] == len(wanted)
        and not statuses["REJECTED"]
        and not statuses["FAILED"]
        and not unknown
    )
    return {
        "published": len(wanted),
        "outcomes": sum(statuses.values()),
        "statuses": dict(sorted(statuses.items())),
        "committed_once": once,
        "missing": len(missing),
        "repeated": len(repeated),
        "unknown": len(unknown),
        "examples": (missing + repeated + unknown)[:5],
        "ok": ok,
    }


def state_diff(
    expected: Mapping[str, Mapping[str, Any]], actual: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The current table's rows (id → properties) against the generator's."""
    missing = sorted(expected.keys() - actual.keys())
    extra = sorted(actual.keys() - expected.keys())
    differ = sorted(
        k for k in expected.keys() & actual.keys() if dict(expected[k]) != dict(actual[k])
    )
    return {
        "expected": len(expected),
        "actual": len(actual),
        "missing": len(missing),
        "extra": len(extra),
        "differ": len(differ),
        "examples": (missing + extra + differ)[:5],
        "ok": not (missing or extra or differ),
    }


# -- the process, its memory, its storage ----------------------------------------------------
def rss_mb(pid: int) -> float | None:
    """VmRSS of a process in MB (None when it is gone)."""
    return status_mb(pid, "VmRSS")


def parse_class_histogram(text: str, top: int = HISTOGRAM_TOP) -> dict[str, Any] | None:
    """``jcmd GC.class_histogram``'s output: the live heap (its ``Total`` line's bytes) and the
    ``top`` classes by bytes (rows ``num: instances bytes class``); None without a total."""
    total: int | None = None
    classes: list[tuple[str, int]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "Total" and parts[2].isdigit():
            total = int(parts[2])
        elif len(parts) >= 4 and parts[0].endswith(":") and parts[2].isdigit():
            classes.append((parts[3], int(parts[2])))
    if total is None:
        return None
    classes.sort(key=lambda c: -c[1])
    return {"mb": round(total / 2**20, 1), "top": [[c, b] for c, b in classes[:top]]}


def live_heap(jvm: int | None) -> dict[str, Any] | None:
    """The JVM's live heap now: ``jcmd GC.class_histogram`` runs a full collection and counts
    what survives (a pause of the job of about a second, once per decile); None when the JVM
    is gone or jcmd fails (the report shows "-")."""
    if jvm is None:
        return None
    try:
        done = subprocess.run(
            ["jcmd", str(jvm), "GC.class_histogram"],
            capture_output=True,
            text=True,
            timeout=HISTOGRAM_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_class_histogram(done.stdout) if done.returncode == 0 else None


def heap_growth(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, top: int = 5
) -> list[tuple[str, float]]:
    """The classes whose live bytes grew most between two histograms (MB, largest first; a
    class outside a histogram's top counts as 0 there)."""
    if not before or not after:
        return []
    old = {c: b for c, b in before["top"]}
    grown = [(c, (b - old.get(c, 0)) / 2**20) for c, b in after["top"]]
    return sorted((g for g in grown if g[1] > 0), key=lambda g: -g[1])[:top]


def delta_counts(table: Path) -> dict[str, int | None]:
    """A Delta table's live data files (delta-rs) and ``_delta_log`` entries: commit JSON files
    and checkpoint parquet files (classic, multi-part and V2 names)."""
    log = table / "_delta_log"
    names = [p.name for p in log.iterdir()] if log.is_dir() else []
    try:
        files: int | None = len(deltalake.DeltaTable(str(table)).file_uris())
    except Exception:  # not a table yet, or a log delta-rs cannot read: shown as "-"
        files = None
    return {
        "files": files,
        "json": sum(1 for n in names if n.endswith(".json")),
        "checkpoints": sum(1 for n in names if ".checkpoint" in n and n.endswith(".parquet")),
    }


def checkpoint_usage(root: Path) -> dict[str, Any]:
    """The streaming checkpoint: bytes and files of the whole tree, the files of its offsets
    and commits logs and of each ``sources/<n>`` metadata log (hidden ``.crc`` files count in
    the tree's totals only)."""
    total, count = 0, 0
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                total += (Path(folder) / name).stat().st_size
            except OSError:
                continue
            count += 1

    def visible(folder: Path) -> int:
        return (
            sum(1 for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else 0
        )

    logs = root / "sources"
    sources = {s.name: visible(s) for s in sorted(logs.iterdir())} if logs.is_dir() else {}
    return {
        "bytes": total,
        "files": count,
        "offsets": visible(root / "offsets"),
        "commits": visible(root / "commits"),
        "sources": sources,
    }


def _relative(path: str) -> str:
    return path.removeprefix("W/")


_LAYOUT = Layout("W", "C")
TABLE_LABELS = {
    _relative(_LAYOUT.table(DATASET, SCHEMA)): "current",
    _relative(_LAYOUT.history(DATASET, SCHEMA)): "history",
    _relative(_LAYOUT.tombstones(DATASET, SCHEMA)): "tombstones",
    _relative(_LAYOUT.ledger): "transactions",
    _relative(_LAYOUT.outcomes): "outcomes",
    _relative(_LAYOUT.quarantine): "quarantine",
}
"""The soak's tables, relative to the warehouse → their name in the report."""


def warehouse_tables(warehouse: Path) -> list[str]:
    """The soak's tables (``TABLE_LABELS``) then any other Delta table of the warehouse,
    relative to it."""
    found = sorted(
        str(log.parent.relative_to(warehouse))
        for log in warehouse.rglob("_delta_log")
        if log.is_dir()
    )
    return [*TABLE_LABELS, *(t for t in found if t not in TABLE_LABELS)]


class JobLog:
    """Follows the job's log file from a thread: its batch lines, Spark's batch durations,
    upkeep lines, warnings, the stop line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.batches: list[BatchLine] = []
        self.spark_seconds: dict[int, float] = {}
        self.upkeep: list[str] = []
        self.upkeep_runs: list[tuple[int, str, float]] = []
        """(index of the batch it followed, action, seconds) of each upkeep task."""
        self.warnings: Counter[str] = Counter()
        """Warning and error lines by kind (``warning_kind``)."""
        self.warning_examples: dict[str, str] = {}
        """The first line of each kind."""
        self.stopping: list[str] = []
        self.tail: list[str] = []
        self._offset = 0
        self._partial = b""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="soak-log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(10)
        self.read()

    @property
    def count(self) -> int:
        return len(self.batches)

    def _follow(self) -> None:
        while not self._done.wait(0.25):
            self.read()

    def read(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for raw in lines:
            self._line(raw.decode("utf-8", "replace"))

    def _line(self, line: str) -> None:
        self.tail = [*self.tail[-39:], line]
        batch = parse_batch_line(line)
        if batch is not None:
            self.batches.append(batch)
            return
        progress = parse_progress_line(line)
        if progress is not None:
            self.spark_seconds[progress[0]] = progress[1]
            return
        upkeep = parse_upkeep_line(line)
        if upkeep is not None:
            self.upkeep.append(line.strip()[:300])
            self.upkeep_runs.append((len(self.batches) - 1, *upkeep))
        if "stopping on" in line:
            self.stopping.append(line.strip()[:300])
        warning = warning_of(line)
        if warning is not None:
            kind = warning_kind(warning)
            self.warnings[kind] += 1
            self.warning_examples.setdefault(kind, warning)


@dataclass
class Monitor:
    """Samples the driver's memory every ``SAMPLE_SECONDS`` and snapshots the storage once
    ``boundaries[i]`` batches have finished (from a thread)."""

    pid: int
    log: JobLog
    snapshot: Any
    """``(label) -> dict``: the storage snapshot."""
    boundaries: list[tuple[str, int]]
    samples: list[Sample] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    jvm: int | None = None

    def __post_init__(self) -> None:
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-monitor", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(120)

    def sample(self) -> None:
        if self.jvm is None or rss_mb(self.jvm) is None:
            self.jvm = java_below(self.pid)
        self.samples.append(
            Sample(
                time.time(),
                self.log.count,
                rss_mb(self.pid),
                rss_mb(self.jvm) if self.jvm is not None else None,
            )
        )

    def _run(self) -> None:
        next_sample = 0.0
        try:
            while not self._done.wait(0.25):
                if time.monotonic() >= next_sample:
                    self.sample()
                    next_sample = time.monotonic() + SAMPLE_SECONDS
                while self.boundaries and self.log.count >= self.boundaries[0][1]:
                    label, _ = self.boundaries.pop(0)
                    self.snapshots.append(self.snapshot(label))
        except BaseException as e:  # reported by the workload
            self.error = e


# -- the workload ----------------------------------------------------------------------------
def soak(sizes: Sizes, base: Path, broker: LocalKafkaBroker) -> dict[str, Any]:
    """Run the job for ``sizes.soak_batches`` micro-batches under a steady load; see the
    module docstring."""
    n = sizes.soak_batches
    root = base / "soak"
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{DATASET}.yaml").write_text(YAML)
    landing = root / "landing" / "transactions"
    landing.mkdir(parents=True, exist_ok=True)
    topics = {"transactions_topic": "soak.transactions", "outcomes_topic": "soak.outcomes"}
    broker.create_topics(topics.values())
    port = free_port("127.0.0.1")
    cfg: dict[str, Any] = {
        "warehouse": "./warehouse",
        "checkpoints": "./checkpoints",
        "datasets": {DATASET: f"{DATASET}.yaml"},
        "allowed_locations": ["./data"],
        "landing": {"transactions": "./landing/transactions"},
        "kafka": {"bootstrap": broker.bootstrap, **topics},
        "trigger": {"interval": TRIGGER},
        "spark": {
            "shuffle_partitions": SHUFFLE_PARTITIONS,
            "conf": {
                "spark.driver.memory": DRIVER_MEMORY,
                "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS,
            },
        },
        "metrics": {"enabled": True, "host": "127.0.0.1", "port": port},
        **({"tables": dict(TABLES)} if TABLES else {}),
        **({} if sizes.soak_upkeep else {"upkeep": {"enabled": False}}),
    }
    config = root / "cdc.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    layout = Layout(str(root / "warehouse"), str(root / "checkpoints"))
    warehouse, checkpoint = Path(layout.warehouse), Path(layout.checkpoint)
    metrics_url = f"http://127.0.0.1:{port}/metrics"

    stream = SoakStream(sizes.soak_keys)
    seed = stream.seed()
    data.write_w1_data(root, [seed])
    publisher = SteadyPublisher(broker.bootstrap, topics["transactions_topic"])
    landed: list[str] = []

    def snapshot(label: str) -> dict[str, Any]:
        return {
            "label": label,
            "at_batch": log.count,
            "time": round(time.time(), 1),
            "tables": {t: delta_counts(warehouse / t) for t in warehouse_tables(warehouse)},
            "checkpoint": checkpoint_usage(checkpoint),
            "upkeep_metric": _scrape(metrics_url, "cdc_upkeep_runs_total"),
            "live_heap": live_heap(monitor.jvm),
        }

    bounds = decile_bounds(n)
    log = JobLog(root / "job.log")
    job = _start_job(root, config)
    log.start()
    monitor = Monitor(
        job.pid,
        log,
        snapshot,
        [("start", 1), *((f"decile {d + 1}", end) for d, (_, end) in enumerate(bounds))],
    )
    say(
        f"Soak: `cdc run` (pid {job.pid}, log {log.path}), trigger {TRIGGER}, "
        f"{n:,} batches at {sizes.soak_rate:g} tx/s, one table of {sizes.soak_keys:,} keys, "
        f"upkeep {'default' if sizes.soak_upkeep else 'disabled'}"
    )
    started = time.time()
    try:
        monitor.start()
        publisher.send(seed)
        publisher.flush(60)
        _await(lambda: log.count >= 1, START_SECONDS, job, log, "the seed's batch")
        say(f"Soak: the seed's batch done after {time.time() - started:.0f}s; publishing")
        next_landing, sent, begin, last_said = LANDING_EVERY, 0, time.time(), 0
        while log.count < n:
            _alive(job, log)
            if monitor.error is not None:
                raise RuntimeError(f"Soak: the monitor failed: {monitor.error!r}")
            wait = begin + sent / sizes.soak_rate - time.time()
            if wait > 0:
                time.sleep(min(wait, 0.25))
                continue
            tx = stream.next()
            data.write_w1_data(root, [tx])
            publisher.send(tx)
            sent += 1
            if log.count >= next_landing:
                landed.append(_drop(root, landing, stream.landing()))
                next_landing += LANDING_EVERY
            if log.count >= last_said + max(1, n // 20):
                last_said = log.count
                say(f"Soak: {log.count:,}/{n:,} batches, {sent:,} transactions published")
        remaining = publisher.flush(60)
        if remaining or publisher.errors:
            raise RuntimeError(f"Soak: {remaining} not delivered; errors {publisher.errors[:3]}")
        last_publish = time.time()
        published = sorted({seed.transaction_id, *publisher.published, *landed})
        say(f"Soak: {n:,} batches done; {len(published):,} published; draining")
        drained = _drain(layout.outcomes, set(published), job, log)
        drain_seconds = time.time() - last_publish
        monitor.stop()
        monitor.snapshots.append(snapshot("end"))
        say(f"Soak: drained in {drain_seconds:.0f}s ({log.count:,} batches); SIGTERM")
        stop = _stop(job, log)
    finally:
        monitor.stop()
        if job.poll() is None:
            _stop(job, log)
        log.stop()
    seconds = time.time() - started

    outcomes = _read(layout.outcomes, ["transaction_id", "status"])
    check = exactly_once(
        published, zip(outcomes["transaction_id"], outcomes["status"], strict=True)
    )
    current = _read(layout.table(DATASET, SCHEMA), ["id", *PROPS])
    actual = {
        str(current["id"][i]): {p: current[p][i] for p in PROPS} for i in range(len(current["id"]))
    }
    state = state_diff(stream.expected, actual)
    deciles = decile_rows(log.batches[:n], log.spark_seconds, monitor.samples, n, log.upkeep_runs)
    by_label = {s["label"]: s for s in monitor.snapshots}
    for row in deciles:
        row["storage"] = by_label.get(f"decile {row['decile']}")
    result = {
        "batches_target": n,
        "batches": log.count,
        "rate": sizes.soak_rate,
        "keys": sizes.soak_keys,
        "trigger": TRIGGER,
        "upkeep_config": "default" if sizes.soak_upkeep else "enabled: false",
        "seconds": round(seconds, 1),
        "drained": drained,
        "drain_seconds": round(drain_seconds, 1),
        "published": len(published),
        "landing_published": len(landed),
        "deletes": stream.deletes,
        "reinserts": stream.reinserts,
        "sample_seconds": SAMPLE_SECONDS,
        "deciles": deciles,
        "start": by_label.get("start"),
        "end": by_label.get("end"),
        "files_max": files_max(monitor.snapshots),
        "upkeep": {
            "log_lines": len(log.upkeep),
            "examples": log.upkeep[:3],
            "metric": by_label["end"]["upkeep_metric"] if "end" in by_label else None,
        },
        "warnings": {
            "lines": sum(log.warnings.values()),
            "kinds": [
                {"line": log.warning_examples[w], "count": c}
                for w, c in log.warnings.most_common(10)
            ],
        },
        "stop": stop,
        "check": {"outcomes": check, "current": state},
        "targets": evaluate_targets(deciles),
        "samples": [
            {"at": round(s.at, 1), "done": s.done, "python_mb": s.python_mb, "jvm_mb": s.jvm_mb}
            for s in monitor.samples
        ],
        "batch_lines": [
            {
                "batchId": b.batch_id,
                "transactions": b.transactions,
                "seconds": b.seconds,
                "spark_seconds": log.spark_seconds.get(b.batch_id),
                "commits": b.commits,
                "jobs": b.jobs,
            }
            for b in log.batches
        ],
    }
    say(
        f"Soak: {log.count:,} batches in {seconds:.0f}s; exactly once "
        f"{'yes' if check['ok'] else 'NO'}, current table as expected "
        f"{'yes' if state['ok'] else 'NO'}"
    )
    return result


def _start_job(root: Path, config: Path) -> subprocess.Popen[bytes]:
    """``cdc run --config`` as a subprocess of this checkout's code (its folder first on
    PYTHONPATH: the venv may hold another checkout's editable install), output to ``job.log``,
    in a session of its own (a Ctrl-C of the benchmark reaches it only as our SIGTERM)."""
    code = Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(code), env.get("PYTHONPATH", "")) if p)
    with (root / "job.log").open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "streaming.cli.main", "run", "--config", str(config)],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _alive(job: subprocess.Popen[bytes], log: JobLog) -> None:
    if job.poll() is not None:
        log.read()
        tail = "\n".join(log.tail[-20:])
        raise RuntimeError(f"Soak: the job exited ({job.returncode}); its log ends:\n{tail}")


def _await(done: Any, seconds: float, job: subprocess.Popen[bytes], log: JobLog, what: str) -> None:
    deadline = time.time() + seconds
    while not done():
        _alive(job, log)
        if time.time() > deadline:
            raise RuntimeError(f"Soak: no {what} within {seconds:.0f}s")
        time.sleep(0.5)


def _drop(root: Path, landing: Path, tx: data.SmallTx) -> str:
    """``tx``'s data file, then its request as one file in the landing folder (written aside
    and renamed in: the file source never sees half a file)."""
    data.write_w1_data(root, [tx])
    aside = root / f"{tx.transaction_id}.json"
    aside.write_text(tx.request() + "\n")
    os.replace(aside, landing / f"{tx.transaction_id}.json")
    return tx.transaction_id


def _read(table: str, columns: Sequence[str]) -> dict[str, list[Any]]:
    """Columns of a Delta table's live rows, read with delta-rs (through DataFusion, which
    applies deletion vectors)."""
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(table))
    names = ", ".join(f"`{c}`" for c in columns)
    result = pa.table(query.execute(f"SELECT {names} FROM t").read_all())
    return {c: result.column(c).to_pylist() for c in columns}


def _drain(outcomes: str, wanted: set[str], job: subprocess.Popen[bytes], log: JobLog) -> bool:
    """Wait until ``_system/outcomes`` has an outcome for every id of ``wanted`` (True), or
    ``DRAIN_SECONDS`` have passed (False)."""
    deadline = time.time() + DRAIN_SECONDS
    while True:
        _alive(job, log)
        seen = set(_read(outcomes, ["transaction_id"])["transaction_id"])
        if wanted <= seen:
            return True
        if time.time() > deadline:
            say(f"Soak: {len(wanted - seen):,} transactions without an outcome; stopping anyway")
            return False
        time.sleep(3)


def _stop(job: subprocess.Popen[bytes], log: JobLog) -> dict[str, Any]:
    """SIGTERM to the job's Python process (only: the JVM must not get it), then wait; a job
    that does not exit in ``STOP_SECONDS`` is killed (its JVM too, by pid)."""
    started = time.time()
    jvm = java_below(job.pid)
    if job.poll() is None:
        job.send_signal(signal.SIGTERM)
    try:
        code = job.wait(STOP_SECONDS)
        killed = False
    except subprocess.TimeoutExpired:
        job.kill()
        if jvm is not None and rss_mb(jvm) is not None:
            os.kill(jvm, signal.SIGKILL)
        code, killed = job.wait(30), True
    log.read()
    return {
        "exit_code": code,
        "seconds": round(time.time() - started, 1),
        "killed": killed,
        "line": log.stopping[-1] if log.stopping else None,
    }


def _scrape(url: str, name: str) -> float | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return counter_total(response.read().decode(), name)
    except OSError:
        return None


# -- the report ------------------------------------------------------------------------------
def _short(table: str) -> str:
    return TABLE_LABELS.get(table, table)


def render_lines(r: Mapping[str, Any]) -> list[str]:
    """The Soak section: per decile batch time and memory, then per decile each table's live
    files and log entries and the checkpoint, and the end checks (the targets are printed with
    the others': ``target_lines``)."""
    n = r["batches_target"]
    lines = [
        f"Soak: `cdc run` (a subprocess) for {n:,} micro-batches ({r['batches']:,} with the "
        f"drain), trigger {r['trigger']}, {r['rate']:g} tx/s of 1-5 rows (UPSERT, 1 in 10 "
        f"DELETE; {r['deletes']:,} keys deleted, {r['reinserts']:,} re-inserted) into one table "
        f"of {r['keys']:,} keys, and {r['landing_published']} request file(s) in the landing "
        f"folder; upkeep {r['upkeep_config']}; {r['seconds'] / 60:.1f} min",
        "Soak     sink s: the job's own seconds per batch (its log line); spark s: Spark's "
        "batch duration; RSS: median of the samples taken during the decile "
        f"(every {r['sample_seconds']:g}s)",
        f"{'Soak':<8} {'decile':>6} {'batches':>11} {'tx/batch':>8} {'sink s p50':>10} "
        f"{'p90':>6} {'spark s p50':>11} {'Python MB':>9} {'JVM MB':>8} "
        f"{'upkeep tasks':>12} {'upkeep s':>8} {'live heap MB':>12}",
    ]
    for d in r["deciles"]:
        ids = f"{d['first_batch']}-{d['last_batch']}" if d["batches"] else "-"
        lines.append(
            f"{'Soak':<8} {d['decile']:>6} {ids:>11} {_fmt(d['transactions'], '.0f'):>8} "
            f"{_fmt(d['seconds_p50']):>10} {_fmt(d['seconds_p90']):>6} "
            f"{_fmt(d['spark_seconds_p50']):>11} {_fmt(d['python_rss_mb'], '.0f'):>9} "
            f"{_fmt(d['jvm_rss_mb'], '.0f'):>8} {d.get('upkeep_tasks', 0):>12} "
            f"{_fmt(d.get('upkeep_seconds'), '.1f'):>8} "
            f"{_fmt(_live_mb(d.get('storage')), '.0f'):>12}"
        )
    heaps = [_live_heap(d.get("storage")) for d in r["deciles"]]
    grown = heap_growth(heaps[1], heaps[-1]) if len(heaps) > 1 else []
    lines.append(
        "Soak     live heap: the JVM's heap after a full collection (jcmd GC.class_histogram, "
        "at the end of each decile); grown most from decile 2 to the last: "
        + (", ".join(f"{c} {mb:+.1f} MB" for c, mb in grown) or "nothing among the largest")
    )
    snaps = [("start", r.get("start"))]
    snaps += [(str(d["decile"]), d.get("storage")) for d in r["deciles"]]
    snaps.append(("end", r.get("end")))
    tables = list(dict.fromkeys(t for _, s in snaps if s for t in s["tables"]))
    sources = sorted({k for _, s in snaps if s for k in s["checkpoint"]["sources"]})
    lines.append(
        "Soak     storage at the end of each decile: per table live files (delta-rs) / "
        "_delta_log commit .json files / checkpoint parquets; the streaming checkpoint's size "
        "and files, its offsets, commits and sources/<n> log files"
    )
    lines.append(
        f"{'Soak':<8} {'decile':>6} {'batch':>6} "
        + " ".join(f"{_short(t)[:14]:>14}" for t in tables)
        + f" {'ckpt KiB':>9} {'files':>6} {'offsets':>7} {'commits':>7} "
        + " ".join(f"{'src ' + s:>8}" for s in sources)
    )
    for label, s in snaps:
        if not s:
            continue
        cells = []
        for t in tables:
            e = s["tables"].get(t)
            cells.append(f"{_fmt(e['files'], 'd')}/{e['json']}/{e['checkpoints']}" if e else "-")
        c = s["checkpoint"]
        lines.append(
            f"{'Soak':<8} {label:>6} {s['at_batch']:>6} "
            + " ".join(f"{cell:>14}" for cell in cells)
            + f" {c['bytes'] / 1024:>9.0f} {c['files']:>6} {c['offsets']:>7} {c['commits']:>7} "
            + " ".join(f"{c['sources'].get(src, 0):>8}" for src in sources)
        )
    lines.append(
        "Soak     live files, max over the run: "
        + ", ".join(f"{_short(t)} {v}" for t, v in r["files_max"].items())
    )
    up = r["upkeep"]
    metric = up["metric"]
    lines.append(
        f"Soak     upkeep: {up['log_lines']} tasks in the job's log, "
        f"cdc_upkeep_runs_total {'not served' if metric is None else f'{metric:g}'}"
    )
    warn = r["warnings"]
    lines.append(
        f"Soak     warning/error lines in the job's log: {warn['lines']} (by kind, numbers aside; "
        "the first of each)"
    )
    for w in warn["kinds"][:5]:
        lines.append(f"Soak       {w['count']}x {w['line'][:150]}")
    stop = r["stop"]
    lines.append(
        f"Soak     drained {'fully' if r['drained'] else 'NOT fully'} in {r['drain_seconds']:.0f}s"
        f"; SIGTERM → exit {stop['exit_code']} in {stop['seconds']:.1f}s"
        + (" (killed)" if stop["killed"] else "")
        + (f": {stop['line'].split(': ', 1)[-1]}" if stop["line"] else "")
    )
    out, cur = r["check"]["outcomes"], r["check"]["current"]
    lines.append(
        f"Soak     {_mark(out['ok'])} exactly once: {out['committed_once']:,} of "
        f"{out['published']:,} published transactions COMMITTED once; outcomes "
        + ", ".join(f"{k} {v:,}" for k, v in out["statuses"].items())
        + (
            f"; missing {out['missing']}, repeated {out['repeated']}, unknown {out['unknown']}"
            f" (e.g. {', '.join(out['examples'])})"
            if not out["ok"]
            else ""
        )
    )
    lines.append(
        f"Soak     {_mark(cur['ok'])} current table as the generator expects: {cur['actual']:,} "
        f"rows, {cur['expected']:,} expected"
        + (
            f"; missing {cur['missing']}, extra {cur['extra']}, different {cur['differ']} "
            f"(e.g. {', '.join(cur['examples'])})"
            if not cur["ok"]
            else ""
        )
    )
    return lines


def _live_heap(snapshot: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return (snapshot or {}).get("live_heap")


def _live_mb(snapshot: Mapping[str, Any] | None) -> float | None:
    heap = _live_heap(snapshot)
    return heap["mb"] if heap else None


def _mark(ok: bool | None) -> str:
    return "?" if ok is None else "✓" if ok else "✗"


def target_lines(r: Mapping[str, Any]) -> list[str]:
    """The soak's targets, each with ✓ (met), ✗ (not met) or ? (not measured)."""
    out = []
    for t in r["targets"]:
        if t["unit"] == "x":
            value, bound = f"{_fmt(t['value'])}x", f"<= {t['bound']}x"
        else:
            value = "-" if t["value"] is None else f"±{t['value']:.1%}"
            bound = f"within ±{t['bound']:.0%}"
        out.append(
            f"  {_mark(t['met'])} {t['name']:<48} {value:>8}  (target {bound}; {t['detail']})"
        )
    return out
