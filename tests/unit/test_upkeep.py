"""What table upkeep decides, without Spark (streaming/core/upkeep.py): small files from Delta's
file-size histogram, the overlap depth of a current table's id ranges, which tasks are due and
in what order; the ``upkeep`` config keys; the upkeep metrics; the held copies that follow an
upkeep commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.core.config import parse_config
from streaming.core.errors import ConfigError
from streaming.core.upkeep import Policy, TableFiles, Task, due, overlap_depth, small_files
from streaming.runtime.metrics import Metrics
from streaming.storage.ledger import HeldIds
from streaming.storage.tombstones import DeletedKeys

MIB = 2**20
POLICY = Policy(compact_files=3, small_bytes=16 * MIB, order_depth=4, vacuum_every=3600)


def test_small_files_count_the_bins_that_end_at_or_below_the_threshold() -> None:
    boundaries = [0, 8192, 16 * MIB, 32 * MIB, 64 * MIB]
    counts = [5, 2, 3, 1, 7]
    assert small_files(boundaries, counts, 16 * MIB) == 7  # [0, 8K) and [8K, 16M)
    assert small_files(boundaries, counts, 20 * MIB) == 7  # [16M, 32M) straddles 20M: not counted
    assert small_files(boundaries, counts, 32 * MIB) == 10
    assert small_files(boundaries, counts, 10**15) == 11  # the last bin has no end: never small
    with pytest.raises(ValueError):
        small_files(boundaries, counts[:-1], MIB)


def test_overlap_depth_is_one_for_ranges_apart_and_every_file_for_ranges_over_all() -> None:
    assert overlap_depth([]) == 0
    assert overlap_depth([("a", "c"), ("d", "f"), ("g", "k")]) == 1
    assert overlap_depth([("a", "z"), ("b", "y"), ("c", "x")]) == 3
    # files sharing an end point both hold that id
    assert overlap_depth([("a", "c"), ("c", "f")]) == 2
    # a clustered table plus two wide files a MERGE wrote
    clustered = [(f"{i:03d}", f"{i:03d}z") for i in range(10)]
    assert overlap_depth([*clustered, ("000", "009"), ("001", "008")]) == 3


def table(path: str, small: int, *, current: bool = False, files: int | None = None) -> TableFiles:
    return TableFiles(path, current, small if files is None else files, small)


def test_due_compacts_tables_past_the_threshold_most_small_files_first() -> None:
    tables = [
        table("ledger", 3),
        table("history", 9),
        table("outcomes", 2),
        table("dog", 5, current=True),
    ]
    tasks = due(tables, policy=POLICY, now=0, vacuumed={})
    assert [(t.path, t.action) for t in tasks] == [
        ("history", "compact"),
        ("dog", "order"),  # a current table's compaction clusters it when its ranges overlap
        ("ledger", "compact"),
    ]
    assert tasks[0].reason == "9 small files of 9"


def test_due_checks_the_order_of_current_tables_first_written_since_the_start() -> None:
    tables = [
        table("dog", 1, current=True, files=4),
        table("cat", 4, current=True),
        table("pup", 0, current=True, files=3),  # fewer files than order_depth: no check yet
    ]
    unchecked = {"dog", "cat", "pup", "gone"}
    tasks = due(tables, policy=POLICY, now=0, vacuumed={}, unchecked=unchecked)
    # cat is compacted (its compaction looks at the order); a table not among those seen: none
    assert tasks == [
        Task("cat", "order", "4 small files of 4"),
        Task("dog", "check", "first write since the job started"),
    ]


def test_due_vacuums_each_table_every_period_longest_waiting_first() -> None:
    tables = [table("a", 0), table("b", 0), table("c", 0)]
    vacuumed = {"a": 300.0, "b": 0.0, "c": 3000.0}
    tasks = due(tables, policy=POLICY, now=4000, vacuumed=vacuumed)
    assert [(t.path, t.action) for t in tasks] == [("b", "vacuum"), ("a", "vacuum")]
    assert due(tables, policy=POLICY, now=3599, vacuumed={"a": 0.0}) == []


def test_upkeep_config_defaults_bounds_and_durations(tmp_path: Path) -> None:
    base = {"warehouse": "w", "checkpoints": "c"}
    cfg = parse_config(base, base=tmp_path, environ={})
    assert cfg.upkeep.enabled
    assert (cfg.upkeep.compact_files, cfg.upkeep.small_file_mib) == (50, 16)
    assert cfg.upkeep.retention_seconds == 7 * 86400
    assert cfg.upkeep.vacuum_every_seconds == 86400
    assert cfg.upkeep.budget_seconds == 10
    cfg = parse_config(
        {**base, "upkeep": {"retention": "36 hours", "vacuum_every": "90 minutes"}},
        base=tmp_path,
        environ={},
    )
    assert (cfg.upkeep.retention_hours, cfg.upkeep.vacuum_every_seconds) == (36, 5400)
    off = parse_config(base, base=tmp_path, environ={"CDC_UPKEEP__ENABLED": "false"})
    assert not off.upkeep.enabled
    for bad, key in (
        ({"retention": "30 minutes"}, "upkeep.retention"),
        ({"compact_files": 1}, "upkeep.compact_files"),
        ({"budget": "30 sec"}, "upkeep.budget"),
        ({"vacuum_evry": "1 day"}, "upkeep.vacuum_evry"),
    ):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            parse_config({**base, "upkeep": bad}, base=tmp_path, environ={})


def test_upkeep_metrics_count_runs_by_action_and_result_and_files_per_table() -> None:
    metrics = Metrics()
    metrics.upkeep([("compact", "done", 1.5), ("vacuum", "failed", 0.5)], {"dog": 3})
    metrics.upkeep([("compact", "done", 2.0)], {"dog": 1, "_system/outcomes": 4})
    get = metrics.registry.get_sample_value
    assert get("cdc_upkeep_runs_total", {"action": "compact", "result": "done"}) == 2
    assert get("cdc_upkeep_runs_total", {"action": "vacuum", "result": "failed"}) == 1
    assert get("cdc_upkeep_seconds_total", {"action": "compact"}) == 3.5
    assert get("cdc_table_files", {"table": "dog"}) == 1
    assert get("cdc_table_files", {"table": "_system/outcomes"}) == 4


def test_held_copies_follow_an_upkeep_commit_only_from_the_version_they_hold() -> None:
    held = HeldIds(version=4, ids={"t1"})
    held.moved(3, 5)  # not the version held: nothing
    assert held.version == 4
    held.moved(4, 6)
    assert (held.version, held.ids) == (6, {"t1"})
    deleted = DeletedKeys()
    deleted._tables["t"] = (2, {"k": (1, None)})
    deleted.moved("t", 1, 3)
    assert deleted._tables["t"][0] == 2
    deleted.moved("t", 2, 3)
    assert deleted._tables["t"] == (3, {"k": (1, None)})


class FakeTables:
    """The Delta side of ``runtime.upkeep`` replaced (each table: its version, files and small
    files), to test the orchestration alone: the budget, the stop, failures and retries. What
    the Delta operations do is tested on real tables in tests/integration/test_upkeep.py."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tables: dict[str, int]) -> None:
        from streaming.runtime import upkeep as module

        self.small = dict(tables)
        self.version = dict.fromkeys(tables, 1)
        self.ran: list[tuple[str, str]] = []
        self.failing: set[str] = set()
        self.now = 0.0
        props = {"delta.logRetentionDuration": "interval 604800 seconds"}
        props["delta.deletedFileRetentionDuration"] = props["delta.logRetentionDuration"]
        monkeypatch.setattr(module, "table_state", lambda spark, path: (None, props))
        monkeypatch.setattr(
            module,
            "held_files",
            lambda spark, path, small: (self.version[path], self.small[path], self.small[path]),
        )
        monkeypatch.setattr(module, "latest_version", lambda spark, path: self.version[path])
        monkeypatch.setattr(module, "commit_operations", lambda spark, path, a, b: ["OPTIMIZE"])
        monkeypatch.setattr(module, "compact", self.compact)

    def compact(self, spark: object, path: str, **_: object) -> None:
        self.ran.append((path, "compact"))
        self.now += 4  # each compaction takes 4 s
        if path in self.failing:
            raise RuntimeError("Access Denied\nstack trace")
        self.small[path] = 1
        self.version[path] += 1


