"""W2 and the Scale workloads report the median of their runs (``--w2-runs``, ``--scale-runs``)
and print every run."""

from __future__ import annotations

import pytest

from bench.__main__ import main
from tests.bench.results import rendered


def _w2(runs: dict[str, list[float]]) -> str:
    ours = {"seconds": 7.0, "changes_per_s": 28_571.4, "profile": [], "batches": []}
    plain = {"seconds": 5.0, "changes_per_s": 40_000.0}
    return rendered(
        "W2",
        {
            "changes": 200_000,
            "table_rows": 1_000_000,
            "properties": 4,
            "files": 20,
            "rows_after": {"ours": 1_020_000, "plain_merge": 1_020_000},
            "keys_vs_plain_merge": {"only_ours": 0, "only_plain": 0},
            "ours": ours,
            "plain_merge": plain,
            "runs": runs,
            "ratios": {"ours_vs_plain_merge": 0.714, "ours_time_vs_plain_merge": 1.4},
        },
    )


def test_the_w2_line_gives_the_medians_and_every_run() -> None:
    text = _w2({"ours": [9.2, 7.0, 6.8], "plain_merge": [5.4, 5.0, 4.3]})
    assert (
        "W2       time ours / plain one MERGE: 7.0s / 5.0s = 1.40x (medians of 3 runs: "
        "ours 9.2/7.0/6.8 s, plain 5.4/5.0/4.3 s)" in text
    )


def test_one_run_prints_no_medians() -> None:
    text = _w2({"ours": [7.0], "plain_merge": [5.0]})
    assert "W2       time ours / plain one MERGE: 7.0s / 5.0s = 1.40x\n" in text + "\n"
    assert "medians" not in text


def test_the_option_reaches_the_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr("bench.__main__.run", lambda sizes, *_a, **_k: seen.append(sizes))
    assert main(["--quick", "--workloads", "W2", "--w2-runs", "5"]) == 0
    assert main(["--workloads", "W2"]) == 0
    assert [s.w2_runs for s in seen] == [5, 3]
    with pytest.raises(SystemExit):
        main(["--w2-runs", "0"])


def test_a_scale_line_gives_each_size_s_median_and_every_run() -> None:
    run = {"seconds": 7.0, "profile": [], "batches": []}
    text = rendered(
        "ScaleRandom",
        {
            "changes": 200_000,
            "shuffled": True,
            "runs": {"1000000": run, "10000000": {**run, "seconds": 10.5}},
            "every": {"1000000": [10.3, 7.0], "10000000": [10.5, 12.7]},
            "time_ratio": 1.5,
            "rows_ratio": 10.0,
        },
    )
    assert "rows       7.0s  (median of 2 runs: 10.3/7.0 s)" in text
    assert "rows      10.5s  (median of 2 runs: 10.5/12.7 s)" in text
    assert "ScaleRandom time ratio 1.50x for 10x rows" in text


def test_the_scale_option_reaches_the_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr("bench.__main__.run", lambda sizes, *_a, **_k: seen.append(sizes))
    assert main(["--workloads", "ScaleRandom", "--scale-runs", "3"]) == 0
    assert main(["--quick", "--workloads", "ScaleRandom"]) == 0
    assert [s.scale_runs for s in seen] == [3, 2]


def test_a_liquid_scale_line_gives_the_clustering_and_its_upkeep_after_the_run() -> None:
    run = {"seconds": 7.0, "profile": [], "batches": []}
    text = rendered(
        "ScaleLiquid",
        {
            "changes": 200_000,
            "shuffled": True,
            "liquid": True,
            "maintain": {
                "10000000": {
                    "seconds": 30.5,
                    "files_before": 40,
                    "files_after": 12,
                    "after": {"seconds": 2.25, "files_before": 14, "files_after": 13},
                }
            },
            "runs": {"1000000": run, "10000000": {**run, "seconds": 8.4}},
            "every": {"1000000": [7.0], "10000000": [8.4]},
            "time_ratio": 1.2,
            "rows_ratio": 10.0,
        },
    )
    assert (
        "ScaleLiquid CLUSTER BY (id), OPTIMIZE FULL of 10,000,000 rows (not in ours' time): "
        "30.5s, 40 -> 12 files; after the run, OPTIMIZE again: 2.2s, 14 -> 13 files"
    ) in text
    assert (
        "ScaleLiquid time ratio 1.20x for 10x rows (rows in random id order, then CLUSTER BY"
        in text
    )
