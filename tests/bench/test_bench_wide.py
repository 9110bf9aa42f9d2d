"""The wide W2 variant of the benchmark (``--w2-extra-props N``): the pure parts, no Spark —
the property list, the dataset YAML, the DMS files' columns and values; N = 0 is W2 as it was."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from bench import data
from bench.__main__ import main
from bench.baselines import DMS_SCHEMA, dms_schema

DEFAULT_YAML = """\
bank.Account:
  properties:
    owner: {type: string}
    balance: {type: integer}
    status: {type: string}
    ts: {type: integer}
  watermark: [ts]
"""
DEFAULT_DMS = pa.schema(
    [
        ("ID", pa.string()),
        ("OWNER", pa.string()),
        ("BALANCE", pa.int64()),
        ("STATUS", pa.string()),
        ("TS", pa.int64()),
        ("Op", pa.string()),
    ]
)


def _write(folder: Path, extra: int, changes: int = 200, files: int = 2) -> list[Path]:
    rows = data.w2_changes(changes, 500)
    return data.write_dms_files(folder, rows, files, data.w2_properties(extra))


def test_extra_properties_are_named_p01_on_and_alternate_string_and_integer() -> None:
    props = data.w2_properties(5)
    assert props[:4] == data.W2_PROPERTIES
    assert [p[0] for p in props[:4]] == list(data.W2_PROPS)
    assert [(n, t) for n, t, _ in props[4:]] == [
        ("p01", "string"),
        ("p02", "integer"),
        ("p03", "string"),
        ("p04", "integer"),
        ("p05", "string"),
    ]
    assert [a for _, _, a in props[4:6]] == [pa.string(), pa.int64()]
    assert [p[0] for p in data.w2_properties(99)[-2:]] == ["p98", "p99"]
    wide = data.w2_properties(150)
    assert [p[0] for p in wide[4:6]] == ["p001", "p002"] and wide[-1][0] == "p150"
    assert len({p[0] for p in wide}) == 154
    with pytest.raises(ValueError):
        data.w2_properties(-1)


def test_no_extra_properties_is_w2_as_it_was() -> None:
    assert data.w2_properties(0) == data.W2_PROPERTIES
    assert data.w2_yaml(data.w2_properties(0)) == data.W2_YAML == DEFAULT_YAML
    assert pa.schema(data.dms_types(data.w2_properties(0))) == DEFAULT_DMS
    assert pa.schema(data.DMS_TYPES) == DEFAULT_DMS
    assert dms_schema(data.w2_properties(0)) == DMS_SCHEMA
    assert [f.name for f in DMS_SCHEMA.fields] == DEFAULT_DMS.names


def test_the_yaml_lists_every_property_with_its_type() -> None:
    parsed = yaml.safe_load(data.w2_yaml(data.w2_properties(50)))
    schema = parsed[data.W2_SCHEMA]
    assert schema["watermark"] == ["ts"]
    properties = schema["properties"]
    assert len(properties) == 54
    assert list(properties)[:4] == list(data.W2_PROPS)
    assert properties["p01"] == {"type": "string"}
    assert properties["p02"] == {"type": "integer"}
    assert properties["p50"] == {"type": "integer"}
    assert properties["balance"] == {"type": "integer"}


def test_a_change_file_has_the_extra_columns_upper_cased_with_their_types(tmp_path: Path) -> None:
    paths = _write(tmp_path, 6)
    assert len(paths) == 2
    schema = pq.read_schema(paths[0])
    assert schema.names == [
        "ID",
        "OWNER",
        "BALANCE",
        "STATUS",
        "TS",
        "P01",
        "P02",
        "P03",
        "P04",
        "P05",
        "P06",
        "Op",
    ]
    assert schema.field("P01").type == pa.string()
    assert schema.field("P02").type == pa.int64()
    assert schema.field("P06").type == pa.int64()
    spark_names = [f.name for f in dms_schema(data.w2_properties(6)).fields]
    assert spark_names == schema.names
    table = pa.concat_tables(pq.read_table(p) for p in paths)
    assert table.num_rows == 200
    strings = [v for v in table.column("P03").to_pylist() if v is not None]
    assert strings and all(v.startswith("v-") and v[2:].isdigit() for v in strings)
    numbers = [v for v in table.column("P04").to_pylist() if v is not None]
    assert numbers and all(0 <= v < data.EXTRA_VALUES for v in numbers)
    nulls = sum(table.column(f"P{i:02d}").null_count for i in range(1, 7))
    assert 0 < nulls < 0.25 * 6 * 200  # about one in ten


def test_the_base_columns_and_file_split_do_not_change_with_extra_properties(
    tmp_path: Path,
) -> None:
    narrow = pa.concat_tables(pq.read_table(p) for p in _write(tmp_path / "narrow", 0))
    wide = pa.concat_tables(pq.read_table(p) for p in _write(tmp_path / "wide", 3))
    assert narrow.schema == DEFAULT_DMS
    assert wide.select(DEFAULT_DMS.names).equals(narrow)


def test_extra_values_are_reproducible_and_a_function_of_the_change(tmp_path: Path) -> None:
    one = pa.concat_tables(pq.read_table(p) for p in _write(tmp_path / "one", 4, files=2))
    two = pa.concat_tables(pq.read_table(p) for p in _write(tmp_path / "two", 4, files=5))
    assert one.equals(two)  # same changes: same values, however they are split into files
    assert len(set(one.column("P02").to_pylist())) > 100  # not a constant


def test_the_option_reaches_the_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr("bench.__main__.run", lambda sizes, *_a, **_k: seen.append(sizes))
    assert main(["--quick", "--workloads", "W2", "--w2-extra-props", "50"]) == 0
    assert main(["--quick", "--workloads", "W2"]) == 0
    assert [s.w2_extra_props for s in seen] == [50, 0]
    with pytest.raises(SystemExit):
        main(["--w2-extra-props", "-1"])
