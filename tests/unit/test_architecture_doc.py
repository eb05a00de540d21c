"""docs/architecture.md names real things: every query it cites exists, every path too.

The design document points at the module and the named query behind each
guarantee; a rename that forgets the document fails here instead of leaving a
reader to hunt for code that is not there.
"""

from __future__ import annotations

import re
from pathlib import Path

from receipts import queries

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_every_cited_query_exists() -> None:
    """`<file>.sql: <name>` references resolve to a named statement of that file."""
    cited = set(re.findall(r"`([a-z_]+)\.sql: ([a-z_]+)`", DOC.read_text()))
    assert cited, "the document cites no query at all"
    missing = sorted((f, n) for f, n in cited if n not in queries.load(f))
    assert missing == []


def test_every_cited_path_exists() -> None:
    """Module, migration and test paths the document names are in the repository."""
    root = DOC.parents[1]
    pattern = r"`((?:receipts|sql|tests)/[A-Za-z0-9_/.]+\.(?:py|sql))`"
    cited = set(re.findall(pattern, DOC.read_text()))
    assert cited
    assert sorted(path for path in cited if not (root / path).exists()) == []
