"""The suite's own layout: test modules share helpers through tests/*.py and conftest.py,
never by importing each other."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, ``from a import b`` counted as ``a`` and ``a.b``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_test_module_imports_another_or_a_conftest() -> None:
    """A test module importing another runs that module's tests' set-up twice and ties
    them together; what two modules share belongs in a helper module or a conftest."""
    offending = {
        str(path.relative_to(TESTS)): sorted(
            name
            for name in imported_modules(path)
            if name.startswith("tests.") and name.split(".")[-1].startswith(("test_", "conftest"))
        )
        for path in sorted(TESTS.rglob("*.py"))
    }
    assert {path: names for path, names in offending.items() if names} == {}
