"""FullLoad reports the median of its runs (``bench.run._median``) and prints every run."""

from __future__ import annotations

from typing import Any

from bench.run import _median
from tests.bench.results import rendered


def test_the_median_run_is_the_middle_one_or_the_lower_middle_one() -> None:
    assert _median([3.0, 1.0, 2.0], float) == 2.0
    assert _median([4.0, 1.0, 3.0, 2.0], float) == 2.0
    assert _median([5.0], float) == 5.0


RUN = {"seconds": 7.1, "transactions": 1, "rows_per_s": 140_845.1}
FULL_LOAD: dict[str, Any] = {
    "rows": 1_000_000,
    "file_mib": 13.5,
    "rows_after": {
        "ours": 1_000_000,
        "append": 1_000_000,
        "layout": 1_000_000,
        "layout_history": 1_000_000,
    },
    "ours": {**RUN, "profile": [], "batches": []},
    "append": {**RUN, "seconds": 1.8, "rows_per_s": 555_555.6},
    "layout": {**RUN, "seconds": 4.5, "rows_per_s": 222_222.2},
    "runs": {"ours": [7.7, 7.1, 6.9], "append": [1.6, 1.8, 3.8], "layout": [4.5, 4.4, 4.6]},
    "ratios": {
        "ours_vs_append": 0.254,
        "ours_time_vs_append": 3.944,
        "ours_time_vs_layout": 1.578,
        "layout_time_vs_append": 2.5,
    },
}
"""A FullLoad result of three rounds, its rows as they should be."""


def test_the_full_load_line_gives_the_medians_and_every_run() -> None:
    text = rendered("FullLoad", FULL_LOAD)
    assert (
        "FullLoad time ours / append: 7.1s / 1.8s = 3.94x (medians of 3 runs: ours 7.7/7.1/6.9 s,"
        " append 1.6/1.8/3.8 s, layout 4.5/4.4/4.6 s); rows after: ours 1,000,000, append "
        "1,000,000, layout 1,000,000, layout history 1,000,000\n" in text
    )
    assert (
        "FullLoad the layout alone (current + history rows, hashed, two plain appends): 4.5s = "
        "2.50x the append; ours / it = 1.58x" in text
    )


def test_rows_that_differ_are_flagged() -> None:
    after = {**FULL_LOAD["rows_after"], "layout": 999_999}
    text = rendered("FullLoad", {**FULL_LOAD, "rows_after": after})
    assert "layout 999,999, layout history 1,000,000  (DIFFER)" in text
