"""Stripe's API through the official library against the fake Stripe API (a real HTTP server):
errors in our words, bounded waits, Connect headers, and the receipt facts it adds."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from receipts.config import ConfigError, load_settings
from receipts.receipt.api_facts import MAX_PRODUCTS, PaymentMethod, TaxId
from receipts.receipt.payload import render_payload
from receipts.stripe_api.client import (
    BATCH,
    IN_REQUEST,
    ApiRefused,
    ApiUnavailable,
    Deadline,
    NotFound,
    OutOfTime,
    Scope,
    StripeApi,
)
from receipts.stripe_api.facts import enrich
from tests import stripe_events
from tests import stripe_objects as objects
from tests.fake_stripe_api import FakeStripeClient, running_fake_stripe_api
from tests.helpers import free_port
from tests.receipt_arithmetic import check_adds_up, read_text_part
from tests.receipt_examples import email, example, invoice_of, job, renderer

API_KEY = "rk_test_unit"


@pytest.fixture
def fake() -> Iterator[FakeStripeClient]:
    with running_fake_stripe_api(API_KEY) as client:
        yield client


def api(
    fake: FakeStripeClient, *, timing: object = BATCH, sleeps: list[float] | None = None
) -> StripeApi:
    recorded = sleeps if sleeps is not None else []
    return StripeApi(API_KEY, base=fake.url, timing=timing, sleep=recorded.append)  # type: ignore[arg-type]


def lookups(lookup: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "receipts_stripe_api_lookups_total", {"lookup": lookup, "outcome": outcome}
    )
    return value or 0.0


# --- the client ----------------------------------------------------------------------


def test_an_invoice_comes_back_as_the_json_stripe_sent(fake: FakeStripeClient) -> None:
    """The object is plain JSON, field for field, not a library object."""
    invoice = objects.invoice()
    fake.add(invoices=[invoice])
    found = api(fake).invoice(invoice["id"], Scope())
    assert found["id"] == invoice["id"] and found["lines"] == invoice["lines"]
    assert type(found) is dict and type(found["lines"]) is dict


def test_the_library_does_not_log_each_request(
    fake: FakeStripeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Our lines say what a call meant; the library's per-request INFO lines (with URLs)
    would double every webhook's log."""
    invoice = objects.invoice()
    fake.add(invoices=[invoice])
    with caplog.at_level(logging.INFO):
        api(fake).invoice(invoice["id"], Scope())
    assert [r for r in caplog.records if r.name.startswith("stripe")] == []


def test_connect_calls_name_the_account_as_the_library_does(fake: FakeStripeClient) -> None:
    """An account id goes out as Stripe-Account, a thin event's context as Stripe-Context."""
    invoice = objects.invoice()
    fake.add("acct_1Conn", invoices=[invoice])
    client = api(fake)
    client.invoice(invoice["id"], Scope(account="acct_1Conn"))
    client.invoice(invoice["id"], Scope(account="acct_1Conn", context="acct_1Conn"))
    first, second = fake.requests()
    assert first["stripe_account"] == "acct_1Conn" and first["stripe_context"] is None
    assert second["stripe_context"] == "acct_1Conn" and second["stripe_account"] is None
    with pytest.raises(NotFound):
        client.invoice(invoice["id"], Scope())


def test_a_missing_object_is_not_found_but_a_wrong_url_is_refused(fake: FakeStripeClient) -> None:
    """404 resource_missing means no such object; a 404 without it means a wrong API base."""
    with pytest.raises(NotFound):
        api(fake).invoice("in_1Nope", Scope())
    wrong_base = StripeApi(API_KEY, base=fake.url + "/not-stripe", timing=BATCH)
    with pytest.raises(ApiRefused):
        wrong_base.invoice("in_1Nope", Scope())


