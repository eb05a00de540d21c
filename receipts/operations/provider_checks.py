"""What ``receipts doctor`` asks the mail provider and Stripe: keys accepted, domain, endpoint.

:func:`mail_provider_checks` checks the provider the settings choose, after a
``provider`` line stating its guarantee: Resend (below), Postmark or SMTP
(``receipts.operations.relay_checks``).

Resend: ``GET /domains`` with ``RESEND_API_KEY`` says whether the key is
accepted and whether the domain of ``EMAIL_FROM`` is verified. A key that may
only send is answered ``401 restricted_api_key``: accepted, but the domain
cannot be seen with it. The answer is cached (an hour, in the user's cache
folder, keyed by a hash of the URL and key), so a doctor run as a frequent
health check does not spend Resend's rate limit; ``--no-cache`` asks again.

Stripe, with ``STRIPE_API_KEY``: listing the account's webhook endpoints
through :class:`receipts.stripe_api.client.StripeApi` says whether the key
works and whether an enabled endpoint is subscribed to ``invoice.paid``.
Nothing is written to either service.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
import stripe

from receipts.addresses import mailbox_address
from receipts.config import ConfigError, Settings
from receipts.delivery.configured import provider_from_settings
from receipts.operations.checks import Check
from receipts.operations.relay_checks import postmark_checks, smtp_check
from receipts.stripe_api.client import ApiError, ApiRefused, StripeApi

CACHE_SECONDS = 3600.0
_TIMEOUT = (5.0, 10.0)


def cache_dir(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/receipts``, else ``~/.cache/receipts``."""
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "receipts"


def mail_provider_checks(settings: Settings, *, cache: Path, refresh: bool = False) -> list[Check]:
    """``provider`` (which one, and its guarantee), then that provider's own checks."""
    chosen = settings.chosen_provider
    if chosen == "postmark":
        return [_guarantee(settings), *postmark_checks(settings)]
    if chosen == "smtp":
        return [_guarantee(settings), smtp_check(settings)]
    checks = resend_checks(settings, cache=cache, refresh=refresh)
    if chosen is None:
        return checks
    return [_guarantee(settings), *checks]


def _guarantee(settings: Settings) -> Check:
    try:
        provider = provider_from_settings(settings, concurrency=1)
    except ConfigError as error:
        return Check(name="provider", ok=False, detail=str(error))
    try:
        detail = f"{provider.name}: duplicate protection: {provider.guarantee.line()}"
    finally:
        provider.close()
    return Check(name="provider", ok=True, detail=detail)


def resend_checks(settings: Settings, *, cache: Path, refresh: bool = False) -> list[Check]:
    """``resend-key`` and ``sending-domain``; ``refresh``: ask Resend whatever is cached."""
    if not settings.resend_api_key:
        if settings.mail_dir is not None:
            detail = f"not used: mail goes to .eml files in {settings.mail_dir}"
            return [Check(name="resend-key", ok=True, detail=detail)]
        detail = (
            "RESEND_API_KEY is not set (nor RECEIPTS_PROVIDER=postmark|smtp, nor "
            "RECEIPTS_MAIL_DIR): the worker cannot send"
        )
        return [Check(name="resend-key", ok=False, detail=detail)]
    answer, age = _domains(settings, cache, refresh)
    cached = f" (answer cached {int(age // 60)} min ago)" if age is not None else ""
    status = answer.get("status")
    if status == 200 or answer.get("name") == "restricted_api_key":
        key = Check(
            name="resend-key", ok=True, detail=f"accepted by {settings.resend_api_url}{cached}"
        )
        return [key, _sending_domain(settings, answer, cached)]
    problem = _resend_problem(answer)
    return [
        Check(name="resend-key", ok=False, detail=problem),
        Check(name="sending-domain", ok=False, detail="not checked: the key was not accepted"),
    ]


def _resend_problem(answer: dict[str, Any]) -> str:
    if answer.get("status") is None:
        return f"Resend did not answer: {answer.get('error')}"
    said = " ".join(str(answer[part]) for part in ("name", "message") if answer.get(part))
    if answer["status"] in (401, 403):
        return f"Resend refused RESEND_API_KEY (HTTP {answer['status']} {said})"
    return f"Resend answered HTTP {answer['status']} {said} (is RESEND_API_URL right?)"


