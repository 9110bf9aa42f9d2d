"""README.md and docs/*.md stay true to the code (no Spark).

- every ```yaml block is a config (validated by the config model; a block with only some sections
  is validated with placeholder `warehouse`/`checkpoints`) or a dataset definition (validated by
  the catalog);
- every ```json block is JSON (one document, or one per line) and every transaction request in it
  parses with streaming/core/requests.py's parser;
- every `cdc <subcommand> --option` in a code block or code span names a subcommand and options
  the CLI's argparse parser has;
- the error codes of docs/troubleshooting.md (first column of its tables) are exactly the codes
  the code raises.

A block that is deliberately not complete (an elided value, ``…``) is marked by the line
``<!-- docs-test: fragment -->`` right above it and is not checked.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from streaming.cli.main import build_parser
from streaming.core.catalog import parse_dataset
from streaming.core.codes import Code
from streaming.core.config import AppConfig, parse_config
from streaming.core.errors import CdcError
from streaming.core.requests import parse_request

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TROUBLESHOOTING = ROOT / "docs" / "troubleshooting.md"
FRAGMENT = "<!-- docs-test: fragment -->"
SOURCES = [*sorted((ROOT / "streaming").rglob("*.py")), *sorted((ROOT / "connectors").glob("*.py"))]


@dataclass(frozen=True)
class Block:
    file: Path
    line: int
    lang: str
    body: str
    fragment: bool

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def fenced_blocks(file: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = file.read_text(encoding="utf-8").splitlines()
    opened: tuple[int, str] | None = None
    body: list[str] = []
    for number, line in enumerate(lines, start=1):
        if opened is None:
            if line.startswith("```"):
                opened, body = (number, line[3:].strip().split(" ")[0]), []
        elif line.startswith("```"):
            start, lang = opened
            above = next((x.strip() for x in reversed(lines[: start - 1]) if x.strip()), "")
            blocks.append(Block(file, start, lang, "\n".join(body), above == FRAGMENT))
            opened = None
        else:
            body.append(line)
    assert opened is None, f"{file.name}:{opened[0]}: unclosed code block"
    return blocks


def blocks_of(lang: str) -> list[Block]:
    return [b for file in DOCS for b in fenced_blocks(file) if b.lang == lang and not b.fragment]


def _id(block: Block) -> str:
    return block.where


# -- YAML: configs and dataset definitions ---------------------------------------------------


@pytest.mark.parametrize("block", blocks_of("yaml"), ids=_id)
def test_yaml_block_is_a_valid_config_or_dataset(block: Block, tmp_path: Path) -> None:
    data = yaml.safe_load(block.body)
    assert isinstance(data, dict), f"{block.where}: not a YAML mapping"
    if all("." in str(key) for key in data):
        try:
            parse_dataset("docs", data)
        except CdcError as e:
            pytest.fail(f"{block.where}: dataset definition does not validate: {e.message}")
    elif set(data) & set(AppConfig.model_fields):
        placeholders = {"warehouse": "./warehouse", "checkpoints": "./checkpoints"}
        try:
            parse_config({**placeholders, **data}, base=tmp_path, environ={})
        except CdcError as e:
            pytest.fail(f"{block.where}: config does not validate: {e.message}")
    else:
        pytest.fail(
            f"{block.where}: neither a config nor a dataset definition "
            f"(keys {sorted(map(str, data))}); mark a fragment with {FRAGMENT}"
        )


# -- JSON: transaction requests --------------------------------------------------------------


def json_documents(block: Block) -> list[tuple[str, Any]]:
    """(text, value) of the block as one document, else of each non-empty line."""
    try:
        return [(block.body, json.loads(block.body))]
    except json.JSONDecodeError:
        pass
    documents = []
    for line in block.body.splitlines():
        if line.strip():
            try:
                documents.append((line, json.loads(line)))
            except json.JSONDecodeError as e:
                pytest.fail(f"{block.where}: not JSON ({e}); mark a fragment with {FRAGMENT}")
    return documents


def is_request(value: Any) -> bool:
    """A transaction request (not an outcome event, which has a status, nor a data row)."""
    return isinstance(value, dict) and "actions" in value and "status" not in value


@pytest.mark.parametrize("block", blocks_of("json"), ids=_id)
def test_json_block_is_json_and_its_requests_parse(block: Block) -> None:
    for text, value in json_documents(block):
        if is_request(value):
            try:
                parse_request(text.encode("utf-8"))
            except CdcError as e:
                pytest.fail(f"{block.where}: request rejected [{e.code}]: {e.message}")


def test_the_docs_hold_requests() -> None:
    """The request check above is not vacuous."""
    requests = [v for b in blocks_of("json") for _, v in json_documents(b) if is_request(v)]
    assert len(requests) >= 5


# -- `cdc <subcommand> --option` -------------------------------------------------------------

INLINE_CODE = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"(?<![\w./$-])cdc[ \t]+(?:(?:-v|--verbose)[ \t]+)?(?=([a-z][\w-]*))")
OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")
COMMAND_END = re.compile(r"\s#|\||;|&&|\)|\n")


def code_texts(file: Path) -> list[str]:
    """Fenced blocks (backslash continuations joined) and inline code spans of a document."""
    text = file.read_text(encoding="utf-8")
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    spans = [span.replace("\n", " ") for span in INLINE_CODE.findall(prose)]
    return [b.body.replace("\\\n", " ") for b in fenced_blocks(file)] + spans


def subparsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, dict(sub.choices)


def command_mentions() -> list[tuple[str, str, list[str]]]:
    """(document, subcommand, options) of every `cdc ...` command in code."""
    found = []
    for file in DOCS:
        for text in code_texts(file):
            for match in COMMAND.finditer(text):
                command = match.group(1)
                if command == "cdc":  # `docker compose exec cdc cdc publish`: the service
                    continue
                if text[: match.start()].rstrip().endswith(("--profile", "-U")):
                    continue  # `docker compose --profile cdc up`, `psql -U cdc`: names

                rest = text[match.end() + len(command) :]
                end = COMMAND_END.search(rest)
                options = OPTION.findall(rest[: end.start()] if end else rest)
                found.append((file.name, command, options))
    return found


def test_every_cdc_command_in_the_docs_exists_with_its_options() -> None:
    parser, commands = subparsers()
    top_level = {o for a in parser._actions for o in a.option_strings}
    problems = []
    for document, command, options in command_mentions():
        if command not in commands:
            problems.append(f"{document}: `cdc {command}`: no such subcommand")
            continue
        known = top_level | {o for a in commands[command]._actions for o in a.option_strings}
        problems += [
            f"{document}: `cdc {command} {o}`: no such option" for o in options if o not in known
        ]
    assert not problems, "\n".join(problems)


def test_the_docs_mention_every_subcommand() -> None:
    mentioned = {command for _, command, _ in command_mentions()}
    assert mentioned >= set(subparsers()[1]), sorted(set(subparsers()[1]) - mentioned)


# -- error codes -----------------------------------------------------------------------------


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def bare_codes_in_code() -> dict[str, str]:
    """Error codes written as bare strings where a code is made → where: ``code="X"``
    arguments, ``code = "X"`` class attributes, string returns of ``*_code`` functions, values
    of ``*_CODES`` maps. Every code is ``Code.X`` (``streaming.core.codes``): none is found."""
    codes: dict[str, str] = {}
    for file in SOURCES:
        where = str(file.relative_to(ROOT))
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            found: list[str | None] = []
            if isinstance(node, ast.keyword) and node.arg == "code":
                found.append(_str(node.value))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if "code" in names:
                    found.append(_str(node.value))
                elif any(n.endswith("_CODES") for n in names) and isinstance(node.value, ast.Dict):
                    found += [_str(v) for v in node.value.values]
            elif isinstance(node, ast.FunctionDef) and node.name.endswith("_code"):
                found += [_str(r.value) for r in ast.walk(node) if isinstance(r, ast.Return)]
            for code in found:
                if code is not None:
                    codes.setdefault(code, where)
    return codes


def codes_in_code() -> dict[str, str]:
    """Every ``Code.X`` the code uses → the first file that does."""
    codes: dict[str, str] = {}
    for file in SOURCES:
        where = str(file.relative_to(ROOT))
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "Code"
            ):
                codes.setdefault(node.attr, where)
    return codes


def codes_in_troubleshooting() -> set[str]:
    rows = re.findall(
        r"^\| `([A-Z][A-Z0-9_]+)` \|", TROUBLESHOOTING.read_text(encoding="utf-8"), re.M
    )
    assert len(rows) == len(set(rows)), "a code is listed twice"
    return set(rows)


def test_code_extraction_finds_codes_of_every_kind() -> None:
    codes = codes_in_code()
    # a keyword argument, a class attribute, a *_CODES map, a *_code function's return
    for code in ("INVALID_JSON", "APPLY_FAILED", "MISSING_DATASET", "UNKNOWN_OPERATION"):
        assert code in codes, code


def test_every_code_is_named_once_in_the_enum() -> None:
    """No code is written as a bare string where one is made; every member of ``Code`` is
    used; each is its own name (issue 59)."""
    assert bare_codes_in_code() == {}, "write Code.X (streaming/core/codes.py)"
    assert set(codes_in_code()) == {c.name for c in Code}
    assert all(c.value == c.name for c in Code)


def test_troubleshooting_lists_exactly_the_codes_of_the_code() -> None:
    in_code, documented = codes_in_code(), codes_in_troubleshooting()
    undocumented = sorted(f"{c} ({in_code[c]})" for c in in_code.keys() - documented)
    unknown = sorted(documented - in_code.keys())
    assert not undocumented, f"codes missing from docs/troubleshooting.md: {undocumented}"
    assert not unknown, f"docs/troubleshooting.md lists codes the code does not have: {unknown}"


# -- links -----------------------------------------------------------------------------------


def test_readme_links_the_docs_and_doc_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("deploy.md", "tutorial.md", "troubleshooting.md", "config.md"):
        assert f"(docs/{name})" in readme, name
    for file in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", file.read_text("utf-8")):
            resolved = (file.parent / target).resolve()
            if resolved.parent == ROOT / "docs":
                assert resolved.exists(), f"{file.name}: broken link {target}"
