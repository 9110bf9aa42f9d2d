"""The code map (docs/architecture.md) names every package of ``streaming/`` and
``connectors/`` and every module in them, and nothing that is not there (no Spark).

The map is the ```text block under "## Code map": one entry per folder, its name ending in ``/``
and indented two spaces per level below its parent, then what it holds. The ``*.py`` names on an
entry's line and on the lines that continue it (lines whose first word is not a folder) are the
modules directly in that folder, ``__init__.py`` left out.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streaming", "connectors")
"""The folders whose packages and modules the map must list exactly."""

MAP_FILE = "docs/architecture.md"
HEADING = "## Code map"
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[\w.-]+)/(?:\s|$)")
MODULE = re.compile(r"(?<![\w./-])(\w+)\.py\b")


def map_block(readme: str) -> str:
    """The body of the first ```text block after the code map's heading."""
    section = readme[readme.index(HEADING) :]
    start = section.index("```text\n") + len("```text\n")
    return section[start : section.index("\n```", start)]


def parse(block: str) -> dict[str, set[str]]:
    """Folder path (``streaming/core``) → the module names its entry lists."""
    entries: dict[str, set[str]] = {}
    stack: list[str] = []
    current: str | None = None
    for number, line in enumerate(block.splitlines(), start=1):
        if not line.strip():
            continue
        match = ENTRY.match(line)
        if match:
            indent = len(match["indent"])
            assert indent % 2 == 0 and indent // 2 <= len(stack), f"line {number}: indentation"
            stack = [*stack[: indent // 2], match["name"]]
            current = "/".join(stack)
            assert current not in entries, f"line {number}: {current}/ listed twice"
            entries[current] = set()
            line = line[match.end() :]
        assert current is not None, f"line {number}: no folder before it"
        entries[current].update(MODULE.findall(line))
    return entries


def actual(root: Path) -> dict[str, set[str]]:
    """Every package under ``PACKAGES`` (a folder with ``__init__.py``) → its modules."""
    found: dict[str, set[str]] = {}
    for top in PACKAGES:
        for init in sorted((root / top).rglob("__init__.py")):
            folder = init.parent
            found[folder.relative_to(root).as_posix()] = {
                p.stem for p in folder.glob("*.py") if p.name != "__init__.py"
            }
    return found


def problems(listed: dict[str, set[str]], root: Path) -> list[str]:
    """How the map differs from the tree under ``root``."""
    real = actual(root)
    found: list[str] = []
    for package, modules in sorted(real.items()):
        if package not in listed:
            found.append(f"{package}/: a package the map does not list")
            continue
        for name in sorted(modules - listed[package]):
            found.append(f"{package}/{name}.py: a module the map does not list")
        for name in sorted(listed[package] - modules):
            found.append(f"{package}/{name}.py: listed, but no such module")
    for folder, modules in sorted(listed.items()):
        if folder in real:
            continue
        if not (root / folder).is_dir():
            found.append(f"{folder}/: listed, but no such folder")
        elif modules and folder.split("/")[0] in PACKAGES:
            found.append(f"{folder}/: lists modules, but is not a package")
    return found


def test_the_readme_code_map_equals_the_tree() -> None:
    listed = parse(map_block((ROOT / MAP_FILE).read_text(encoding="utf-8")))
    found = problems(listed, ROOT)
    assert not found, f"{MAP_FILE}, Code map, against the tree:\n" + "\n".join(found)


def test_the_code_map_lists_the_layers_and_their_modules() -> None:
    """The comparison above is not vacuous: the map is parsed into the layers' packages."""
    listed = parse(map_block((ROOT / MAP_FILE).read_text(encoding="utf-8")))
    layers = ("core", "storage", "inputs", "apply", "runtime", "cli")
    assert {f"streaming/{layer}" for layer in layers} | {"streaming", "connectors"} <= set(listed)
    assert "sink" in listed["streaming/runtime"] and "submit" in listed["streaming"]
    assert sum(len(modules) for modules in listed.values()) >= 50


def _tree(root: Path) -> None:
    for package, modules in {"streaming": ["submit"], "streaming/core": ["fold", "plan"]}.items():
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        for module in modules:
            (root / package / f"{module}.py").write_text("")
    (root / "connectors").mkdir()
    (root / "connectors" / "__init__.py").write_text("")
    (root / "streaming" / "resources").mkdir()


MAP = """\
streaming/      the job: submit.py
  core/         pure: fold.py
                plan.py
  resources/    data, no modules
connectors/     nothing yet
"""


def test_a_map_that_matches_has_no_problems(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert parse(MAP)["streaming/core"] == {"fold", "plan"}
    assert problems(parse(MAP), tmp_path) == []


def test_an_added_module_or_package_the_map_lacks_is_found(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "streaming" / "core" / "steps.py").write_text("")
    (tmp_path / "streaming" / "apply").mkdir()
    (tmp_path / "streaming" / "apply" / "__init__.py").write_text("")
    assert problems(parse(MAP), tmp_path) == [
        "streaming/apply/: a package the map does not list",
        "streaming/core/steps.py: a module the map does not list",
    ]


def test_a_removed_module_or_folder_the_map_still_lists_is_found(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "streaming" / "core" / "plan.py").unlink()
    text = MAP.replace("  resources/", "  gone/         a folder that is not there\n  resources/")
    assert problems(parse(text), tmp_path) == [
        "streaming/core/plan.py: listed, but no such module",
        "streaming/gone/: listed, but no such folder",
    ]
