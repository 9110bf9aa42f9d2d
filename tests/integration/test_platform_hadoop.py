"""``platform.hadoop`` on ``file:`` URIs: the job takes these calls only for paths with a scheme
(s3a://, hdfs://; tests/integration/test_s3_warehouse.py runs them on S3), so they are held here
to what Python's own file calls see, on the tests' session."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streaming.platform import hadoop
from streaming.platform.hadoop import HadoopFolder

pytestmark = pytest.mark.spark

EXISTS = ("org.apache.hadoop.fs.FileAlreadyExistsException",)


def test_paths_files_and_folders(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path.as_uri()
    (tmp_path / "a.txt").write_bytes(b"first line\nsecond\n")
    (tmp_path / ".hidden").write_text("x")
    (tmp_path / "sub").mkdir()
    assert hadoop.exists(spark, f"{root}/a.txt") and not hadoop.exists(spark, f"{root}/none")
    assert hadoop.kind(spark, f"{root}/a.txt") == "file"
    assert hadoop.kind(spark, f"{root}/sub") == "dir"
    assert hadoop.kind(spark, f"{root}/none") is None
    assert hadoop.first_line(spark, f"{root}/a.txt") == "first line"
    size, head, tail = hadoop.size_head_tail(spark, f"{root}/a.txt", 4, 7)
    assert (size, head, tail) == (18, b"firs", b"second\n")
    listed = hadoop.data_files(spark, root, lambda name: not name.startswith("."))
    assert [p.rsplit("/", 1)[1] for p in listed] == ["a.txt"]
    assert hadoop.data_files(spark, f"{root}/a.txt", lambda name: True)[0].endswith("/a.txt")
    mtime = hadoop.modified_ms(spark, f"{root}/a.txt")
    assert mtime is not None and abs(mtime / 1000 - (tmp_path / "a.txt").stat().st_mtime) < 2
    assert hadoop.modified_ms(spark, f"{root}/none") is None
    hadoop.ensure_dir(spark, f"{root}/new/deep")
    assert (tmp_path / "new" / "deep").is_dir()
    hadoop.ensure_dir(spark, f"{root}/new/deep")  # there already: nothing


def test_subfolder_texts(spark: SparkSession, tmp_path: Path) -> None:
    for source, names in {"0": ["0", "1", "2.tmp"], "1": ["5"]}.items():
        (tmp_path / source).mkdir()
        for name in names:
            (tmp_path / source / name).write_text(f"{source}/{name}\nü")
    (tmp_path / "loose").write_text("not a folder")
    texts = hadoop.subfolder_texts(
        spark, tmp_path.as_uri(), lambda names: sorted(n for n in names if n.isdigit())
    )
    assert sorted(texts, key=str) == sorted(
        [{"0": "0/0\nü", "1": "0/1\nü"}, {"5": "1/5\nü"}], key=str
    )
    assert hadoop.subfolder_texts(spark, (tmp_path / "none").as_uri(), sorted) == []


def test_a_folder_creates_a_file_only_if_it_is_absent(spark: SparkSession, tmp_path: Path) -> None:
    folder = HadoopFolder(spark, (tmp_path / "lease").as_uri())
    assert folder.scheme == "file"
    assert folder.names() is None  # no folder yet
    assert folder.read("1.json") is None
    assert folder.create("1.json", "one\ntwo", must=None, exists=EXISTS)
    assert not folder.create("1.json", "other", must=None, exists=EXISTS)
    assert folder.read("1.json") == "one\ntwo"
    folder.write("1.json", "replaced")
    assert folder.read("1.json") == "replaced"
    assert (tmp_path / "lease" / "1.json").read_text() == "replaced"
    assert [n for n in folder.names() or [] if not n.startswith(".")] == ["1.json"]
    folder.delete("1.json")
    assert folder.read("1.json") is None
