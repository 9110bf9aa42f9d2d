"""Hadoop's ``FileSystem`` of a path, on the driver: local paths and URIs (s3a://, hdfs://,
abfs://, …) alike, with the session's Hadoop configuration.

Internals used: PySpark's ``SparkContext._jvm`` (to build ``org.apache.hadoop.fs.Path``, Java's
readers, Commons IO's ``IOUtils``) and ``SparkContext._jsc.hadoopConfiguration()``; a failed call
raises py4j's ``Py4JJavaError``, whose Java class ``java_class`` reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from streaming.platform.spark import jclass
from streaming.platform.spark import jvm as _jvm

__all__ = [
    "HadoopFolder",
    "data_files",
    "ensure_dir",
    "exists",
    "first_line",
    "java_class",
    "kind",
    "modified_ms",
    "size_head_tail",
    "subfolder_texts",
]


def _conf(spark: SparkSession) -> Any:
    """The session's Hadoop configuration (``JavaSparkContext.hadoopConfiguration``)."""
    return spark.sparkContext._jsc.hadoopConfiguration()


def _open(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """(the Hadoop ``Path``, its ``FileSystem``)."""
    hpath = jclass(spark, "org.apache.hadoop.fs.Path")(path)
    return hpath, hpath.getFileSystem(_conf(spark))


def java_class(error: BaseException) -> str | None:
    """The Java class name of the exception a JVM call raised through py4j
    (``Py4JJavaError.java_exception``); None for an error that is not one."""
    if not isinstance(error, Py4JJavaError):
        return None
    return str(error.java_exception.getClass().getName())


def exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` exists (``FileSystem.exists``)."""
    hpath, fs = _open(spark, path)
    return bool(fs.exists(hpath))


def ensure_dir(spark: SparkSession, path: str) -> None:
    """Create the folder ``path`` unless it exists (``FileSystem.mkdirs``; on object storage it
    writes the folder's marker)."""
    hpath, fs = _open(spark, path)
    if not fs.exists(hpath):
        fs.mkdirs(hpath)


def kind(spark: SparkSession, path: str) -> Literal["dir", "file"] | None:
    """Whether ``path`` is a directory, a file or absent (``exists``, ``getFileStatus``)."""
    hpath, fs = _open(spark, path)
    if not fs.exists(hpath):
        return None
    return "dir" if fs.getFileStatus(hpath).isDirectory() else "file"


def first_line(spark: SparkSession, path: str) -> str | None:
    """The file's first line (Java's ``BufferedReader.readLine`` over UTF-8); None if it is
    empty."""
    jvm = _jvm(spark)
    hpath, fs = _open(spark, path)
    reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(fs.open(hpath), "UTF-8"))
    try:
        line = reader.readLine()
    finally:
        reader.close()
    return None if line is None else str(line)


def subfolder_texts(
    spark: SparkSession, path: str, choose: Callable[[list[str]], list[str]]
) -> list[dict[str, str]]:
    """For each folder directly in ``path``, the texts of the files ``choose`` picks from the
    names in it (name → UTF-8 text, read in one call each: Commons IO's ``IOUtils.toString``);
    empty if ``path`` is not there (``exists``, ``listStatus``)."""
    root, fs = _open(spark, path)
    if not fs.exists(root):
        return []
    found: list[dict[str, str]] = []
    for folder in fs.listStatus(root):
        if not folder.isDirectory():
            continue
        names = [str(status.getPath().getName()) for status in fs.listStatus(folder.getPath())]
        texts = {}
        for name in choose(names):
            stream = fs.open(jclass(spark, "org.apache.hadoop.fs.Path")(folder.getPath(), name))
            try:
                io_utils = jclass(spark, "org.apache.commons.io.IOUtils")
                texts[name] = str(io_utils.toString(stream, "UTF-8"))
            finally:
                stream.close()
        found.append(texts)
    return found


def data_files(spark: SparkSession, path: str, visible: Callable[[str], bool]) -> list[str]:
    """``path`` itself if it is a file, else the files directly in it whose name is
    ``visible``, sorted, as Hadoop writes their URIs (``getFileStatus``, ``listStatus``)."""
    hpath, fs = _open(spark, path)
    status = fs.getFileStatus(hpath)
    if not status.isDirectory():
        return [str(status.getPath().toString())]
    return sorted(
        str(s.getPath().toString())
        for s in fs.listStatus(hpath)
        if s.isFile() and visible(str(s.getPath().getName()))
    )


def modified_ms(spark: SparkSession, path: str) -> int | None:
    """The file's modification time in ms since the epoch (``getModificationTime``); None if it
    is not there."""
    hpath, fs = _open(spark, path)
    if not fs.exists(hpath):
        return None
    return int(fs.getFileStatus(hpath).getModificationTime())


def size_head_tail(
    spark: SparkSession, path: str, head: int, tail: int
) -> tuple[int, bytes, bytes]:
    """The file's size, its first ``head`` and last ``tail`` bytes: a status and two ranged
    reads (``FSDataInputStream.readNBytes``; a Java ``byte[]`` comes back to Python as bytes)."""
    hpath, fs = _open(spark, path)
    size = int(fs.getFileStatus(hpath).getLen())
    stream = fs.open(hpath)
    try:
        first = bytes(stream.readNBytes(min(head, size)))
        stream.seek(max(0, size - tail))
        return size, first, bytes(stream.readNBytes(min(tail, size)))
    finally:
        stream.close()


class HadoopFolder:
    """One folder's files through Hadoop's ``FileSystem`` of its URI: for files that must be
    created only if absent (``create``), as the lease's are."""

    def __init__(self, spark: SparkSession, folder: str) -> None:
        self.jvm = _jvm(spark)
        self.path_class = jclass(spark, "org.apache.hadoop.fs.Path")
        self.folder, self.fs = _open(spark, folder)

    def has_capability(self, capability: str) -> bool:
        """Whether the store declares ``capability`` for the folder (``hasPathCapability``)."""
        return bool(self.fs.hasPathCapability(self.folder, capability))

    @property
    def scheme(self) -> str:
        """The file system's scheme (``getScheme``: ``s3a``, ``hdfs``, …)."""
        return str(self.fs.getScheme())

    def _path(self, name: str) -> Any:
        return self.path_class(self.folder, name)

    def names(self) -> list[str] | None:
        """The names in the folder; None if it is not there (``FileNotFoundException``)."""
        try:
            statuses = self.fs.listStatus(self.folder)
        except Py4JJavaError as e:
            if java_class(e) == "java.io.FileNotFoundException":
                return None
            raise
        return [str(status.getPath().getName()) for status in statuses]

    def read(self, name: str) -> str | None:
        """The file's lines joined by ``\\n`` (``BufferedReader.readLine`` over UTF-8); None if
        it is not there (``FileNotFoundException``)."""
        try:
            stream = self.fs.open(self._path(name))
        except Py4JJavaError as e:
            if java_class(e) == "java.io.FileNotFoundException":
                return None
            raise
        io = self.jvm.java.io
        reader = io.BufferedReader(io.InputStreamReader(stream, "UTF-8"))
        try:
            lines = []
            while (line := reader.readLine()) is not None:
                lines.append(str(line))
        finally:
            reader.close()
        return "\n".join(lines)

    def _write(self, stream: Any, text: str) -> None:
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()  # a conditional create is decided here

    def create(self, name: str, text: str, *, must: str | None, exists: tuple[str, ...]) -> bool:
        """Create the file unless it exists; False if it did (the call failed with a Java
        exception of one of the classes ``exists``). ``must``: an option the create must
        honour (``createFile(…).must(must, true)``), else ``create(path, overwrite=false)``."""
        path = self._path(name)
        try:
            if must is not None:
                builder = self.fs.createFile(path).must(must, True)
                self._write(builder.create().build(), text)
            else:
                self._write(self.fs.create(path, False), text)
        except Py4JJavaError as e:
            if java_class(e) in exists:
                return False
            raise
        return True

    def write(self, name: str, text: str) -> None:
        """Write the file, replacing any (``create(path, overwrite=true)``)."""
        self._write(self.fs.create(self._path(name), True), text)

    def delete(self, name: str) -> None:
        """Delete the file (``delete(path, recursive=false)``)."""
        self.fs.delete(self._path(name), False)
