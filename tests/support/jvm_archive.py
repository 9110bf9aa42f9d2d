"""A class-data-sharing archive for the tests' short-lived ``cdc`` JVMs (JDK 17's dynamic AppCDS).

A cold ``cdc`` process spends much of its first seconds loading and verifying ~30,000 classes
(Spark, Delta, Hadoop, Parquet, Kafka). ``-XX:ArchiveClassesAtExit`` writes the classes one JVM
loaded to an archive when it exits; later JVMs with the same classpath map it
(``-XX:SharedArchiveFile``) instead of parsing and verifying each class again (~18,000 of a
``cdc demo``'s classes come from it; the rest are lambdas and generated code).

One archive per set of what it depends on (the ``java`` binary and the jars), in
``build/cds/<name>-<key>.jsa``. The ``cdc`` archive (pyspark's jars, this checkout's
``jars/spark``) is made once per checkout by a ``cdc demo`` of its own, started in the background
when a test session first needs a ``cdc`` process (``start_making``); Kafka Connect's by the first
worker a session stops (tests/support/kafka_connect.py). An archive is put in place only once
its JVM has exited and a JVM maps it. Until then, and wherever an archive does not fit (another
JDK, other jars), a JVM runs as without it (``-Xshare:auto``, the JVM's default), its CDS log
lines turned off so that nothing reaches a test's output. Nothing depends on an archive: it only
makes a start cheaper.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHIVES = ROOT / "build" / "cds"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""The JVM's CDS warnings (classes it cannot archive, an archive that does not fit) go to its
standard output by default, which a ``cdc`` process shares: turned off."""
MAKING_TIMEOUT = 600.0


def _listing(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(f"{p.name}:{p.stat().st_size}" for p in folder.glob("*.jar"))


def archive_for(name: str, *jar_folders: Path) -> Path:
    """Where the archive ``name`` for this machine's ``java`` and the jars of ``jar_folders``
    is (or will be): ``build/cds/<name>-<key>.jsa``."""
    java = Path(shutil.which("java") or "java").resolve()
    parts = [str(java), str(java.stat().st_mtime_ns) if java.exists() else ""]
    for folder in jar_folders:
        parts += [str(folder), *_listing(folder)]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return ARCHIVES / f"{name}-{key}.jsa"


@functools.cache
def cdc_archive() -> Path:
    """The archive of ``cdc`` processes' JVMs: pyspark's jars and this checkout's ``jars/spark``
    (listed once per process: every ``cdc_env`` asks)."""
    import pyspark

    return archive_for("cdc", Path(pyspark.__file__).parent / "jars", ROOT / "jars" / "spark")


def jvm_options(archive: Path) -> str:
    """The options that map ``archive``, or "" when it is not there (yet)."""
    return f"-XX:SharedArchiveFile={archive} {QUIET}" if archive.is_file() else ""


def claim(archive: Path) -> Path | None:
    """The file a JVM is to dump ``archive``'s classes to (``-XX:ArchiveClassesAtExit``), or
    None when the archive exists or another process is making it (a lock file, taken again
    once older than ``MAKING_TIMEOUT``). Whoever claims it calls ``finish``."""
    if archive.is_file():
        return None
    archive.parent.mkdir(parents=True, exist_ok=True)
    lock = archive.with_suffix(".lock")
    with contextlib.suppress(FileNotFoundError):
        if time.time() - lock.stat().st_mtime > MAKING_TIMEOUT:
            lock.unlink()
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return None
    return archive.with_suffix(f".{os.getpid()}.partial")


def dumping_options(partial: Path) -> str:
    return f"-XX:ArchiveClassesAtExit={partial} {QUIET}"


def finish(archive: Path, partial: Path, ok: bool) -> bool:
    """After the dumping JVM has exited: put ``partial`` in place if ``ok`` and a JVM maps it
    (a dump cut short — a JVM killed at exit, a full disk — leaves a truncated archive that
    crashes every JVM given it, SIGBUS while mapping, instead of falling back); release the
    claim either way. True if the archive is in place."""
    try:
        if ok and partial.is_file() and _maps(partial):
            os.replace(partial, archive)
            return True
        return False
    finally:
        partial.unlink(missing_ok=True)
        archive.with_suffix(".lock").unlink(missing_ok=True)


def _maps(archive: Path) -> bool:
    java = shutil.which("java") or "java"
    check = [java, f"-XX:SharedArchiveFile={archive}", *QUIET.split(), "-version"]
    # a crash's hs_err file lands beside the archive, not in the caller's folder
    done = subprocess.run(check, cwd=archive.parent, capture_output=True, timeout=60)
    return done.returncode == 0


def start_making(archive: Path | None = None) -> bool:
    """Start making the ``cdc`` archive in the background (``make``) unless it exists, is
    being made or failed to be made in this checkout (``<archive>.failed``: a demo that fails
    would otherwise run again for every ``cdc`` process). True if started."""
    archive = archive or cdc_archive()
    if archive.with_suffix(".failed").exists():  # once per checkout: not a demo per process
        return False
    partial = claim(archive)
    if partial is None:
        return False
    with archive.with_suffix(".log").open("wb") as out:
        # niced: it runs beside the session's first tests, which wait on no archive
        nice = ["nice", "-n", "10"] if shutil.which("nice") else []
        subprocess.Popen(
            [*nice, sys.executable, "-m", "tests.support.jvm_archive", str(archive), str(partial)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    return True


def make(archive: Path, partial: Path) -> int:
    """Run ``cdc demo`` in a process group of its own, its JVM dumping its classes to
    ``partial`` at exit; wait for the whole group (the JVM exits after the Python driver), then
    ``finish``. Its exit code: the demo's, or 1 when no archive was put in place."""
    from tests.support.cdc import C1_ONLY

    code: int | None = None
    try:
        demo = subprocess.Popen(
            [sys.executable, "-m", "streaming.cli.main", "demo"],
            cwd=ROOT,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "SPARK_SUBMIT_OPTS": f"{C1_ONLY} {dumping_options(partial)}",
            },
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        code = demo.wait(timeout=MAKING_TIMEOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                os.killpg(demo.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        else:
            os.killpg(demo.pid, signal.SIGKILL)
            code = code or 1
    finally:
        made = finish(archive, partial, code == 0)
    if not made:
        archive.with_suffix(".failed").write_text(f"the demo exited {code}\n")
    print(f"archive: {archive} ({archive.stat().st_size >> 20} MiB)" if made else "no archive")
    return code or (0 if made else 1)


if __name__ == "__main__":
    sys.exit(make(Path(sys.argv[1]), Path(sys.argv[2])))
