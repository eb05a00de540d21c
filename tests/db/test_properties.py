"""Bad input, generated: the webhook answers 2xx or 4xx, never 5xx, never a traceback.

Every example goes through the real Flask app and a real database. Unsigned
or wrongly signed bodies must never leave a row behind; signed but malformed
events are refused with 400 or stored as a reviewable row, never half-stored.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from standardwebhooks import Webhook

from receipts.config import load_settings
from receipts.web import create_app
from tests import stripe_events
from tests.helpers import examples
from tests.resend_events import SECRET as RESEND_SECRET
from tests.stripe_events import TEST_SECRET, sign

Row = dict[str, Any]
Db = psycopg.Connection[Row]

# Function-scoped fixtures are shared by every example of a test on purpose:
# one database per test, with counts taken before and after each example.
EXAMPLES = settings(
    max_examples=examples(50),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Every float, NaN and the infinities included: Python's json writes them as
# NaN, Infinity and -Infinity, which are not JSON, and the webhooks must refuse
# such a body with a 4xx (receipts/ingest/strict_json.py), never a 5xx.
any_floats = st.floats()
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | any_floats
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)
# Strings JSON can carry but UTF-8 cannot: lone surrogates, NUL, control characters.
awkward_text = st.sampled_from(
    ["\ud800", "a\udfffb", "\x00", "in_\x00", "\u202e", "é" * 3, "x" * 200_000, "", " "]
) | st.text(alphabet=st.characters(codec=None), max_size=30)


def deliver(
    client: FlaskClient, body: bytes, signature: str | None, **headers: str
) -> tuple[int, bytes]:
    sent = dict(headers)
    if signature is not None:
        sent["Stripe-Signature"] = signature
    response = client.post("/webhooks/stripe", data=body, headers=sent)
    return response.status_code, response.get_data()


def row_counts(db: Db) -> tuple[int, int]:
    row = db.execute(
        "SELECT (SELECT count(*) FROM stripe_events) AS events,"
        " (SELECT count(*) FROM email_outbox) AS outbox"
    ).fetchone()
    assert row is not None
    return row["events"], row["outbox"]


def assert_answered_cleanly(status: int, body: bytes) -> None:
    assert status < 500, body[:500]
    assert status >= 200, body[:500]
    assert b"Traceback" not in body
    json.loads(body)  # every answer, refusal included, is a small JSON document


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a field of a decoded event, nested ones included."""
    if isinstance(value, dict):
        for name, inner in value.items():
            yield (*prefix, name)
            yield from paths(inner, (*prefix, name))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield (*prefix, index)
            yield from paths(inner, (*prefix, index))


SAMPLE_EVENT = stripe_events.event(stripe_events.invoice(id="in_1Sample"))
EVENT_PATHS = sorted(paths(SAMPLE_EVENT), key=repr)
DROP = object()


def mutated(path: tuple[Any, ...], replacement: Any, invoice_id: str) -> dict[str, Any]:
    event = copy.deepcopy(SAMPLE_EVENT)
    event["id"] = "evt_" + invoice_id
    event["data"]["object"]["id"] = invoice_id
    parent = event
    for step in path[:-1]:
        parent = parent[step]
    if replacement is DROP:
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return event


# Any header value HTTP can carry: no line breaks.
header_values = st.text(
    alphabet=st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=200
)


@given(body=st.binary(max_size=2048), header=st.none() | header_values)
@EXAMPLES
def test_unsigned_random_bytes_are_refused_and_store_nothing(
    client: FlaskClient, db: Db, body: bytes, header: str | None
) -> None:
    """Random bytes with no, or a made-up, signature: 4xx and no row."""
    before = row_counts(db)
    status, answer = deliver(client, body, header)
    assert_answered_cleanly(status, answer)
    assert 400 <= status < 500
    assert row_counts(db) == before


@given(value=json_values)
@EXAMPLES
def test_valid_looking_json_signed_with_an_unknown_secret_stores_nothing(
    client: FlaskClient, db: Db, value: Any
) -> None:
    """Any JSON, even a perfect event, signed with a secret we do not hold: 400, no row."""
    for document in (value, mutated(("type",), "invoice.paid", "in_1Foreign")):
        body = json.dumps(document).encode()
        before = row_counts(db)
        status, answer = deliver(client, body, sign(body, "whsec_someone_else"))
        assert_answered_cleanly(status, answer)
        assert status == 400
        assert row_counts(db) == before


