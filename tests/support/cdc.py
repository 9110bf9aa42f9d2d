"""``cdc`` in a process of its own, as users run it: one runner for every test that needs a cold
process (a crash, a startup failure, a cluster), always with a timeout."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tests.support import jvm_archive

ROOT = Path(__file__).resolve().parents[2]
CDC = [sys.executable, "-m", "streaming.cli.main"]
TIMEOUT = 600.0
"""The longest a `cdc` process may take in a test (a cold JVM, a batch, a stop)."""


C1_ONLY = "-XX:TieredStopAtLevel=1"
"""The JVM option that stops its compiling at C1 (no C2): for JVMs that live a minute or two."""

SHORT_LIVED_JVM = {"SPARK_SUBMIT_OPTS": C1_ONLY}
"""The driver JVM of a test's ``cdc`` process compiles with C1 only. Such a process lives a minute
or two over a few small batches: C2 spent ~35 of its ~95 s of CPU compiling code that was done
before it paid off (per-thread CPU of a cold ``cdc run --once`` of one transaction, this
machine: C1 only, 56 s of CPU and 50 s of wall time against 93 s and 61 s). Users' long-running
jobs keep the JVM's default, as does the tests' shared session (C1 only made it 1.76 times
slower); a test whose process does large work passes ``short_lived=False``. Kafka Connect's
process is C1 only too (tests/support/kafka_connect.py)."""


def cdc_env(
    extra: Mapping[str, str] | None = None,
    drop: Sequence[str] = (),
    *,
    short_lived: bool = True,
) -> dict[str, str]:
    """This process's environment, without the variables named in ``drop`` (or starting with a
    name ending in ``_``), plus ``extra``, this checkout on PYTHONPATH and, unless the
    environment sets its own SPARK_SUBMIT_OPTS: C1 only for a ``short_lived`` process
    (``SHORT_LIVED_JVM``) and the classes of the checkout's JVM archive once it is made
    (tests/support/jvm_archive.py; the first call starts making it)."""

    def dropped(key: str) -> bool:
        return any(key == d or (d.endswith("_") and key.startswith(d)) for d in drop)

    env = {k: v for k, v in os.environ.items() if not dropped(k)}
    jvm = {}
    if "SPARK_SUBMIT_OPTS" not in env:
        archive = jvm_archive.cdc_archive()
        jvm_archive.start_making(archive)
        options = [C1_ONLY] if short_lived else []
        options.append(jvm_archive.jvm_options(archive))
        jvm = {"SPARK_SUBMIT_OPTS": " ".join(o for o in options if o)}
    return {**env, **jvm, **(extra or {}), "PYTHONPATH": str(ROOT)}


def run_cdc(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """``cdc ARGS`` in ``cwd`` to its end; its exit code and output (text)."""
    return subprocess.run(
        [*CDC, *args],
        cwd=cwd,
        env=dict(env) if env is not None else cdc_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_cdc(
    *args: str, cwd: Path, log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``cdc ARGS`` in the background, in a process group of its own (``kill_group`` ends the
    Python driver and its JVM at once, as losing the machine would), output to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [*CDC, *args],
            cwd=cwd,
            env=dict(env) if env is not None else cdc_env(),
            stdout=out,
            stderr=out,
            start_new_session=True,
        )


def kill_group(process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> int:
    """``sig`` to the process group of a command ``start_cdc`` started; its exit code."""
    with contextlib.suppress(ProcessLookupError):  # the whole group has ended already
        os.killpg(process.pid, sig)
    return process.wait(timeout=60)


def wait_until(
    what: str,
    check: Callable[[], bool],
    process: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
    timeout: float = TIMEOUT,
) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` on timeout, or at once when
    ``process`` ends first (with the tail of its ``log``)."""
    deadline = time.monotonic() + timeout
    while not check():
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None else ""
            raise AssertionError(f"the job ended ({process.returncode}) before {what}:\n{tail}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


_STEPS = """\
import contextlib, json, sys
from streaming.cli.main import main
for argv, out in json.loads(sys.argv[1]):
    with open(out, "w", encoding="utf-8") as f, contextlib.redirect_stdout(f):
        code = main(argv)
    if code:
        sys.exit(code)
"""


def run_cdc_steps(
    *steps: Sequence[str],
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Several ``cdc`` commands in turn in ONE process of their own — one JVM, as each command
    gets or creates the process's Spark session (``build_session``): for commands that must run
    in a new process (a restart after a kill, a classpath the test session lacks) but need not
    each start their own. The process (its exit code: the first failing command's; stderr), and
    each command's standard output (empty for a command not reached)."""
    outputs = [cwd / f".cdc-step-{n}.out" for n in range(len(steps))]
    for path in outputs:
        path.write_text("")
    plan = [[list(argv), str(path)] for argv, path in zip(steps, outputs, strict=True)]
    done = subprocess.run(
        [sys.executable, "-c", _STEPS, json.dumps(plan)],
        cwd=cwd,
        env=dict(env) if env is not None else cdc_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, [path.read_text(encoding="utf-8") for path in outputs]
