"""streaming.storage.reuse: an expression is built once per key and JVM."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from streaming.storage.reuse import built_once


def _session() -> Any:
    """What ``built_once`` reads of a session: its context's gateway (one per JVM)."""
    return SimpleNamespace(sparkContext=SimpleNamespace(_gateway=object()))


def test_built_once_per_key_and_jvm() -> None:
    calls: list[str] = []

    def build(name: str) -> Any:
        calls.append(name)
        return object()

    spark, other_jvm = _session(), _session()
    first = built_once(spark, ("test", "a"), lambda: build("a"))
    assert built_once(spark, ("test", "a"), lambda: build("a")) is first
    assert built_once(spark, ("test", "b"), lambda: build("b")) is not first
    assert built_once(other_jvm, ("test", "a"), lambda: build("a")) is not first
    assert calls == ["a", "b", "a"]
