"""The local mail sink of ``receipts dev``: one ``.eml`` file per message key.

Idempotent like Resend: a second send of the same key writes nothing and
returns the same id; the same key with a different payload is refused as
``invalid_idempotent_request``; a payload that cannot be written as a
message is ``validation_error`` (answers in Resend's terms, decided by
Resend's table). Files appear atomically.
"""

from __future__ import annotations

import contextlib
import email.policy
import hashlib
import os
import re
import tempfile
from datetime import datetime
from email.parser import BytesHeaderParser
from pathlib import Path

from receipts.delivery.answers import KEY_REUSED_WITH_OTHER_BODY, ProviderAnswer
from receipts.delivery.providers.base import NOT_SUPPORTED, Guarantee, Lookup, Protection
from receipts.delivery.providers.message import build_email
from receipts.delivery.rules.resend import RESEND

PAYLOAD_DIGEST_HEADER = "X-Receipts-Payload-SHA256"

GUARANTEE = Guarantee(protection=Protection.IDEMPOTENCY_KEY, window_hours=None, can_look_up=False)


class FileSinkProvider:
    """Writes one RFC 5322 ``.eml`` file per message key, for development."""

    name = "file"
    default_rate = 0.0
    guarantee = GUARANTEE
    answers = RESEND

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def send(self, message_key: str, payload: bytes) -> ProviderAnswer:
        digest = hashlib.sha256(payload).hexdigest()
        provider_id = file_sink_id(message_key)
        target = self.path_for(message_key)
        existing = _stored_payload_digest(target)
        if existing is None:
            try:
                message = build_email(
                    message_key, payload, extra_headers={PAYLOAD_DIGEST_HEADER: digest}
                )
            except ValueError:
                return ProviderAnswer(http_status=422, error="validation_error")
            if _create_atomically(target, message.as_bytes(policy=email.policy.SMTP)):
                return ProviderAnswer(http_status=200, provider_id=provider_id)
            existing = _stored_payload_digest(target)
        if existing != digest:
            return ProviderAnswer(http_status=409, error=KEY_REUSED_WITH_OTHER_BODY)
        return ProviderAnswer(http_status=200, provider_id=provider_id)

    def look_up(
        self, message_key: str, payload: bytes, *, since: datetime, deadline: float
    ) -> Lookup:
        return NOT_SUPPORTED  # the key protects every send: nothing to look up

    def path_for(self, message_key: str) -> Path:
        """A safe file name: readable key characters plus a hash against collisions."""
        readable = re.sub(r"[^A-Za-z0-9_-]", "_", message_key)[:120]
        short = hashlib.sha256(message_key.encode("utf-8")).hexdigest()[:12]
        return self.directory / f"{readable}-{short}.eml"

    def close(self) -> None:
        pass


def file_sink_id(message_key: str) -> str:
    return "file_" + hashlib.sha256(message_key.encode("utf-8")).hexdigest()[:32]


def _stored_payload_digest(path: Path) -> str | None:
    """The payload digest of the message already written for a key, if any."""
    try:
        with path.open("rb") as stored:
            headers = BytesHeaderParser(policy=email.policy.default).parse(stored)
    except FileNotFoundError:
        return None
    return str(headers.get(PAYLOAD_DIGEST_HEADER, "")).strip()


def _create_atomically(target: Path, content: bytes) -> bool:
    """Write ``target`` only if absent; False when another writer got there first."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".eml")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, target)  # fails if the file exists: no overwrite race
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
