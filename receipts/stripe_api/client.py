"""Read Stripe's API through the official library, with bounded time and errors in our words.

Every call goes through one ``stripe.StripeClient`` built with
``base_addresses={"api": STRIPE_API_BASE}``, its own HTTP timeouts (never more
than 10 s to read) and the library's network retries. A Connect account is
named the way the library does it: ``stripe_context`` for what a thin event's
``context`` names, ``stripe_account`` for an account given by id.

Failures become three exceptions: :class:`ApiUnavailable` (network, timeout,
5xx, 429: try again later), :class:`ApiRefused` (the key is wrong or lacks a
permission, or the request is one Stripe will never accept: a person must act)
and :class:`NotFound` (no such object in that account). A 429 carries Stripe's
``Retry-After``; batch commands wait for it (capped), a webhook request does not.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from receipts.config import Settings

if TYPE_CHECKING:
    # Imported where a client is built or an error read: a process that only
    # imports this module for its types (the worker, most commands) never
    # loads the library, nor the HTTP clients it imports with itself.
    import stripe

# The longest a batch command waits for a 429's Retry-After before one more try.
MAX_RETRY_AFTER_SECONDS = 60.0
PAGE_SIZE = 100

Json = dict[str, Any]
T = TypeVar("T")


class ApiError(Exception):
    """A call to Stripe's API did not give us the object."""