@given(body=st.binary(max_size=2048))
@EXAMPLES
def test_signed_random_bytes_are_refused(client: FlaskClient, db: Db, body: bytes) -> None:
    """Correctly signed garbage (not UTF-8, not JSON, not an event) is a 400."""
    before = row_counts(db)
    status, answer = deliver(client, body, sign(body, TEST_SECRET))
    assert_answered_cleanly(status, answer)
    assert status == 400
    assert row_counts(db) == before


@given(value=json_values)
@EXAMPLES
def test_signed_random_json_never_fails_the_server(client: FlaskClient, db: Db, value: Any) -> None:
    """Correctly signed JSON of any shape: 2xx or 4xx, never 5xx."""
    for ensure_ascii in (True, False):
        try:
            body = json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8")
        except UnicodeEncodeError:
            body = json.dumps(value).encode()
        status, answer = deliver(client, body, sign(body, TEST_SECRET))
        assert_answered_cleanly(status, answer)


@given(
    path=st.sampled_from(EVENT_PATHS),
    replacement=st.just(DROP) | json_values | awkward_text,
    serial=st.integers(min_value=0, max_value=10**9),
)
@EXAMPLES
def test_events_with_a_missing_null_or_mistyped_field_never_fail_the_server(
    client: FlaskClient, db: Db, path: tuple[Any, ...], replacement: Any, serial: int
) -> None:
    """Any one field of an invoice.paid event, at any depth, missing, null, of
    the wrong type, huge or not encodable as UTF-8: 2xx or 4xx. A 2xx stores
    exactly one event row; a 4xx stores nothing."""
    event = mutated(path, replacement, f"in_1Prop{serial}")
    body = json.dumps(event).encode()  # ensure_ascii: lone surrogates become \\ud800 escapes
    events_before, _ = row_counts(db)
    status, answer = deliver(client, body, sign(body, TEST_SECRET))
    assert_answered_cleanly(status, answer)
    events_after, _ = row_counts(db)
    if status == 200:
        assert events_after - events_before in (0, 1)  # 0 when the event id repeats
    else:
        assert events_after == events_before


# Out of the 300 s tolerance by 5 s at least: the signature's timestamp is whole
# seconds, and the request is checked a moment after it was signed, so a
# timestamp 301 s ahead is sometimes no more than 300 s ahead when it is checked
# (the exact boundary is tested with a margin in test_web.py).
OUT_OF_TOLERANCE = [-10_000, -305, 305, 10_000]


@given(
    stamp_offset=st.sampled_from(OUT_OF_TOLERANCE) | st.integers(-299, 299),
    prefix=st.sampled_from(["", "t=abc,", "v0=deadbeef,", "v1=,", " ", "t=1,t=2,"]),
    suffix=st.sampled_from(["", ",v1=00", ",v1=zz", ",", ",x=y", "\t"]),
    content_type=st.sampled_from(
        ["application/json", "text/plain", "", "application/x-www-form-urlencoded"]
    ),
)
@EXAMPLES
def test_signature_header_variants_never_fail_the_server(
    client: FlaskClient,
    db: Db,
    stamp_offset: int,
    prefix: str,
    suffix: str,
    content_type: str,
) -> None:
    """Stale, future, padded, duplicated or extended signature headers and odd
    content types: only a fresh valid v1 signature stores anything, and a
    timestamp more than 300 s away, in the past or the future, is refused."""
    event = stripe_events.event()
    body = json.dumps(event).encode()
    header = prefix + sign(body, TEST_SECRET, timestamp=int(time.time()) + stamp_offset) + suffix
    before = row_counts(db)
    status, answer = deliver(client, body, header, **{"Content-Type": content_type})
    assert_answered_cleanly(status, answer)
    if status != 200:
        assert row_counts(db) == before
    if abs(stamp_offset) > 300:  # stale, or from a clock (or a forger) too far ahead
        assert status == 400