def test_a_wrong_key_is_refused_not_retried(fake: FakeStripeClient) -> None:
    """401 is a configuration error: ApiRefused, one request only."""
    wrong = StripeApi("rk_test_wrong", base=fake.url, timing=BATCH)
    with pytest.raises(ApiRefused, match="401"):
        wrong.invoice("in_1Any", Scope())
    assert len(fake.requests()) == 1


def test_an_unreachable_api_is_one_whole_sentence_without_its_url() -> None:
    """The library's own text stops mid-sentence on its first line and names the URL."""
    unreachable = StripeApi(API_KEY, base=f"http://127.0.0.1:{free_port()}", timing=IN_REQUEST)
    with pytest.raises(ApiUnavailable) as raised:
        unreachable.invoice("in_1Unreachable", Scope())
    message = str(raised.value)
    assert message == "APIConnectionError: Stripe's API could not be reached (ConnectionError)"


def test_stripes_message_is_kept_whole_and_a_long_one_cut_at_a_word(
    fake: FakeStripeClient,
) -> None:
    sentence = (
        "No such invoice: 'in_1Gone'; a similar object exists in live mode, but a test mode "
        "key was used to make this request."
    )
    fake.script({"status": 400, "message": sentence})
    with pytest.raises(ApiRefused) as raised:
        api(fake, timing=IN_REQUEST).invoice("in_1Gone", Scope())
    assert str(raised.value).endswith(sentence)
    fake.script({"status": 400, "message": "word " * 100})
    with pytest.raises(ApiRefused) as raised:
        api(fake, timing=IN_REQUEST).invoice("in_1Gone", Scope())
    assert str(raised.value).endswith("word …") and len(str(raised.value)) < 330


def test_5xx_is_retried_by_the_library_in_batch_and_not_in_a_request(
    fake: FakeStripeClient,
) -> None:
    """Batch calls ride out a short outage; a webhook request answers at once."""
    invoice = objects.invoice()
    fake.add(invoices=[invoice])
    fake.script({"status": 500}, {"status": 503})
    assert api(fake).invoice(invoice["id"], Scope())["id"] == invoice["id"]
    assert len(fake.requests()) == 3
    fake.script({"status": 500})
    with pytest.raises(ApiUnavailable):
        api(fake, timing=IN_REQUEST).invoice(invoice["id"], Scope())


def test_429_waits_for_retry_after_in_batch(fake: FakeStripeClient) -> None:
    """A rate limit is waited out for as long as Retry-After says, then the call goes on."""
    invoice = objects.invoice()
    fake.add(invoices=[invoice])
    fake.script({"status": 429, "headers": {"Retry-After": "7"}})
    sleeps: list[float] = []
    assert api(fake, sleeps=sleeps).invoice(invoice["id"], Scope())["id"] == invoice["id"]
    assert sleeps == [7.0]
    fake.script({"status": 429, "headers": {"Retry-After": "7"}})
    with pytest.raises(ApiUnavailable) as raised:
        api(fake, timing=IN_REQUEST).invoice(invoice["id"], Scope())
    assert raised.value.retry_after == 7.0


def test_timeouts_stay_within_ten_seconds() -> None:
    """No call may hang a process: connect and read are bounded in both timings."""
    for timing in (BATCH, IN_REQUEST):
        assert timing.connect <= 10 and timing.read <= 10


def test_event_pages_follow_starting_after_with_the_filters(fake: FakeStripeClient) -> None:
    """invoice.paid only, created in the window, undelivered only, newest first."""
    from tests import stripe_events

    made = [
        stripe_events.event(stripe_events.invoice(), event_id=f"evt_1Page{n}") for n in range(3)
    ]
    for n, event in enumerate(made):
        event["created"] = 1764460000 + n
        fake.add_event(event)
    delivered = stripe_events.event(event_id="evt_1Delivered")
    fake.add_event(delivered, delivered=True)
    fake.add_event(stripe_events.event(type="invoice.created", event_id="evt_1Other"))
    page = api(fake).invoice_paid_events(
        Scope(), since=1764460000, undelivered_only=True, starting_after="evt_1Page2"
    )
    assert [e["id"] for e in page.items] == ["evt_1Page1", "evt_1Page0"]
    query = fake.requests()[-1]["query"]
    assert query["delivery_success"] == "false" and query["type"] == "invoice.paid"
    assert query["created[gte]"] == "1764460000"


