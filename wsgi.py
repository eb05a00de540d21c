"""The production WSGI entry point: ``gunicorn wsgi:app``."""

import sys

from receipts.config import ConfigError
from receipts.logs import configure_logging
from receipts.web import create_app

try:
    app = create_app()
except ConfigError as error:
    print(f"receipts: configuration error: {error}", file=sys.stderr)
    # Preloaded (gunicorn.conf.py), this stops the arbiter before any worker
    # is forked; in a worker, 3 is gunicorn's "worker failed to boot": the
    # arbiter stops instead of restarting workers forever with the same bad setting.
    raise SystemExit(3) from None
configure_logging(app.extensions["receipts"].settings.log_format)