def test_body_over_the_limit_is_413_and_stores_nothing(client: FlaskClient, db: Db) -> None:
    """A correctly signed body larger than RECEIPTS_MAX_BODY_BYTES: 413, no row."""
    event = stripe_events.event(stripe_events.invoice(customer_name="x" * 2_000_000))
    body = json.dumps(event).encode()
    status, answer = deliver(client, body, sign(body, TEST_SECRET))
    assert status == 413
    assert b"Traceback" not in answer
    assert row_counts(db) == (0, 0)


# --- signed events with random values, through the real endpoint ----------------

_serials = itertools.count(1)
invoice_texts = awkward_text | st.text(max_size=60)


def mostly(usual: Any, unusual: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The usual value five times in six, so that most events get far enough
    for the unusual value of another field to matter."""
    return st.integers(0, 5).flatmap(lambda n: unusual if n == 5 else st.just(usual))


amounts = st.integers(0, 3).flatmap(
    lambda n: (
        st.just(1999),
        st.sampled_from([0, 1, 99_999_999, 10**12, 2**63, 10**28, -(10**28), 10**400]),
        st.integers(min_value=-(10**30), max_value=10**30),
        any_floats | invoice_texts | st.none(),
    )[n]
)
emails = mostly(
    "jenny.rosen@example.com",
    st.sampled_from(
        [
            " JENNY@Example.com ",
            "a@b",
            "x@[b.com",
            "=?utf-8?q?evil=40evil.example=2C?=@example.com",
            "a@b.example\nBcc: c@d.example",
        ]
    )
    | st.emails()
    | invoice_texts
    | st.none(),
)
hosted_urls = mostly(
    "https://invoice.stripe.com/i/acct_1Test/test_x?s=ap",
    st.sampled_from(
        [
            "https://pay.stripe.com/invoice/acct_1Test/test_x",
            "https://evil.example\\@invoice.stripe.com/i/x",
            "https://invoice.stripe.com/i/x\nURGENT: https://evil.example/refund",
            "http://invoice.stripe.com/i/x",
            "https://invoice.stripe.com:444/i/x",
        ]
    )
    | invoice_texts
    | st.none(),
)
currencies = mostly("usd", st.sampled_from(["eur", "jpy", "bhd", "USD", "usd\n", "xx", ""]))
statuses = mostly("paid", st.sampled_from(["open", "void"]) | invoice_texts)
event_types = mostly("invoice.paid", st.sampled_from(["invoice.created", "customer.created"]))
invoice_ids = st.sampled_from(["in_1PropShared", "in_1PropOther"]) | st.integers(1, 10**12).map(
    lambda n: f"in_1PropRandom{n}"
)


@st.composite
def signed_invoice_events(draw: st.DrawFn) -> dict[str, Any]:
    """An invoice event with random, often absurd values; ids repeat now and then,
    so duplicates and conflicts of the same key occur too."""
    invoice = stripe_events.invoice(
        id=draw(invoice_ids),
        amount_paid=draw(amounts),
        total=draw(amounts),
        currency=draw(currencies),
        customer_email=draw(emails),
        customer_name=draw(mostly("Jenny Rosen", invoice_texts | st.none())),
        number=draw(mostly("ABC-0001", invoice_texts | st.none())),
        hosted_invoice_url=draw(hosted_urls),
        invoice_pdf=draw(hosted_urls),
        lines=draw(mostly(None, json_values)),
        status=draw(statuses),
        status_transitions=draw(
            st.none() | st.fixed_dictionaries({"paid_at": st.integers(-(2**70), 2**70)})
        ),
        metadata=draw(json_values),
    )
    return stripe_events.event(
        invoice,
        type=draw(event_types),
        account=draw(st.none() | st.just("acct_1Prop")),
        livemode=draw(st.booleans()),
        event_id=f"evt_1Prop{draw(st.integers(1, 10**12))}",
    )


def paid(**values: Any) -> dict[str, Any]:
    """A paid invoice event, usual but for ``values``: explicit examples of the
    absurd values that once answered 500, run on every test run."""
    return stripe_events.event(stripe_events.invoice(**values))


@given(event=signed_invoice_events())
@example(event=paid(amount_paid=10**28))
@example(event=paid(amount_paid=10**400, total=-(10**28)))
@example(event=paid(customer_name="\x00\ud800", number="\u202eABC"))
@example(event=paid(currency="usd\n"))
@EXAMPLES
def test_signed_random_invoice_events_never_fail_and_every_200_is_stored(
    client: FlaskClient, db: Db, event: dict[str, Any]
) -> None:
    """Correctly signed invoice events with random values (absurd amounts,
    control characters, odd addresses and links, repeated invoice ids) through
    the real endpoint: never a 5xx. Every 200 has its event row with the outcome
    it answered, and behind it exactly one outbox row for the key it names, or
    no key at all for an ignored event. A 4xx changes no event row."""
    body = json.dumps(event).encode()  # ensure_ascii: lone surrogates become \\ud800 escapes

    def recorded() -> dict[str, Any] | None:
        return db.execute(
            "SELECT outcome, deliveries FROM stripe_events WHERE event_id = %s", (event["id"],)
        ).fetchone()

    before = recorded()  # event ids may repeat across examples
    status, answer = deliver(client, body, sign(body, TEST_SECRET))
    assert_answered_cleanly(status, answer)
    after = recorded()
    if status != 200:
        assert after == before
        return
    document = json.loads(answer)
    assert after is not None and after["outcome"] == document["outcome"]
    if document["outcome"] == "ignored":
        assert document["message_key"] is None
        return
    rows = db.execute(
        "SELECT count(*) AS n FROM email_outbox WHERE message_key = %s",
        (document["message_key"],),
    ).fetchone()
    assert rows == {"n": 1}


@pytest.fixture
def resend_client(environ: dict[str, str]) -> Iterator[FlaskClient]:
    app = create_app(load_settings({**environ, "RESEND_WEBHOOK_SECRET": RESEND_SECRET}))
    yield app.test_client()
    app.extensions["receipts"].database.close()


resend_texts = awkward_text | st.text(max_size=40) | json_values


@given(
    event_type=mostly("email.delivered", st.sampled_from(["email.bounced", "email.sent"])
                      | resend_texts),
    email_id=mostly("re_prop_sent", resend_texts),
    tags=mostly({"message_key": "platform_test_in_1_invoice-paid"},
                st.fixed_dictionaries({"message_key": resend_texts}) | resend_texts),
    created_at=mostly("2026-11-30T01:00:00.000Z", resend_texts),
)  # fmt: skip
@example(event_type="email.delivered\x00", email_id="re_prop_sent", tags=None, created_at=None)
@example(event_type="email.bounced", email_id="re_\ud800", tags=None, created_at=None)
@example(event_type="email.bounced", email_id="re_x", tags={"message_key": "\x00"}, created_at=None)
@EXAMPLES
def test_signed_random_resend_events_never_fail_and_every_200_is_stored(
    resend_client: FlaskClient, db: Db, event_type: Any, email_id: Any, tags: Any, created_at: Any
) -> None:
    """Correctly signed Resend events whose type, email id, tags and time hold
    anything JSON can carry (NUL, lone surrogates, other types): never a 5xx.
    A 200 has exactly one stored event behind its svix-id; a 4xx stores none."""
    svix_id = f"msg_prop{next(_serials)}"
    document = {"type": event_type, "created_at": created_at,
                "data": {"email_id": email_id, "tags": tags}}  # fmt: skip
    body = json.dumps(document).encode()
    stamp = datetime.now(UTC)
    response = resend_client.post(
        "/webhooks/resend",
        data=body,
        headers={
            "svix-id": svix_id,
            "svix-timestamp": str(int(stamp.timestamp())),
            "svix-signature": Webhook(RESEND_SECRET).sign(svix_id, stamp, body.decode()),
        },
    )
    assert_answered_cleanly(response.status_code, response.get_data())
    stored = db.execute(
        "SELECT count(*) AS n FROM resend_events WHERE svix_id = %s", (svix_id,)
    ).fetchone()
    assert stored == {"n": 1 if response.status_code == 200 else 0}
