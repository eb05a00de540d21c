"""Links and display text from the customer's side of an invoice, made safe to use."""

from __future__ import annotations

import pytest

from receipts.receipt.untrusted import is_stripe_hosted_url, one_line

HOSTS = ("invoice.stripe.com",)
PDF_HOSTS = ("pay.stripe.com", "invoice.stripe.com", "files.stripe.com")
PERSIAN_WITH_NON_JOINER = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"


@pytest.mark.parametrize(
    "url",
    [
        "https://invoice.stripe.com/i/acct_1Test/test_YWNjdF8x?s=ap",
        "https://invoice.stripe.com/i/acct_1Test/live_abc%2Fdef#top",
        "https://invoice.stripe.com/",
    ],
)
def test_a_plain_stripe_link_passes(url: str) -> None:
    """An https link whose host is exactly a Stripe host, as Stripe sends it."""
    assert is_stripe_hosted_url(url, HOSTS)


@pytest.mark.parametrize(
    "url",
    [
        # Python's urlsplit reads the host as invoice.stripe.com, browsers as evil.example.
        "https://evil.example\\@invoice.stripe.com/i/x",
        "https://evil.example\\invoice.stripe.com/i/x",
        "https://invoice.stripe.com\\@evil.example/i/x",
        # userinfo, in any spelling
        "https://evil.example@invoice.stripe.com/i/x",
        "https://user:pass@invoice.stripe.com/i/x",
        "https://invoice.stripe.com@evil.example/i/x",
        "https://invoice.stripe.com%40evil.example/i/x",
        # not exactly the host
        "https://invoice.stripe.com.evil.example/i/x",
        "https://invoice.stripe.com./i/x",
        "https://INVOICE.stripe.com/i/x",
        "https://invoice.stripe.com:443/i/x",
        "https://invoice.stripe.com:8443/i/x",
        "https://invoice%2Estripe.com/i/x",
        "https://xn--invoice-stripe.com/i/x",
        "https://invoice.stripe.com",
        "https://invoice.stripe.com?x=1",
        "https://invoice.stripe.com#x",
        # control characters, spaces, non-ASCII: browsers drop or rewrite them
        "https://invoice.stripe.com/i/x\nURGENT: call https://evil.example/refund",
        "https://invoice.stripe.com/i/x\r\n",
        "https://invoice.st\tripe.com/i/x",
        " https://invoice.stripe.com/i/x",
        "https://invoice.stripe.com/i/x ",
        "https://invoice.stripe.com/i/\u202ex",
        "https://invoice.stripe.com/i/\x00",
        "https://invo\u0131ce.stripe.com/i/x",  # a dotless i
        # other schemes and shapes
        "http://invoice.stripe.com/i/x",
        "HTTPS://invoice.stripe.com/i/x",
        "https:invoice.stripe.com/i/x",
        "https:/invoice.stripe.com/i/x",
        "https:///invoice.stripe.com/i/x",
        "//invoice.stripe.com/i/x",
        "javascript://invoice.stripe.com/%0aalert(1)",
        "https://[::1]/i/x",
        "https://invoice.stripe.com/" + "a" * 2048,
        "",
        None,
        7,
        ["https://invoice.stripe.com/i/x"],
    ],
)
def test_a_link_a_browser_could_read_otherwise_is_refused(url: object) -> None:
    """No userinfo, port, backslash, whitespace, control or non-ASCII character; the
    exact host; https only: what Python checks is what a browser opens."""
    assert not is_stripe_hosted_url(url, HOSTS)


def test_the_host_must_be_one_of_those_given() -> None:
    """The PDF link may be on any of Stripe's file hosts, and only those."""
    assert is_stripe_hosted_url("https://files.stripe.com/x.pdf", PDF_HOSTS)
    assert not is_stripe_hosted_url("https://files.stripe.com/x.pdf", HOSTS)
    assert not is_stripe_hosted_url("https://evil.example/x.pdf", PDF_HOSTS)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Jenny Rosen", "Jenny Rosen"),
        ("  Jenny   Rosen  ", "Jenny Rosen"),
        # a newline must not start its own paragraph in the text part
        (
            "Jenny\n\nURGENT: your card was charged twice, call https://evil.example/refund",
            "Jenny URGENT: your card was charged twice, call https://evil.example/refund",
        ),
        ("Jenny\r\nRosen", "Jenny Rosen"),
        ("Jenny\u2028Rosen\u2029", "Jenny Rosen"),
        ("Jenny\x85Rosen\x0b\x0c", "Jenny Rosen"),
        ("Jenny\tRosen", "Jenny Rosen"),
        # bidirectional overrides, embeddings, isolates and marks reorder the subject
        ("INV-\u202e1000\u202c", "INV-1000"),
        ("\u2067evil\u2069 \u202aa\u202b\u202d", "evil a"),
        ("a\u200eb\u200fc\u061cd", "abcd"),
        # invisible characters and controls
        ("Jen\u200bny\ufeff", "Jenny"),
        ("Jen\x00ny\x1b[31m\x7f", "Jenny[31m"),
        ("Jen\ud800ny", "Jenny"),
        ("Jen\U000e0041ny", "Jenny"),
        # joiners that scripts and emoji need are kept
        (PERSIAN_WITH_NON_JOINER, PERSIAN_WITH_NON_JOINER),
        ("\U0001f469\u200d\U0001f4bb Ada", "\U0001f469\u200d\U0001f4bb Ada"),
        ("Zoë Ŋ 東京 Müller", "Zoë Ŋ 東京 Müller"),
    ],
)
def test_display_text_is_one_line_without_bidi_controls(value: str, expected: str) -> None:
    """Line breaks and other controls become one space, bidi and invisible format
    characters go, runs of spaces collapse; letters of every script stay."""
    assert one_line(value) == expected


@pytest.mark.parametrize("value", [None, 7, ["a"], "", "   ", "\n\u202e\u200b"])
def test_display_text_that_is_empty_or_not_text_is_none(value: object) -> None:
    """Nothing to show: the template's fallback is used."""
    assert one_line(value) is None


def test_display_text_is_bounded() -> None:
    """Longer text is cut to the limit, with an ellipsis to say so."""
    assert one_line("x" * 500, limit=10) == "x" * 9 + "…"
    assert one_line("ab " * 10_000_000, limit=5) == "ab a…"
    assert one_line("abc", limit=3) == "abc"
