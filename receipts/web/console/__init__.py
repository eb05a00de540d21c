"""The support console: find a customer's receipt, see what happened, decide.

``/console/`` on the web app, registered only when ``RECEIPTS_CONSOLE_USERS``
is set (otherwise every console URL is the app's 404). Server-rendered HTML
(Jinja templates in ``templates/console/``), no JavaScript: search
(:mod:`.pages`), a receipt's timeline, the review queue, the status page with
its chart (:mod:`.chart`), the decisions (:mod:`.decisions`) and login
(:mod:`.logins`). Who may see what, the
cookie and the security headers are in :mod:`.blueprint` and :mod:`.sessions`.
docs/architecture.md, "The support console".
"""

from __future__ import annotations

from flask import Flask

from receipts.config import Settings
from receipts.web.console import context


def init_app(app: Flask, settings: Settings) -> None:
    """Register the console on ``app`` if it has users; otherwise do nothing."""
    if not settings.console_enabled:
        return
    # The views register themselves on the blueprint when imported.
    from receipts.web.console import decisions, logins, pages  # noqa: F401
    from receipts.web.console.blueprint import blueprint

    context.init_app(app, settings)
    app.register_blueprint(blueprint)
