"""One structured line per thing that happened: text for people, JSON for machines.

Callers pass ids, keys and outcomes as fields. Email bodies, invoice URLs and
secrets never go into a log line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_FIELDS_ATTR = "receipts_fields"


def configure_logging(log_format: str = "text", level: int = logging.INFO) -> None:
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def log_fields(
    logger: logging.Logger, message: str, level: int = logging.INFO, **fields: Any
) -> None:
    """Log ``message`` with key=value fields (None values are left out)."""
    kept = {name: value for name, value in fields.items() if value is not None}
    logger.log(level, message, extra={_FIELDS_ATTR: kept})


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when a line is logged, not when configured,
    so a command run under a replaced stderr (tests, embedding) never writes to a
    stream that has since been closed."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, _FIELDS_ATTR, {})
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        parts = [stamp, record.levelname.lower(), record.getMessage()]
        parts.extend(f"{name}={value}" for name, value in fields.items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        document.update(getattr(record, _FIELDS_ATTR, {}))
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)
