"""``streaming/submit.py``: the file spark-submit runs is ``cdc run`` (no Spark needed here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import streaming.submit
from streaming.submit import _unshadow, main

ROOT = Path(__file__).resolve().parents[2]
SUBMIT = Path(streaming.submit.__file__).resolve()


def test_arguments_are_those_of_cdc_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: cdc run")
    assert "--config" in out and "--once" in out


def test_a_wrong_config_is_the_cli_error_and_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "cdc.yaml"
    config.write_text("warehouse: ./w\ncheckpoints: ./c\nspark: {mastr: null}\n")
    assert main(["--config", str(config), "--once"]) == 2
    assert "spark.mastr: unknown key" in capsys.readouterr().err


def test_run_as_a_file_like_spark_submit_does(tmp_path: Path) -> None:
    config = tmp_path / "cdc.yaml"
    config.write_text("warehouse: ./w\ncheckpoints: ./c\nkafka: {bootstrapp: x}\n")
    done = subprocess.run(
        [sys.executable, str(SUBMIT), "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "kafka.bootstrapp: unknown key" in done.stderr


def test_the_package_folder_is_taken_off_the_path(tmp_path: Path) -> None:
    package = SUBMIT.parent
    path = [str(package), str(ROOT), "", str(tmp_path)]
    assert _unshadow(path, package) == [str(ROOT), "", str(tmp_path)]
    # a copy of submit.py in a folder that is not a package leaves the path alone
    assert _unshadow(path, tmp_path) == path