# --- the facts -------------------------------------------------------------------------


def test_payment_method_comes_from_the_invoice_payments_latest_charge(
    fake: FakeStripeClient,
) -> None:
    """Current API versions: invoice payment -> PaymentIntent -> latest charge -> card."""
    invoice = objects.invoice()
    fake.add(
        invoices=[invoice],
        customers=[objects.customer(preferred_locales=["fr-FR", "en"])],
        payment_intents=[objects.payment_intent("pi_1Card", "ch_1Card")],
        charges=[objects.charge("ch_1Card", brand="visa", last4="4242")],
        invoice_payments=[
            objects.invoice_payment(
                invoice["id"], {"type": "payment_intent", "payment_intent": "pi_1Card"}
            )
        ],
    )
    enriched = enrich(api(fake), invoice, Scope(), deadline=None)
    assert enriched.facts.payment_method == PaymentMethod(kind="card", brand="visa", last4="4242")
    assert enriched.facts.preferred_locales == ("fr-FR", "en")


def test_older_invoices_name_their_charge_directly(fake: FakeStripeClient) -> None:
    """Invoices rendered before 2025-03-31 carry `charge`; no invoice payments are listed."""
    invoice = objects.invoice() | {"charge": "ch_1Old"}
    fake.add(charges=[objects.charge("ch_1Old", brand="amex", last4="0005")])
    enriched = enrich(api(fake), invoice, Scope(), deadline=None)
    assert enriched.facts.payment_method == PaymentMethod(kind="card", brand="amex", last4="0005")
    assert not [r for r in fake.requests() if r["path"] == "/v1/invoice_payments"]


def test_a_payment_record_gives_its_own_details(fake: FakeStripeClient) -> None:
    """A payment recorded outside Stripe (payment record) still names its card."""
    invoice = objects.invoice()
    fake.add(
        payment_records=[objects.payment_record("pr_1Rec", brand="mastercard", last4="4444")],
        invoice_payments=[
            objects.invoice_payment(
                invoice["id"], {"type": "payment_record", "payment_record": "pr_1Rec"}
            )
        ],
    )
    method = enrich(api(fake), invoice, Scope(), deadline=None).facts.payment_method
    assert method == PaymentMethod(kind="card", brand="mastercard", last4="4444")


def test_every_line_is_fetched_when_the_payload_was_cut_short(fake: FakeStripeClient) -> None:
    """lines.has_more: the full list is fetched over several pages and handed to the
    receipt as a fact; the invoice itself (and so the fingerprint) keeps the payload's."""
    invoice = objects.invoice(lines=230, shown_lines=10, amount=23000)
    fake.add(invoices=[invoice])
    enriched = enrich(api(fake), {k: v for k, v in invoice.items() if k != "_all_lines"},
                      Scope(), deadline=None)  # fmt: skip
    all_lines = enriched.facts.all_lines
    assert all_lines is not None and len(all_lines) == 230
    assert sum(line["amount"] for line in all_lines) == 23000
    assert len(enriched.invoice["lines"]["data"]) == 10
    assert len([r for r in fake.requests() if r["path"].endswith("/lines")]) == 3


