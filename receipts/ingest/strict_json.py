"""JSON as RFC 8259 defines it, for bodies that come from outside.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``-Infinity`` although they
are not JSON, and PostgreSQL's jsonb cannot store them: a signed body carrying
one would pass verification and then fail at the INSERT. Every webhook body is
read through :func:`loads`, which refuses them as it refuses any other text
that is not JSON.
"""

from __future__ import annotations

import json
from typing import Any


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value")


def loads(text: str | bytes) -> Any:
    """``json.loads`` that raises ValueError for NaN and the infinities."""
    return json.loads(text, parse_constant=_not_json)
