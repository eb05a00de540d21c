"""The worker's renderer: a receipt's email is made at its row's first claim.

Built once per worker process from the same settings the web process reads
(locale, time zone, template directory); a template that cannot render the
samples stops the worker at start-up with a ConfigError naming it, before
any row is claimed.
"""

from __future__ import annotations

from typing import Any

from receipts.config import Settings
from receipts.delivery.claims import RenderPayload
from receipts.receipt.books_copy import copy_recipient
from receipts.receipt.payload import render_payload
from receipts.receipt.rendering import Renderer


def payload_renderer(settings: Settings) -> RenderPayload:
    """``render(message_key, render_input) -> payload`` with this process's templates.

    A copy for the books is rendered only to this worker's own
    ``RECEIPTS_COPY_TO``; any other copy address sends the row to review.
    """
    renderer = Renderer.from_settings(settings)

    def render(key: str, render_input: dict[str, Any]) -> dict[str, Any]:
        copy_recipient(render_input, settings.copy_to)
        return render_payload(key, render_input, renderer)

    return render
