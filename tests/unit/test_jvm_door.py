"""Only ``streaming/platform/`` reaches into py4j and the JVM internals of Spark, Delta and Hadoop
(issue 46: one door to the JVM). No Spark.

import-linter's ``forbidden`` contract keeps ``py4j`` imports out of the other packages, but it
cannot see attribute access: ``spark.sparkContext._jvm`` needs no import. This scans the code of
``streaming/`` and ``connectors/`` (with ``ast``: comments and docstrings do not count) for the
private names PySpark keeps its JVM handles under, for py4j and for PySpark's gateway and
classic-column modules, and names every use outside ``streaming/platform/``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("streaming", "connectors")
DOOR = ROOT / "streaming" / "platform"

PRIVATE = frozenset(
    {"_jvm", "_jsparkSession", "_jsq", "_jdf", "_jsc", "_jwrite", "_gateway", "_jc", "py4j"}
)
"""PySpark's handles on JVM objects (and py4j itself), as attributes or names."""

MODULES = ("py4j", "pyspark.java_gateway", "pyspark.sql.classic")
"""Modules (and their submodules) only the platform imports."""

PY4J_TEXT = re.compile(r"\bpy4j\b")
"""A string that names py4j (a logger's name, say) is a py4j detail too; docstrings aside."""


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (of the module, a class, a function)
    or stand alone as an attribute's docstring (an expression statement)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            found.add(id(node.value))
    return found


def _imported(node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def _inside(name: str, module: str) -> bool:
    return name == module or name.startswith(f"{module}.")


def reaches(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) of every reach into the JVM in a module's source."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            yield node.lineno, f".{node.attr}"
        elif isinstance(node, ast.Name) and node.id in PRIVATE:
            yield node.lineno, node.id
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for name in _imported(node):
                if any(_inside(name, m) for m in MODULES):
                    yield node.lineno, f"import {name}"
                    break
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and PY4J_TEXT.search(node.value)
        ):
            yield node.lineno, f"string {node.value[:40]!r}"


def outside_the_door(root: Path) -> list[str]:
    """``file:line: what`` of every reach into the JVM outside ``streaming/platform/``."""
    door = root / "streaming" / "platform"
    found: list[str] = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            if path.is_relative_to(door):
                continue
            rel = path.relative_to(root).as_posix()
            for line, what in sorted(set(reaches(path.read_text(encoding="utf-8")))):
                found.append(f"{rel}:{line}: {what}")
    return found


def test_only_the_platform_reaches_into_the_jvm() -> None:
    found = outside_the_door(ROOT)
    assert not found, "reaches into the JVM outside streaming/platform/:\n" + "\n".join(found)


def test_the_scan_sees_each_kind_of_reach() -> None:
    source = '''
"""py4j in a docstring does not count."""
from py4j.protocol import Py4JJavaError
import py4j.java_gateway
from pyspark import java_gateway
from pyspark.sql.classic.column import Column
# spark._jvm in a comment does not count
jvm = spark.sparkContext._jvm
spark._jsparkSession.conf()
frame._jdf.inputFiles()
query._jsq.stop()
spark.sparkContext._jsc.sc()
writer._jwrite
spark.sparkContext._gateway
column._jc
LOG = logging.getLogger("py4j.clientserver")
'''
    kinds = [what for _, what in sorted(reaches(source))]
    assert kinds == [
        "import py4j.protocol",
        "import py4j.java_gateway",
        "import pyspark.java_gateway",
        "import pyspark.sql.classic.column",
        "._jvm",
        "._jsparkSession",
        "._jdf",
        "._jsq",
        "._jsc",
        "._jwrite",
        "._gateway",
        "._jc",
        "string 'py4j.clientserver'",
    ]


def test_the_platform_is_where_the_door_is() -> None:
    assert DOOR.is_dir() and (DOOR / "__init__.py").is_file()