def test_the_time_budget_stops_the_lines_between_pages(fake: FakeStripeClient) -> None:
    """5,000 lines on a slow API must not hold a webhook for 50 pages: once the budget is
    spent (a clock past it after the first page) no further page is asked for, the look-up
    counts as skipped, and nothing is made of the lines found so far: OutOfTime."""
    invoice = objects.invoice(lines=230, shown_lines=10, amount=23000)
    fake.add(invoices=[invoice])
    readings = iter([0.0])  # the budget holds when the look-up starts, not after a page
    deadline = Deadline(at=60.0, clock=lambda: next(readings, 61.0))
    before = lookups("lines", "skipped")
    with pytest.raises(OutOfTime):
        enrich(api(fake), {k: v for k, v in invoice.items() if k != "_all_lines"},
               Scope(), deadline=deadline)  # fmt: skip
    assert len([r for r in fake.requests() if r["path"].endswith("/lines")]) == 1
    assert lookups("lines", "skipped") == before + 1


def test_the_customers_email_fills_a_snapshot_without_one(fake: FakeStripeClient) -> None:
    """No customer_email in the invoice: the customer's current email is used; a deleted
    or email-less customer leaves it empty."""
    invoice = objects.invoice(email=None, customer="cus_1Later")
    fake.add(customers=[objects.customer("cus_1Later", email="later@example.com")])
    assert enrich(api(fake), invoice, Scope(), deadline=None).invoice["customer_email"] == (
        "later@example.com"
    )
    nobody = objects.invoice(email=None, customer="cus_1NoMail")
    fake.add(customers=[objects.customer("cus_1NoMail", email=None)])
    assert enrich(api(fake), nobody, Scope(), deadline=None).invoice["customer_email"] is None


def test_a_failed_look_up_leaves_its_fact_out_and_is_counted(fake: FakeStripeClient) -> None:
    """The customer look-up fails: no locales, the rest still found, the failure counted."""
    invoice = objects.invoice()
    fake.add(
        customers=[objects.customer(preferred_locales=["de-DE"])],
        charges=[objects.charge("ch_1Ok")],
    )
    fake.script({"status": 500, "path": "/v1/customers"})
    before = lookups("customer", "failed")
    enriched = enrich(
        api(fake, timing=IN_REQUEST), invoice | {"charge": "ch_1Ok"}, Scope(), deadline=None
    )
    assert enriched.facts.preferred_locales == ()
    assert enriched.facts.payment_method is not None
    assert lookups("customer", "failed") == before + 1


def test_look_ups_past_the_deadline_are_not_made_and_counted(fake: FakeStripeClient) -> None:
    """A spent time budget makes no request at all, and no receipt facts: OutOfTime."""
    before = lookups("customer", "skipped")
    with pytest.raises(OutOfTime):
        enrich(api(fake), objects.invoice(), Scope(), deadline=Deadline(at=0.0))
    assert fake.requests() == []
    assert lookups("customer", "skipped") == before + 1


# --- settings ----------------------------------------------------------------------------


def test_the_api_key_and_base_are_read_and_checked() -> None:
    """STRIPE_API_KEY must be a secret or restricted key; STRIPE_API_BASE an http(s) URL."""
    settings = load_settings({"STRIPE_API_KEY": "rk_live_abc", "STRIPE_API_BASE": "http://x:1/"})
    assert settings.stripe_api_key == "rk_live_abc" and settings.stripe_api_base == "http://x:1"
    assert load_settings({}).stripe_api_base == "https://api.stripe.com"
    with pytest.raises(ConfigError, match=r"^STRIPE_API_KEY: .*rk_"):
        load_settings({"STRIPE_API_KEY": "pk_live_abc"})


@pytest.mark.parametrize("value", ["", "  ", ","])
def test_an_empty_webhook_secret_is_refused_with_the_reason(value: str) -> None:
    """What `$(stripe listen --print-secret)` gives without a login is refused, not ignored."""
    with pytest.raises(ConfigError, match=r"^STRIPE_WEBHOOK_SECRET: ") as raised:
        load_settings({"STRIPE_WEBHOOK_SECRET": value})
    assert "\n" not in str(raised.value)
    if not value.strip():
        assert "stripe login" in str(raised.value)


