"""docs/config.md is generated from the config models and committed: it must not drift."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from streaming.cli.config_reference import render, rows
from streaming.cli.main import main
from streaming.core.config import AppConfig

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "config.md"


def leaf_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key path of the models (a key is its alias where it has one: the schema
    registry client's dotted names), found independently of config_reference."""
    paths = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        paths.append(prefix + key)
        for candidate in (field.annotation, *getattr(field.annotation, "__args__", ())):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                paths.extend(leaf_paths(candidate, f"{prefix}{key}."))
    return paths


def test_committed_reference_is_the_generated_one() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render(), (
        "docs/config.md differs from the config models: run `make docs` and commit it"
    )


def test_every_key_is_documented_with_a_type_and_a_description() -> None:
    table = list(rows())
    assert [r[0].strip("`") for r in table] == leaf_paths(AppConfig)
    for key, kind, _default, description in table:
        assert kind and description, key
    by_key = {r[0].strip("`"): r for r in table}
    assert by_key["warehouse"][2] == "required"
    assert by_key["kafka.format"][1:3] == ["`json` or `avro`", "`json`"]
    assert by_key["kafka.avro.schemas"][1] == "map of integer → string"
    assert by_key["spark.shuffle_partitions"][1:3] == ["integer > 0", "`4`"]
    assert by_key["log.level"][2] == "`INFO`"
    assert by_key["kafka.avro.registry.url"][1:3] == ["string", "required"]
    assert by_key["kafka.avro.registry.basic.auth.user.info"][1] == "secret or null"
    assert by_key["kafka.avro.registry.max.retries"][1:3] == ["integer ≥ 0", "`3`"]


def test_readme_links_the_reference_instead_of_repeating_it() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/config.md)" in readme
    assert "| `warehouse` |" not in readme  # no second, hand-written key table


def test_cli_writes_and_checks_the_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "config.md"
    assert main(["config-reference", "--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
    assert main(["config-reference", "--check", "--output", str(out)]) == 0
    out.write_text("stale\n")
    assert main(["config-reference", "--check", "--output", str(out)]) == 1
    assert "out of date" in capsys.readouterr().err