def _sending_domain(settings: Settings, answer: dict[str, Any], cached: str) -> Check:
    address = mailbox_address(settings.email_from) if settings.email_from else None
    if address is None:
        return Check(name="sending-domain", ok=False, detail="EMAIL_FROM is not set")
    domain = address.rsplit("@", 1)[1].lower()
    if answer.get("status") != 200:
        detail = (
            f"{domain} not checked: RESEND_API_KEY may only send (restricted_api_key); "
            "a full-access key lets doctor see the account's domains"
        )
        return Check(name="sending-domain", ok=True, detail=detail)
    domains = {
        str(found.get("name", "")).lower(): str(found.get("status"))
        for found in answer.get("data") or []
        if isinstance(found, dict)
    }
    if domains.get(domain) == "verified":
        return Check(name="sending-domain", ok=True, detail=f"{domain} is verified{cached}")
    if domain in domains:
        detail = f"{domain} is {domains[domain]} at Resend, not verified: finish its DNS records"
        return Check(name="sending-domain", ok=False, detail=detail)
    known = ", ".join(sorted(domains)) or "none"
    detail = f"{domain} (EMAIL_FROM) is not a domain of this Resend account (it has: {known})"
    return Check(name="sending-domain", ok=False, detail=detail)


def _domains(settings: Settings, cache: Path, refresh: bool) -> tuple[dict[str, Any], float | None]:
    """Resend's answer to ``GET /domains``, and its age when it came from the cache."""
    assert settings.resend_api_key is not None
    digest = hashlib.sha256(f"{settings.resend_api_url}\n{settings.resend_api_key}".encode())
    path = cache / f"resend-domains-{digest.hexdigest()[:16]}.json"
    if not refresh:
        try:
            stored = json.loads(path.read_text())
            age = time.time() - float(stored["at"])
            if 0 <= age < CACHE_SECONDS:
                return dict(stored["answer"]), age
        except (OSError, ValueError, KeyError, TypeError):
            pass
    answer = _ask_resend(settings.resend_api_url, settings.resend_api_key)
    if answer.get("status") == 200 or answer.get("name") == "restricted_api_key":
        _store(path, answer)
    return answer, None


def _ask_resend(api_url: str, api_key: str) -> dict[str, Any]:
    try:
        response = requests.get(
            f"{api_url}/domains", headers={"Authorization": f"Bearer {api_key}"}, timeout=_TIMEOUT
        )
    except requests.RequestException as exc:
        return {"status": None, "error": type(exc).__name__}
    try:
        document = response.json()
    except ValueError:
        document = {}
    if not isinstance(document, dict):
        document = {}
    return {
        "status": response.status_code,
        "name": document.get("name"),
        "message": str(document.get("message") or "")[:200] or None,
        "data": document.get("data") if response.status_code == 200 else None,
    }


def _store(path: Path, answer: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump({"at": time.time(), "answer": answer}, file)
    except OSError:
        pass  # no cache: the next run asks again


def stripe_checks(settings: Settings) -> list[Check]:
    """``stripe-key`` and ``stripe-webhook``."""
    api = StripeApi.from_settings(settings)
    if api is None:
        detail = "not set (optional: thin events, backfill, reconcile, API facts)"
        return [
            Check(name="stripe-key", ok=True, detail=detail),
            Check(name="stripe-webhook", ok=True, detail="not checked without STRIPE_API_KEY"),
        ]
    try:
        endpoints = api.webhook_endpoints()
    except ApiRefused as exc:
        if isinstance(exc.__cause__, stripe.PermissionError):
            detail = (
                f"the key may not list webhook endpoints ({exc}): give it Webhook Endpoints: "
                "Read, or check Dashboard > Developers > Webhooks by hand"
            )
            return [
                Check(name="stripe-key", ok=True, detail="accepted by Stripe"),
                Check(name="stripe-webhook", ok=False, detail=detail),
            ]
        return _both_fail(f"Stripe refused STRIPE_API_KEY: {exc}")
    except ApiError as exc:
        return _both_fail(f"Stripe's API did not answer: {exc}")
    return [Check(name="stripe-key", ok=True, detail="accepted by Stripe"), _endpoint(endpoints)]


def _both_fail(detail: str) -> list[Check]:
    return [
        Check(name="stripe-key", ok=False, detail=detail),
        Check(name="stripe-webhook", ok=False, detail="not checked: the key was not accepted"),
    ]


def _endpoint(endpoints: list[dict[str, Any]]) -> Check:
    listening = [
        endpoint
        for endpoint in endpoints
        if endpoint.get("status") == "enabled"
        and {"invoice.paid", "*"} & set(endpoint.get("enabled_events") or [])
    ]
    if listening:
        found = listening[0]
        detail = f"{found.get('id')} {found.get('url')} is enabled for invoice.paid"
        if len(listening) > 1:
            detail += f" (and {len(listening) - 1} more)"
        return Check(name="stripe-webhook", ok=True, detail=detail)
    seen = "; ".join(_described(endpoint) for endpoint in endpoints[:5])
    detail = (
        "no enabled webhook endpoint of this account is subscribed to invoice.paid "
        f"(endpoints: {seen or 'none'}); thin event destinations are not listed here"
    )
    return Check(name="stripe-webhook", ok=False, detail=detail)


def _described(endpoint: dict[str, Any]) -> str:
    events = ", ".join(sorted(endpoint.get("enabled_events") or []))
    return f"{endpoint.get('id')} {endpoint.get('status')} [{events}]"
