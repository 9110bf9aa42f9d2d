"""The package's declared public surface (issue 59): every module of ``streaming`` and
``connectors`` names what it offers in ``__all__`` — each public function, class and constant it
defines, nothing it does not — and the packages ship ``py.typed``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streaming", "connectors")
NOT_DECLARED = ("TypeVar", "ParamSpec", "getLogger")
"""Calls whose results are helpers of the module's own annotations or logging, not its surface."""


def _modules() -> list[Path]:
    return sorted(
        p
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )


def _defined(tree: ast.Module) -> list[str]:
    """The public names a module defines at its top level."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            call = node.value.func if isinstance(node.value, ast.Call) else None
            if call is not None and getattr(call, "id", getattr(call, "attr", "")) in NOT_DECLARED:
                continue
            for target in node.targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                names += [e.id for e in elements if isinstance(e, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_")]


def _declared(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            assert isinstance(node.value, ast.List | ast.Tuple)
            return [str(e.value) for e in node.value.elts if isinstance(e, ast.Constant)]
    return None


def test_every_module_declares_exactly_the_public_names_it_defines() -> None:
    problems = []
    modules = _modules()
    assert len(modules) > 70
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        declared = _declared(tree)
        where = path.relative_to(ROOT)
        if declared is None:
            problems.append(f"{where}: no __all__")
            continue
        defined = set(_defined(tree))
        if missing := sorted(defined - set(declared)):
            problems.append(f"{where}: public but not in __all__: {missing}")
        if extra := sorted(set(declared) - defined):
            problems.append(f"{where}: in __all__ but not defined here: {extra}")
    assert not problems, "\n".join(problems)


def test_the_packages_say_they_are_typed() -> None:
    for package in PACKAGES:
        assert (ROOT / package / "py.typed").is_file(), package
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"py.typed"' in pyproject  # shipped as package data
