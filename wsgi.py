"""The production WSGI entry point: ``gunicorn wsgi:app``."""

import sys

from receipts.config import ConfigError
from receipts.logs import configure_logging
from receipts.web import create_app

try:
    app = create_app()
except ConfigError as error:
    print(f"receipts: configuration error: {error}", file=sys.stderr)
    raise SystemExit(2) from None
configure_logging(app.extensions["receipts"].settings.log_format)