def test_receipts_dev_stops_at_start_on_an_empty_webhook_secret(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`receipts dev` says why in one line (exit 2) before starting anything."""
    from receipts.cli import main

    assert main(["dev", "--port", "8000"], {"STRIPE_WEBHOOK_SECRET": ""}) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("receipts: configuration error: STRIPE_WEBHOOK_SECRET: is set but empty")
    assert "\n" not in err


def test_deriving_a_receipt_does_not_load_the_stripe_library() -> None:
    """The receipt, its derivation and the API client's types import without the
    stripe package (and the HTTP clients it imports at load): a process that
    renders but never verifies a signature or calls the API does not carry it."""
    modules = (
        "receipts.ingest.deriving",
        "receipts.ingest.verification",
        "receipts.stripe_api.client",
        "receipts.stripe_api.facts",
    )
    result = subprocess.run(
        [sys.executable, "-c", f"import sys, {', '.join(modules)}; print('stripe' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "False"


# --- facts only the API has: the merchant's tax ids, product names, paid outside Stripe --------

ATELIER = "acct_1TExampleAtelier"


def test_the_merchants_tax_id_is_looked_up_in_the_invoices_own_account(
    fake: FakeStripeClient,
) -> None:
    """A reverse-charge invoice of a connected account names its VAT id only as txi_…:
    it is fetched with Stripe-Account, stored with the render input and shown beside the
    customer's; the platform has no such tax id."""
    event = example("invoice_paid_connect_eur")
    fake.add(ATELIER, tax_ids=[objects.tax_id("txi_1TExampleAtelierFR", value="FR40303265045")])
    enriched = enrich(api(fake), invoice_of("invoice_paid_connect_eur"), Scope(account=ATELIER),
                      deadline=None)  # fmt: skip
    assert enriched.facts.merchant_tax_ids == (TaxId(kind="eu_vat", value="FR40303265045"),)
    asked = [r for r in fake.requests() if r["path"] == "/v1/tax_ids/txi_1TExampleAtelierFR"]
    assert [r["stripe_account"] for r in asked] == [ATELIER]
    receipt = job(event, api_facts=enriched.facts)
    assert receipt.render_input["api_facts"]["merchant_tax_ids"] == [
        {"type": "eu_vat", "value": "FR40303265045"}
    ]
    text = render_payload(receipt.message_key, receipt.render_input, renderer())["text"]
    assert "Your tax ID: VAT DE123456789\nSeller's tax ID: VAT FR40303265045\n" in text
    german = render_payload(receipt.message_key, receipt.render_input, renderer("de_DE"))["text"]
    assert "Steuer-ID des Verkäufers: USt-IdNr. FR40303265045\n" in german
    assert enrich(api(fake), invoice_of("invoice_paid_connect_eur"), Scope(),
                  deadline=None).facts.merchant_tax_ids == ()  # fmt: skip


def test_expanded_tax_ids_need_no_look_up(fake: FakeStripeClient) -> None:
    invoice = invoice_of("invoice_paid_out_of_band")  # account_tax_ids expanded
    assert enrich(api(fake), invoice, Scope(), deadline=None).facts.merchant_tax_ids == ()
    assert not [r for r in fake.requests() if r["path"].startswith("/v1/tax_ids")]
    assert "Seller's tax ID: EIN 12-3456789\n" in email(example("invoice_paid_out_of_band"))["text"]


def test_a_line_without_a_description_is_named_by_its_product_looked_up_once(
    fake: FakeStripeClient,
) -> None:
    """pricing.price_details.product (basil and later): one request per distinct product, at
    most MAX_PRODUCTS per invoice; the names are stored with the render input."""
    invoice = objects.invoice(amount=3000, lines=3)
    products = ["prod_1Lamp", "prod_1Lamp", "prod_1Shade"]
    for line, product in zip(invoice["lines"]["data"], products, strict=True):
        line["description"] = None
        line["pricing"]["price_details"] = {"price": "price_1X", "product": product}
    fake.add(products=[objects.product("prod_1Lamp", "Desk lamp"),
                       objects.product("prod_1Shade", "Linen shade")])  # fmt: skip
    facts = enrich(api(fake), invoice, Scope(), deadline=None).facts
    assert dict(facts.product_names) == {"prod_1Lamp": "Desk lamp", "prod_1Shade": "Linen shade"}
    assert len([r for r in fake.requests() if r["path"].startswith("/v1/products/")]) == 2
    receipt = job(stripe_events.event(invoice), api_facts=facts)
    assert receipt.render_input["api_facts"]["product_names"]["prod_1Shade"] == "Linen shade"
    text = render_payload(receipt.message_key, receipt.render_input, renderer())["text"]
    assert "- Desk lamp: $10.00\n" in text and "- Linen shade: $10.00\n" in text
    assert "- Item:" not in text

    many = objects.invoice(amount=3000, lines=MAX_PRODUCTS + 5)
    for n, line in enumerate(many["lines"]["data"]):
        line["description"] = None
        line["pricing"]["price_details"] = {"price": "price_1X", "product": f"prod_1Many{n}"}
    fake.reset()
    enrich(api(fake), many, Scope(), deadline=None)
    assert len([r for r in fake.requests() if r["path"].startswith("/v1/products/")]) == 20


def test_a_basil_invoice_marked_paid_outside_stripe_says_so_with_a_key(
    fake: FakeStripeClient,
) -> None:
    """Since 2025-03-31.basil the event carries no paid_out_of_band and amount_paid counts
    the payment: its invoice payment, a payment record processed outside Stripe, says it."""
    event = example("invoice_paid_out_of_band_basil")
    invoice = invoice_of("invoice_paid_out_of_band_basil")
    payment = objects.invoice_payment(
        invoice["id"], {"type": "payment_record", "payment_record": "pr_1Wire"}
    ) | {"amount_paid": 10800, "amount_requested": 10800}
    fake.add(
        payment_records=[objects.off_stripe_record("pr_1Wire", amount=10800)],
        invoice_payments=[payment],
        tax_ids=[objects.tax_id("txi_1RExampleAcmeEIN01", kind="us_ein", value="12-3456789")],
    )
    facts = enrich(api(fake), invoice, Scope(), deadline=None).facts
    assert facts.paid_off_stripe == 10800
    assert len([r for r in fake.requests() if r["path"] == "/v1/payment_records/pr_1Wire"]) == 1
    text = email(event, api_facts=facts)["text"]
    assert "Your invoice ACME-0066 for $108.00 was marked as paid by Acme Tools, Inc.\n" in text
    assert "Marked as paid by Acme Tools, Inc.: -$108.00\nAmount charged: $0.00\n" in text
    check_adds_up(read_text_part(text, "usd"), total=10800, amount_paid=0)
    # Without a key the event cannot tell: the receipt says it was paid, nothing more.
    plain = email(event)["text"]
    assert "Thank you! Acme Tools, Inc. received your payment of $108.00." in plain
    assert "marked as paid" not in plain.lower()
    assert "Seller's tax ID: shown on the invoice\n" in plain


def test_a_card_payment_is_not_taken_for_one_made_outside_stripe(fake: FakeStripeClient) -> None:
    invoice = objects.invoice()
    fake.add(
        payment_intents=[objects.payment_intent("pi_1Card", "ch_1Card")],
        charges=[objects.charge("ch_1Card")],
        invoice_payments=[objects.invoice_payment(
            invoice["id"], {"type": "payment_intent", "payment_intent": "pi_1Card"})],
    )  # fmt: skip
    facts = enrich(api(fake), invoice, Scope(), deadline=None).facts
    assert facts.paid_off_stripe is None and facts.payment_method is not None
    assert len([r for r in fake.requests() if r["path"] == "/v1/invoice_payments"]) == 1
