"""Every regular expression under receipts/ that validates a value matches it whole.

``re.match`` with a pattern ending in ``$`` accepts a value with a trailing
newline (``$`` also matches just before a final ``\\n``), which let
``in_x\\n`` through as an invoice id. Patterns are written without anchors and
used with ``fullmatch``; this test reads the source so a new anchored pattern
fails here rather than in production.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "receipts"


@functools.cache
def _compiled_patterns() -> tuple[tuple[str, int, str], ...]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "compile"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and "MULTILINE" not in ast.unparse(node)  # line anchors, on purpose
            ):
                relative = str(path.relative_to(PACKAGE.parent))
                found.append((relative, node.lineno, node.args[0].value))
    return tuple(found)


def test_the_source_scan_finds_the_patterns() -> None:
    """The scan itself works: the id patterns of the webhook are among those found."""
    assert any(path.endswith("receipt/event.py") for path, _, _ in _compiled_patterns())


def test_no_pattern_is_anchored_with_a_dollar() -> None:
    """No compiled pattern ends with ``$`` (use ``fullmatch``, or ``\\Z`` in a search).

    One test for every pattern: the scan reads the whole package, and a
    parametrized test would read it in every test process at collection."""
    anchored = [
        f"{path}:{line}: {pattern!r} ends with $"
        for path, line, pattern in _compiled_patterns()
        if pattern.endswith("$")
    ]
    assert anchored == []
