"""The Latency benchmark's stream: one warm-up transaction, a steady untimed part, then the
measured part, published as one stream (the same for ours and plain)."""

from dataclasses import replace

from bench.kafka import _latency_stream
from bench.sizes import QUICK


def test_latency_stream_publishes_an_untimed_steady_part_before_the_measured_one() -> None:
    sizes = replace(QUICK, latency_rate=10.0, latency_seconds=3.0, latency_warm_seconds=2.0)
    txs, warm, steady, measured = _latency_stream(sizes)
    assert warm is txs[0]
    assert [t.transaction_id for t in steady] == [t.transaction_id for t in txs[1:21]]
    assert [t.transaction_id for t in measured] == [t.transaction_id for t in txs[21:]]
    assert (len(steady), len(measured)) == (20, 30)


def test_latency_stream_without_a_steady_part_measures_all_but_the_warm_up() -> None:
    sizes = replace(QUICK, latency_rate=10.0, latency_seconds=3.0, latency_warm_seconds=0.0)
    txs, _, steady, measured = _latency_stream(sizes)
    assert steady == [] and len(measured) == 30 and measured == txs[1:]