class ApiUnavailable(ApiError):
    """Stripe could not be reached or answered 5xx or 429: worth trying again later."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ApiRefused(ApiError):
    """Stripe refused the key or the request: retrying will not help, a person must act."""


class NotFound(ApiError):
    """The object does not exist in the account the request named."""


class OutOfTime(ApiError):
    """A look-up, or a list's next page, was due after the caller's deadline: it was not
    asked for."""


@dataclass(frozen=True)
class Deadline:
    """A moment on a monotonic clock after which no further request starts."""

    at: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(at=clock() + seconds, clock=clock)

    def passed(self) -> bool:
        return self.clock() >= self.at


@dataclass(frozen=True, kw_only=True)
class Scope:
    """Whose data a call reads: the platform, or one Connect account."""

    account: str = "platform"  # "platform" or acct_…
    context: str | None = None  # a thin event's context, passed on as Stripe-Context

    def options(self) -> stripe.RequestOptions:
        if self.context:
            return {"stripe_context": self.context}
        if self.account != "platform":
            return {"stripe_account": self.account}
        return {}


PLATFORM = Scope()


@dataclass(frozen=True, kw_only=True)
class Timing:
    """How long one call may take, and how hard to try."""

    connect: float
    read: float
    network_retries: int  # the library's own retries: connection errors, 409, 5xx
    rate_limit_waits: int  # 429s waited out (Retry-After) before giving up


# Inside a webhook request: Stripe is waiting for our answer, so one quick try.
IN_REQUEST = Timing(connect=2.0, read=5.0, network_retries=0, rate_limit_waits=0)
# Commands and sweeps: nobody waits on a single call.
BATCH = Timing(connect=5.0, read=10.0, network_retries=2, rate_limit_waits=5)


@dataclass(frozen=True, kw_only=True)
class Page:
    """One page of a list: its objects, newest first, and whether more follow."""

    items: list[Json]
    has_more: bool


class StripeApi:
    """The few reads the product makes, each returning the object's plain JSON."""

    def __init__(
        self,
        api_key: str,
        *,
        base: str = "https://api.stripe.com",
        timing: Timing = BATCH,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # The library logs every request and response, with its URL, at INFO;
        # our own log lines say what each call meant and when one failed.
        logging.getLogger("stripe").setLevel(logging.WARNING)
        import stripe

        http = stripe.RequestsClient(timeout=(timing.connect, timing.read))
        self.client = stripe.StripeClient(
            api_key,
            base_addresses={"api": base},
            max_network_retries=timing.network_retries,
            http_client=http,
        )
        self._timing = timing
        self._sleep = sleep

    @classmethod
    def from_settings(cls, settings: Settings, timing: Timing = BATCH) -> StripeApi | None:
        """The API as configured, or None without STRIPE_API_KEY."""
        if settings.stripe_api_key is None:
            return None
        return cls(settings.stripe_api_key, base=settings.stripe_api_base, timing=timing)

    # --- single objects -----------------------------------------------------------

    def invoice(self, invoice_id: str, scope: Scope) -> Json:
        return self._call(
            lambda: self.client.v1.invoices.retrieve(invoice_id, options=scope.options())
        )

    def customer(self, customer_id: str, scope: Scope) -> Json:
        return self._call(
            lambda: self.client.v1.customers.retrieve(customer_id, options=scope.options())
        )

    def charge(self, charge_id: str, scope: Scope) -> Json:
        return self._call(
            lambda: self.client.v1.charges.retrieve(charge_id, options=scope.options())
        )

    def payment_intent(self, payment_intent_id: str, scope: Scope) -> Json:
        """A PaymentIntent with its latest charge expanded (where the card details are)."""
        return self._call(
            lambda: self.client.v1.payment_intents.retrieve(
                payment_intent_id, {"expand": ["latest_charge"]}, options=scope.options()
            )
        )

    def payment_record(self, payment_record_id: str, scope: Scope) -> Json:
        return self._call(
            lambda: self.client.v1.payment_records.retrieve(
                payment_record_id, options=scope.options()
            )
        )

    def tax_id(self, tax_id: str, scope: Scope) -> Json:
        """An account's or customer's tax id (``GET /v1/tax_ids/{id}``): its type and value."""
        return self._call(lambda: self.client.v1.tax_ids.retrieve(tax_id, options=scope.options()))

    def product(self, product_id: str, scope: Scope) -> Json:
        return self._call(
            lambda: self.client.v1.products.retrieve(product_id, options=scope.options())
        )

    def credit_note(self, credit_note_id: str, scope: Scope) -> Json:
        return self._call(
            lambda: self.client.v1.credit_notes.retrieve(credit_note_id, options=scope.options())
        )

    # --- lists ----------------------------------------------------------------------

    def refunds_of_charge(self, charge_id: str, scope: Scope) -> list[Json]:
        """The charge's refunds (``GET /v1/refunds?charge=``), newest first: API versions
        since 2022-11-15 leave them out of the charge itself."""
        pages = self._pages(
            lambda after: self.client.v1.refunds.list(
                _page_params({"charge": charge_id}, after), options=scope.options()
            )
        )
        return [refund for page in pages for refund in page.items]

    def invoice_payments_of_payment_intent(self, payment_intent_id: str, scope: Scope
                                           ) -> list[Json]:  # fmt: skip
        """The invoice payments a PaymentIntent paid: on API versions since
        2025-03-31.basil the way from a charge to its invoice."""
        params: Any = {
            "payment": {"type": "payment_intent", "payment_intent": payment_intent_id},
            "limit": 10,
        }
        page = self._list(
            lambda: self.client.v1.invoice_payments.list(params, options=scope.options())
        )
        return page.items

    def credit_notes_of_invoice(self, invoice_id: str, scope: Scope) -> list[Json]:
        """Every credit note issued on an invoice (``GET /v1/credit_notes?invoice=``)."""
        pages = self._pages(
            lambda after: self.client.v1.credit_notes.list(
                _page_params({"invoice": invoice_id}, after), options=scope.options()
            )
        )
        return [note for page in pages for note in page.items]

    def invoice_lines(
        self, invoice_id: str, scope: Scope, *, deadline: Deadline | None = None
    ) -> list[Json]:
        """Every line of an invoice, however many pages; OutOfTime past ``deadline``,
        checked before each page after the first."""
        lines: list[Json] = []
        for page in self._pages(
            lambda after: self.client.v1.invoices.line_items.list(
                invoice_id, _page_params({}, after), options=scope.options()
            ),
            deadline=deadline,
        ):
            lines.extend(page.items)
        return lines

    def invoice_payments(self, invoice_id: str, scope: Scope) -> list[Json]:
        """The invoice's paid payments (API versions from 2025-03-31 keep them here)."""
        page = self._list(
            lambda: self.client.v1.invoice_payments.list(
                {"invoice": invoice_id, "status": "paid", "limit": 10}, options=scope.options()
            )
        )
        return page.items

    def invoice_paid_events(
        self, scope: Scope, *, since: int, undelivered_only: bool, starting_after: str | None
    ) -> Page:
        """One page of ``invoice.paid`` events created since ``since`` (unix seconds)."""
        params: dict[str, Any] = {"type": "invoice.paid", "created": {"gte": since}}
        if undelivered_only:
            params["delivery_success"] = False
        return self._list(
            lambda: self.client.v1.events.list(
                _page_params(params, starting_after), options=scope.options()
            )
        )

    def paid_invoices(self, scope: Scope, *, since: int, starting_after: str | None) -> Page:
        """One page of paid invoices created since ``since`` (unix seconds)."""
        params: dict[str, Any] = {"status": "paid", "created": {"gte": since}}
        return self._list(
            lambda: self.client.v1.invoices.list(
                _page_params(params, starting_after), options=scope.options()
            )
        )

    def webhook_endpoints(self) -> list[Json]:
        """Every webhook endpoint of the key's account (``receipts doctor``)."""
        listed = self.client.v1.webhook_endpoints.list
        pages = self._pages(lambda after: listed(_page_params({}, after)))
        return [endpoint for page in pages for endpoint in page.items]

    def _pages(
        self, fetch: Callable[[str | None], Any], *, deadline: Deadline | None = None
    ) -> Iterator[Page]:
        after: str | None = None
        while True:
            if after is not None and deadline is not None and deadline.passed():
                raise OutOfTime("the time budget ran out before the list's last page")
            page = self._list(functools.partial(fetch, after))
            yield page
            if not page.has_more or not page.items:
                return
            after = page.items[-1]["id"]

    # --- the one place a call is made ------------------------------------------------

    def _list(self, call: Callable[[], Any]) -> Page:
        document = self._call(call)
        items = document.get("data")
        return Page(
            items=[item for item in items if isinstance(item, dict)]
            if isinstance(items, list)
            else [],
            has_more=document.get("has_more") is True,
        )

    def _call(self, call: Callable[[], Any]) -> Json:
        """Run one request; wait out 429s as the timing allows; translate failures."""
        import stripe

        waits = 0
        while True:
            try:
                return plain_json(call())
            except stripe.RateLimitError as exc:
                retry_after = _retry_after(exc.headers)
                if waits >= self._timing.rate_limit_waits:
                    raise ApiUnavailable(_describe(exc), retry_after=retry_after) from exc
                waits += 1
                self._sleep(min(retry_after or 2.0**waits, MAX_RETRY_AFTER_SECONDS))
            except stripe.StripeError as exc:
                raise translate(exc) from exc


def translate(error: stripe.StripeError) -> ApiError:
    """Our meaning of one of the library's errors."""
    import stripe

    message = _describe(error)
    if isinstance(error, stripe.APIConnectionError | stripe.RateLimitError):
        return ApiUnavailable(message)
    status = error.http_status
    if (
        isinstance(error, stripe.InvalidRequestError)
        and status == 404
        and (error.code == "resource_missing")
    ):
        return NotFound(message)
    if status is None or status >= 500 or status in (409, 429):
        return ApiUnavailable(message)
    # 401/403 (key), 400 (a request Stripe will never accept), a 404 without
    # Stripe's error body (STRIPE_API_BASE points somewhere else).
    return ApiRefused(message)


def _describe(error: stripe.StripeError) -> str:
    """One line: status, Stripe's error code and whole message (no key, no URL)."""
    import stripe

    parts = [f"HTTP {error.http_status}" if error.http_status else type(error).__name__]
    if error.code:
        parts.append(str(error.code))
    if isinstance(error, stripe.APIConnectionError):
        # The library's text names the URL, and its first line stops mid-sentence.
        cause = _NETWORK_ERROR.search(str(error))
        parts.append("Stripe's API could not be reached" + (f" ({cause[1]})" if cause else ""))
    else:
        text = " ".join((error.user_message or str(error) or "").split())
        if text:
            parts.append(_shortened(text, 300))
    return ": ".join(parts)


_NETWORK_ERROR = re.compile(r"Network error: (\w+)")


def _shortened(text: str, limit: int) -> str:
    """``text`` whole when it fits, else cut at a word and marked as cut."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " …"


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    raw = (headers or {}).get("Retry-After") or (headers or {}).get("retry-after")
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None


def _page_params(params: dict[str, Any], starting_after: str | None) -> Any:
    page: dict[str, Any] = {**params, "limit": PAGE_SIZE}
    if starting_after is not None:
        page["starting_after"] = starting_after
    return page


def plain_json(found: Any) -> Json:
    """The object exactly as the API sent it, as plain dicts and lists."""
    response = getattr(found, "last_response", None)
    body = getattr(response, "body", None)
    if isinstance(body, str):
        document = json.loads(body)
        if isinstance(document, dict):
            return document
    as_dict = found.to_dict() if hasattr(found, "to_dict") else found
    if not isinstance(as_dict, dict):
        raise ApiUnavailable(f"unexpected answer from Stripe: {type(found).__name__}")
    return as_dict