def test_upkeep_stops_starting_tasks_past_its_budget_and_the_rest_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from streaming.core.config import UpkeepConfig
    from streaming.runtime.upkeep import Upkeep

    fake = FakeTables(monkeypatch, {"a": 60, "b": 55, "c": 50, "d": 3})
    moved: list[tuple[str, int, int]] = []
    upkeep = Upkeep(
        None,  # type: ignore[arg-type]
        UpkeepConfig(budget="6 seconds"),
        current=(),
        current_file_mib=32,
        moved=lambda path, before, after: moved.append((path, before, after)),
        clock=lambda: fake.now,
        wall=lambda: fake.now,
    )
    first = upkeep.after_batch(["a", "b", "c", "d"])
    # a (4 s) then b (8 s in all): the budget of 6 s was not spent when b started; c waits
    assert [(d.task.path, d.result) for d in first] == [("a", "done"), ("b", "done")]
    assert moved == [("a", 1, 2), ("b", 1, 2)]  # OPTIMIZE changes no row: held copies follow
    second = upkeep.after_batch([])  # every table seen since the start is looked at
    assert [d.task.path for d in second] == ["c"]
    assert upkeep.after_batch([]) == []  # nothing due

    stopping = upkeep.after_batch(["a"], stopping=lambda: True)
    assert stopping == []


def test_a_failed_upkeep_task_is_reported_never_raised_and_tried_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from streaming.core.config import UpkeepConfig
    from streaming.runtime.upkeep import RETRY_AFTER, Upkeep

    fake = FakeTables(monkeypatch, {"a": 60, "b": 55})
    fake.failing.add("a")
    metrics = Metrics()
    upkeep = Upkeep(
        None,  # type: ignore[arg-type]
        UpkeepConfig(budget="1 minute"),
        current=(),
        current_file_mib=32,
        metrics=metrics,
        clock=lambda: fake.now,
        wall=lambda: fake.now,
    )
    done = upkeep.after_batch(["a", "b"])
    assert [(d.task.path, d.result) for d in done] == [("a", "failed"), ("b", "done")]
    assert done[0].detail.startswith("Access Denied")
    get = metrics.registry.get_sample_value
    assert get("cdc_upkeep_runs_total", {"action": "compact", "result": "failed"}) == 1
    assert upkeep.after_batch([]) == []  # a waits RETRY_AFTER before its next try
    fake.failing.clear()
    fake.now += RETRY_AFTER
    assert [(d.task.path, d.result) for d in upkeep.after_batch([])] == [("a", "done")]
