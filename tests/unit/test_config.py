"""cdc.yaml: validation with errors naming the key, CDC_* overrides, path resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.config import load_config
from streaming.errors import ConfigError

DESIGN_EXAMPLE = """\
warehouse: ./warehouse
checkpoints: ./checkpoints
datasets: {petstore: datasets/petstore.yaml}
landing: {transactions: ./landing/transactions, dms: ./landing/dms}
kafka:
  bootstrap: 127.0.0.1:9092
  transactions_topic: cdc.transactions
  outcomes_topic: cdc.outcomes
  format: json
allowed_locations: [./data]
trigger: {interval: 5 seconds}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cdc.yaml"
    path.write_text(text)
    return path


def test_design_example_loads_with_paths_resolved_against_the_config_folder(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, DESIGN_EXAMPLE), environ={})
    assert cfg.warehouse == str(tmp_path / "warehouse")
    assert cfg.datasets == {"petstore": str(tmp_path / "datasets" / "petstore.yaml")}
    assert cfg.landing.dms == str(tmp_path / "landing" / "dms")
    assert cfg.allowed_locations == [str(tmp_path / "data")]
    assert cfg.kafka is not None and cfg.kafka.bootstrap == "127.0.0.1:9092"
    assert cfg.base_dir == str(tmp_path)


def test_uris_are_kept_as_they_are(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "warehouse: s3a://bucket/wh\ncheckpoints: ./c\n"), environ={})
    assert cfg.warehouse == "s3a://bucket/wh"


def test_environment_overrides_nested_keys(tmp_path: Path) -> None:
    env = {"CDC_KAFKA__BOOTSTRAP": "broker:29092", "CDC_TRIGGER__INTERVAL": "30 seconds"}
    cfg = load_config(write(tmp_path, DESIGN_EXAMPLE), environ=env)
    assert cfg.kafka is not None and cfg.kafka.bootstrap == "broker:29092"
    assert cfg.trigger.interval == "30 seconds"


@pytest.mark.parametrize(
    ("text", "env", "named"),
    [
        (DESIGN_EXAMPLE + "warehous: ./x\n", {}, "warehous: unknown key"),
        (DESIGN_EXAMPLE.replace("  format: json", "  format: xml"), {}, "kafka.format"),
        ("checkpoints: ./c\n", {}, "warehouse: required key is missing"),
        (DESIGN_EXAMPLE.replace("5 seconds", "soon"), {}, "trigger.interval"),
        (DESIGN_EXAMPLE, {"CDC_KAFKA__BOOTSTRAPP": "x"}, "kafka.bootstrapp: unknown key"),
    ],
)
def test_wrong_config_fails_naming_the_key(
    tmp_path: Path, text: str, env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), environ=env)
    assert named in str(caught.value)


def test_missing_file_and_bad_yaml_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", environ={})
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "warehouse: [\n"), environ={})
