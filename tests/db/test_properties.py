"""Bad input, generated: the webhook answers 2xx or 4xx, never 5xx, never a traceback.

Every example goes through the real Flask app and a real database. Unsigned
or wrongly signed bodies must never leave a row behind; signed but malformed
events are refused with 400 or stored as a reviewable row, never half-stored.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import stripe_events
from tests.stripe_events import TEST_SECRET, sign

Row = dict[str, Any]
Db = psycopg.Connection[Row]

# Function-scoped fixtures are shared by every example of a test on purpose:
# one database per test, with counts taken before and after each example.
EXAMPLES = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
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


@given(
    stamp_offset=st.sampled_from([-10_000, -301, 301, 10_000]) | st.integers(-299, 299),
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
    content types: only a fresh valid v1 signature stores anything."""
    event = stripe_events.event()
    body = json.dumps(event).encode()
    header = prefix + sign(body, TEST_SECRET, timestamp=int(time.time()) + stamp_offset) + suffix
    before = row_counts(db)
    status, answer = deliver(client, body, header, **{"Content-Type": content_type})
    assert_answered_cleanly(status, answer)
    if status != 200:
        assert row_counts(db) == before
    if stamp_offset < -300:  # stale; Stripe's own check accepts clocks running ahead
        assert status == 400


def test_body_over_the_limit_is_413_and_stores_nothing(client: FlaskClient, db: Db) -> None:
    """A correctly signed body larger than RECEIPTS_MAX_BODY_BYTES: 413, no row."""
    event = stripe_events.event(stripe_events.invoice(customer_name="x" * 2_000_000))
    body = json.dumps(event).encode()
    status, answer = deliver(client, body, sign(body, TEST_SECRET))
    assert status == 413
    assert b"Traceback" not in answer
    assert row_counts(db) == (0, 0)
