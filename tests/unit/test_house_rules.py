"""House rules that keep the package easy to change: no import cycles, small modules.

Why tests and not review: both rules erode one harmless-looking commit at a time. An import
cycle makes module load order matter (and broke imports twice before); a module past ~400
lines usually mixes jobs. A long module is allowed when its docstring says why, in a
paragraph starting "Why this module is long:".
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("domain", "projections", "services", "infra")
MAX_LINES = 400
MAX_FUNCTION_LINES = 80
LONG_REASON = "Why this module is long:"


def test_no_import_cycles_between_engramdb_modules() -> None:
    graph = grimp.build_graph("engramdb", exclude_type_checking_imports=True)
    cycles = set()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if graph.find_shortest_chain(importer=imported, imported=importer):
                cycles.add(tuple(sorted((importer, imported))))
    assert sorted(cycles) == []


def test_modules_over_400_lines_say_why() -> None:
    too_long = []
    for layer in LAYERS:
        for path in sorted((REPO / layer).rglob("*.py")):
            source = path.read_text("utf-8")
            if source.count("\n") <= MAX_LINES:
                continue
            docstring = ast.get_docstring(ast.parse(source)) or ""
            if LONG_REASON not in docstring:
                too_long.append(f"{path.relative_to(REPO)} ({source.count(chr(10))} lines)")
    assert too_long == [], f"split these by job, or say '{LONG_REASON} ...' at the top: {too_long}"


def test_no_production_function_over_80_lines() -> None:
    """ADR-0043 (issue 22): a function past 80 lines usually does several stages; split it by
    stage (a nested function counts inside its host, so a host of many closures splits too)."""
    long_functions = []
    for layer in LAYERS:
        for path in sorted((REPO / layer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        long_functions.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length})")
    assert long_functions == [], f"split these by stage (ADR-0043): {long_functions}"


def test_services_has_rooms_and_nothing_loose_at_its_top() -> None:
    """ADR-0043: a module goes into a room by concern; only ``__init__.py`` sits at the top."""
    loose = sorted(p.name for p in (REPO / "services").glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"move these into a room of services/ (ADR-0043): {loose}"


def test_entry_points_live_under_entrypoints() -> None:
    """Entry-point modules (HTTP, CLI, MCP, NATS, serve) are only under services/entrypoints."""
    stray = [
        str(p.relative_to(REPO))
        for p in (REPO / "services").rglob("*.py")
        if "entrypoints" not in p.parts
        and any(token in p.read_text("utf-8") for token in ("import typer", "from fastapi import", "import uvicorn"))
    ]
    assert stray == [], f"entry points outside services/entrypoints: {stray}"


def _code_texts() -> list[tuple[Path, str]]:
    roots = [REPO / r for r in ("domain", "projections", "services", "infra", "tests", "bench")]
    return [(p, p.read_text(encoding="utf-8")) for root in roots for p in root.rglob("*.py")]


def test_references_in_code_point_into_the_repository() -> None:
    """ADR-0043 item 7: an ``ADR-NNNN``, a ``docs/...`` path or an "issue N" in code names
    something a reader finds in this repository (an ADR file, a docs page, docs/issues.md)."""
    adrs = {p.name[:4] for p in (REPO / "ADR").glob("[0-9][0-9][0-9][0-9]-*.md")}
    index = (REPO / "docs" / "issues.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| (\d+) \|", index, re.M))
    broken: list[str] = []
    for path, text in _code_texts():
        where = path.relative_to(REPO)
        for number in re.findall(r"ADR[- ]?(\d{4})", text):
            if number not in adrs:
                broken.append(f"{where}: ADR-{number}")
        for doc in re.findall(r"\bdocs/[\w./-]+\.(?:md|json|txt)", text):
            if not (REPO / doc).exists():
                broken.append(f"{where}: {doc}")
        for number in re.findall(r"\bissue (\d+)\b", text):
            if number not in listed:
                broken.append(f"{where}: issue {number} (not in docs/issues.md)")
        if "SPEC " + "§" in text:  # spelt in two parts so this line does not match itself
            broken.append(f"{where}: a SPEC section reference (say docs/spec.md §N)")
    assert broken == [], broken
