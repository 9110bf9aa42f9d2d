"""The pieces of a clean stop that need no Spark (streaming/runtime/stopping.py): the sink's gate,
the signals received, the stop line, the grace period's config key. The stop itself, with real
processes and signals, is tests/integration/test_clean_stop.py."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from streaming.core.config import ShutdownConfig, load_config
from streaming.core.errors import ConfigError
from streaming.runtime.stopping import BatchGate, Ending, Shutdown, Stop, StopRequested


def test_a_closed_gate_waits_for_the_running_batch_and_refuses_new_ones() -> None:
    gate = BatchGate()
    gate.enter(12)
    assert gate.running == 12
    leave = threading.Timer(0.3, gate.leave, kwargs={"done": True})
    leave.start()
    started = time.monotonic()
    assert gate.close(time.monotonic() + 30, lambda: False) is None  # batch 12 ended
    waited = time.monotonic() - started
    assert 0.25 <= waited < 5, waited
    with pytest.raises(StopRequested) as refused:
        gate.enter(13)
    assert refused.value.batch_id == 13
    assert (gate.running, gate.done, gate.refused) == (None, 12, 13)


def test_the_gate_closes_at_once_for_new_batches_while_it_waits() -> None:
    gate = BatchGate()
    gate.enter(1)
    closing = threading.Thread(target=gate.close, args=(time.monotonic() + 30, lambda: False))
    closing.start()
    try:
        deadline = time.monotonic() + 5
        while not gate.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gate.closed
        with pytest.raises(StopRequested):  # batch 2 may not start while batch 1 finishes
            gate.enter(2)
        assert gate.running == 1
    finally:
        gate.leave(done=False)
        closing.join(5)
    assert not closing.is_alive()
    assert (gate.done, gate.refused) == (None, 2)  # batch 1 failed: not done


def test_the_gate_gives_up_at_the_deadline_or_when_hurried() -> None:
    gate = BatchGate()
    gate.enter(7)
    started = time.monotonic()
    assert gate.close(time.monotonic() + 0.3, lambda: False) == 7  # still running
    assert 0.25 <= time.monotonic() - started < 5
    hurried = threading.Event()
    threading.Timer(0.3, hurried.set).start()
    started = time.monotonic()
    assert gate.close(time.monotonic() + 30, hurried.is_set) == 7
    assert 0.25 <= time.monotonic() - started < 5


def test_a_gate_that_was_never_entered_closes_at_once() -> None:
    gate = BatchGate()
    started = time.monotonic()
    assert gate.close(time.monotonic() + 30, lambda: False) is None
    assert time.monotonic() - started < 1


def test_the_first_signal_asks_for_a_stop_a_second_one_hurries_it() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    shutdown = Shutdown(grace=30)
    with shutdown.handling():
        assert signal.getsignal(signal.SIGTERM) == shutdown.receive
        assert not shutdown.requested
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not shutdown.requested and time.monotonic() < deadline:
            time.sleep(0.01)  # Python runs the handler between two bytecodes of this thread
        assert (shutdown.signal, shutdown.hurried) == ("SIGTERM", False)
        assert shutdown.deadline == pytest.approx(shutdown.at + 30)
        os.kill(os.getpid(), signal.SIGINT)
        while not shutdown.hurried and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (shutdown.signal, shutdown.hurried) == ("SIGTERM", True)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_no_handler_is_installed_outside_the_main_thread() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def inside() -> None:
        with Shutdown(grace=1).handling():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join(5)
    assert seen == [before]


@pytest.mark.parametrize(
    ("stop", "line"),
    [
        (
            Stop("SIGTERM", 12, Ending.FINISHED, 0.84, 30),
            "stopping on SIGTERM: batch 12 finished, 0.8 s",
        ),
        (
            Stop("SIGINT", None, Ending.FINISHED, 0.2, 30),
            "stopping on SIGINT: no batch running, 0.2 s",
        ),
        (
            Stop("SIGTERM", 12, Ending.GRACE, 30.1, 30),
            "stopping on SIGTERM: batch 12 left to the replay after the 30 s grace period",
        ),
        (
            Stop("SIGTERM", 12, Ending.SECOND_SIGNAL, 3.14, 30),
            "stopping on SIGTERM: batch 12 left to the replay on a second signal, 3.1 s",
        ),
        (
            Stop("SIGTERM", None, Ending.SECOND_SIGNAL, 1.25, 30),
            "stopping on SIGTERM: ended on a second signal while the query stopped, 1.2 s",
        ),
        (
            Stop("SIGTERM", None, Ending.STUCK, 10.04, 30),
            "stopping on SIGTERM: the query did not stop within 10.0 s; ended without it",
        ),
    ],
)
def test_the_stop_line_says_what_happened(stop: Stop, line: str) -> None:
    assert stop.describe() == line
    assert stop.clean is (stop.ending is Ending.FINISHED)


def test_the_grace_period_is_a_duration_with_its_unit(tmp_path: Path) -> None:
    assert ShutdownConfig().grace_seconds == 20
    assert ShutdownConfig(grace_period="0 seconds").grace_seconds == 0
    assert ShutdownConfig(grace_period="1 second").grace_seconds == 1
    assert ShutdownConfig(grace_period="2 minutes").grace_seconds == 120
    config = tmp_path / "cdc.yaml"
    config.write_text("warehouse: ./w\ncheckpoints: ./c\nshutdown: {grace_period: 45 seconds}\n")
    assert load_config(config, environ={}).shutdown.grace_seconds == 45
    env = {"CDC_SHUTDOWN__GRACE_PERIOD": "1 minute"}
    assert load_config(config, environ=env).shutdown.grace_seconds == 60
    assert ShutdownConfig(grace_period="1 hour").grace_seconds == 3600
    for wrong in ("soon", "-5 seconds", "1.5 seconds", "3 weeks", "30"):
        why = "Input should be a valid string" if wrong == "30" else "expected '<number> <unit>'"
        with pytest.raises(ConfigError, match=rf"shutdown\.grace_period: {why}"):
            load_config(config, environ={"CDC_SHUTDOWN__GRACE_PERIOD": wrong})
