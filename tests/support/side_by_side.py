"""Scenarios of one module run at once, each in a thread of its own, and what each left: a
module-scoped fixture runs them (``side_by_side``), each test takes its own (``taken``), so a
scenario's failure fails its own test, not the others'. Worth it where the scenarios mostly
wait (a frozen store, a paused batch, a stop): cold ``cdc`` processes that only compute gain
nothing on 2 cores (each is ~35 s of CPU to its first batch)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def side_by_side(
    scenarios: Mapping[str, Callable[[], T]], workers: int | None = None
) -> dict[str, T | BaseException]:
    """Each scenario's result, or what it raised, by name; waits for all (``workers`` at a time:
    all by default)."""
    with ThreadPoolExecutor(workers or len(scenarios)) as pool:
        futures = {name: pool.submit(run) for name, run in scenarios.items()}
    found: dict[str, T | BaseException] = {}
    for name, future in futures.items():
        error = future.exception()
        found[name] = error if error is not None else future.result()
    return found


def taken(found: Mapping[str, T | BaseException], name: str) -> T:
    """The result of ``name``'s scenario; what it raised, raised here."""
    result = found[name]
    if isinstance(result, BaseException):
        raise result
    return result
