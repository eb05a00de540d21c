"""``receipts doctor``: each check passes on a healthy set-up and fails, saying why, when broken.

Real database, the fake Resend API (``GET /domains``) and the fake Stripe API
(``GET /v1/webhook_endpoints``), a real PgBouncer for the LISTEN check.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from receipts.cli import main
from receipts.migrations import load_migrations
from tests.fake_provider import FakeProviderClient, running_fake_provider
from tests.fake_stripe_api import FakeStripeClient, running_fake_stripe_api
from tests.helpers import free_port
from tests.least_privilege import apply_roles, drop_group_roles, logins, session_prefix
from tests.outbox_states import Db
from tests.pgbouncer import PgBouncer

RESEND_KEY = "re_doctor_key"
STRIPE_KEY = "rk_test_doctor"


def endpoint(**overrides: Any) -> dict[str, Any]:
    """A webhook endpoint as Stripe lists it."""
    return {
        "id": "we_1Doctor",
        "object": "webhook_endpoint",
        "url": "https://receipts.example.com/webhooks/stripe",
        "enabled_events": ["invoice.paid"],
        "status": "enabled",
        "livemode": False,
        "created": 1764460000,
        "api_version": None,
        "description": None,
        "metadata": {},
        **overrides,
    }


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


@pytest.fixture
def fake() -> Iterator[FakeProviderClient]:
    with running_fake_provider(api_key=RESEND_KEY) as client:
        client.set_domains([{"name": "example.com", "status": "verified"}])
        yield client


@pytest.fixture
def stripe_api() -> Iterator[FakeStripeClient]:
    with running_fake_stripe_api(STRIPE_KEY) as client:
        client.add(webhook_endpoints=[endpoint()])
        yield client


@pytest.fixture
def healthy(
    environ: dict[str, str],
    fake: FakeProviderClient,
    stripe_api: FakeStripeClient,
    tmp_path: Path,
) -> dict[str, str]:
    """Everything a deploy needs, set and right."""
    return {
        **environ,
        "RESEND_API_KEY": RESEND_KEY,
        "RESEND_API_URL": fake.url,
        "STRIPE_API_KEY": STRIPE_KEY,
        "STRIPE_API_BASE": stripe_api.url,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }


def doctor(env: dict[str, str], capsys: Any, *args: str) -> tuple[int, dict[str, tuple[bool, str]]]:
    """Exit code, and each check's (ok, detail) by name, read from the printed lines."""
    code = main(["doctor", *args], env)
    lines = capsys.readouterr().out.splitlines()
    checks = {}
    for line in lines[:-1]:
        status, rest = line.split(" ", 1)
        name, detail = rest.split(": ", 1)
        assert status in ("ok", "FAIL") and name not in checks, line
        checks[name] = (status == "ok", detail)
    return code, checks


def failed(checks: dict[str, tuple[bool, str]]) -> dict[str, str]:
    return {name: detail for name, (ok, detail) in checks.items() if not ok}


EVERY_CHECK = [
    "settings", "database", "migrations", "web-role", "worker-role", "operator-role", "pooling",
    "listen",
    "templates", "webhook-secret", "provider", "resend-key", "sending-domain", "stripe-key",
    "stripe-webhook",
]  # fmt: skip


def test_a_healthy_set_up_passes_every_check(healthy: dict[str, str], capsys: Any) -> None:
    """Every check, in order, ok; exit 0; --json says the same."""
    code, checks = doctor(healthy, capsys)
    assert failed(checks) == {} and code == 0
    assert list(checks) == EVERY_CHECK
    assert checks["sending-domain"][1] == "example.com is verified"
    assert checks["provider"][1] == (
        "resend: duplicate protection: idempotency key, kept 24 h; then its sent list is searched"
    )
    assert "we_1Doctor https://receipts.example.com/webhooks/stripe" in checks["stripe-webhook"][1]
    assert f"all {len(load_migrations())} applied" in checks["migrations"][1]
    assert main(["doctor", "--json"], healthy) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is True
    assert [check["name"] for check in document["checks"]] == EVERY_CHECK


def test_three_things_wrong_are_each_named(
    healthy: dict[str, str], fake: FakeProviderClient, tmp_path: Path, capsys: Any
) -> None:
    """A Jinja syntax error in a custom template, a key Resend refuses, no webhook secret:
    their checks fail (and the domain check, which the refused key cannot make), nothing
    else does, exit 1, and --json marks the same ones."""
    templates = tmp_path / "templates" / "invoice_paid"
    templates.mkdir(parents=True)
    (templates / "body.html").write_text("<p>Paid: {{ amount }</p>\n")
    broken = {
        **healthy,
        "RECEIPTS_TEMPLATE_DIR": str(tmp_path / "templates"),
        "RESEND_API_KEY": "re_notakey",
    }
    del broken["STRIPE_WEBHOOK_SECRET"]
    code, checks = doctor(broken, capsys, "--no-cache")
    assert code == 1
    problems = failed(checks)
    assert set(problems) == {"templates", "resend-key", "sending-domain", "webhook-secret"}
    assert "body.html line 1:" in problems["templates"]
    assert problems["resend-key"].startswith("Resend refused RESEND_API_KEY (HTTP 403")
    assert problems["sending-domain"] == "not checked: the key was not accepted"
    assert "not set" in problems["webhook-secret"]
    main(["doctor", "--json", "--no-cache"], broken)
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is False
    assert {c["name"] for c in document["checks"] if not c["ok"]} == set(problems)


def test_a_malformed_setting_is_reported_and_the_rest_still_checked(
    healthy: dict[str, str], capsys: Any
) -> None:
    """RECEIPTS_LOCALE=xx_Nowhere fails `settings`, names the variable, and every other
    check still runs with the default for it."""
    code, checks = doctor({**healthy, "RECEIPTS_LOCALE": "xx_Nowhere"}, capsys)
    assert code == 1
    assert failed(checks) == {"settings": "RECEIPTS_LOCALE: unknown locale 'xx_Nowhere'"}
    assert list(checks) == EVERY_CHECK


def test_an_unreachable_database_fails_the_database_check(
    healthy: dict[str, str], capsys: Any
) -> None:
    """Nothing listens on the port: one FAIL naming host, port and database, no password."""
    port = free_port()
    url = f"postgresql://postgres:secret@127.0.0.1:{port}/receipts"
    code, checks = doctor({**healthy, "DATABASE_URL": url}, capsys)
    assert code == 1
    problem = failed(checks)["database"]
    assert problem.startswith(f"cannot connect to 127.0.0.1:{port}/receipts:")
    assert "secret" not in problem
    assert "migrations" not in checks  # nothing to read without a database


def test_migrations_not_applied_or_unknown_fail(
    healthy: dict[str, str], empty_database_url: str, db: Db, capsys: Any
) -> None:
    """An empty database: none applied; one missing: named; one from a newer release:
    said so. Each with the command that fixes it."""
    _, checks = doctor({**healthy, "DATABASE_URL": empty_database_url}, capsys)
    assert failed(checks)["migrations"] == "none applied: run `receipts migrate`"
    db.execute("DELETE FROM schema_migrations WHERE version = 6")
    _, checks = doctor(healthy, capsys)
    assert failed(checks)["migrations"] == (
        "1 not applied: 006_lookups_and_history: run `receipts migrate`"
    )
    db.execute("INSERT INTO schema_migrations (version, name) VALUES (6, 'x'), (999, 'future')")
    _, checks = doctor(healthy, capsys)
    assert "does not know ([999])" in failed(checks)["migrations"]


@pytest.fixture
def role_urls(database_url: str, server_url: str) -> Iterator[dict[str, str]]:
    """Login roles of the three groups, under a prefix of this test's own."""
    prefix = session_prefix()
    apply_roles(database_url, prefix)
    try:
        with logins(database_url, prefix) as urls:
            yield urls
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            for group in ("web", "worker", "operator"):
                admin.execute(f'DROP OWNED BY "{prefix}_{group}"')
        drop_group_roles(server_url, prefix)


def test_each_process_role_is_checked_through_its_own_url(
    healthy: dict[str, str], role_urls: dict[str, str], capsys: Any
) -> None:
    """With per-process URLs for the least-privilege roles every role check passes; the
    worker's URL given to the web process fails web-role, naming what it lacks and
    what to do; a URL that cannot connect fails naming its variable."""
    per_process = {
        **healthy,
        "DATABASE_URL": role_urls["operator"],
        "RECEIPTS_WEB_DATABASE_URL": role_urls["web"],
        "RECEIPTS_WORKER_DATABASE_URL": role_urls["worker"],
    }
    code, checks = doctor(per_process, capsys)
    assert failed(checks) == {} and code == 0
    assert "(RECEIPTS_WEB_DATABASE_URL) may run all" in checks["web-role"][1]
    code, checks = doctor({**per_process, "RECEIPTS_WEB_DATABASE_URL": role_urls["worker"]}, capsys)
    problem = failed(checks)["web-role"]
    assert "(RECEIPTS_WEB_DATABASE_URL) lacks" in problem and "(ingest.sql: " in problem
    assert "member of <prefix>_web" in problem and set(failed(checks)) == {"web-role"}
    closed = f"postgresql://nobody@127.0.0.1:{free_port()}/receipts"
    code, checks = doctor({**per_process, "RECEIPTS_WORKER_DATABASE_URL": closed}, capsys)
    assert failed(checks)["worker-role"].startswith(
        "cannot connect with RECEIPTS_WORKER_DATABASE_URL:"
    )


def test_a_transaction_pooler_without_its_settings_fails_listen(
    healthy: dict[str, str], pgbouncer: PgBouncer, direct_database_url: str, capsys: Any
) -> None:
    """DATABASE_URL through PgBouncer (transaction mode) but RECEIPTS_DATABASE_POOLING not
    set: `pooling` sees two transactions of one connection on two server processes, a
    NOTIFY never reaches the LISTEN, so both fail and say what to set;
    with the pooling setting it passes (polling), and with DATABASE_DIRECT_URL too."""
    pooled = {**healthy, "DATABASE_URL": pgbouncer.url_for(direct_database_url)}
    pooled.pop("DATABASE_DIRECT_URL", None)
    pooled.pop("RECEIPTS_DATABASE_POOLING", None)
    _, checks = doctor(pooled, capsys)
    assert "RECEIPTS_DATABASE_POOLING=transaction" in failed(checks)["listen"]
    assert "goes through a transaction pooler" in failed(checks)["pooling"]
    _, checks = doctor({**pooled, "RECEIPTS_DATABASE_POOLING": "transaction"}, capsys)
    assert checks["listen"][0] and "polls instead of being woken" in checks["listen"][1]
    assert checks["pooling"] == (True, "a transaction pooler, as the setting says")
    direct = {**pooled, "RECEIPTS_DATABASE_POOLING": "transaction"}
    _, checks = doctor({**direct, "DATABASE_DIRECT_URL": direct_database_url}, capsys)
    assert failed(checks) == {}
    assert checks["listen"][1] == "a NOTIFY reaches a LISTEN on DATABASE_DIRECT_URL"


def test_a_template_that_cannot_render_fails(
    healthy: dict[str, str], tmp_path: Path, capsys: Any
) -> None:
    """A template naming a variable that does not exist compiles but cannot render."""
    templates = tmp_path / "templates" / "invoice_paid"
    templates.mkdir(parents=True)
    (templates / "subject.txt").write_text("Receipt {{ invoice.no_such_field }}\n")
    _, checks = doctor({**healthy, "RECEIPTS_TEMPLATE_DIR": str(templates.parent)}, capsys)
    assert "no_such_field" in failed(checks)["templates"]


def test_an_empty_webhook_secret_fails_settings_and_webhook_secret(
    healthy: dict[str, str], capsys: Any
) -> None:
    _, checks = doctor({**healthy, "STRIPE_WEBHOOK_SECRET": ""}, capsys)
    assert set(failed(checks)) == {"settings", "webhook-secret"}
    assert failed(checks)["webhook-secret"].startswith("STRIPE_WEBHOOK_SECRET is set but empty")


def test_resend_answers_each_fail_or_pass_as_they_should(
    healthy: dict[str, str], fake: FakeProviderClient, capsys: Any
) -> None:
    """Domain not in the account, domain pending, wrong RESEND_API_URL path, Resend
    unreachable, no key and no mail folder: each fails with its own detail; a key that
    may only send passes without a domain check; RECEIPTS_MAIL_DIR needs no key."""
    fake.set_domains([{"name": "other.example", "status": "verified"}])
    _, checks = doctor(healthy, capsys, "--no-cache")
    assert failed(checks) == {
        "sending-domain": "example.com (EMAIL_FROM) is not a domain of this Resend account "
        "(it has: other.example)"
    }
    fake.set_domains([{"name": "example.com", "status": "pending"}])
    _, checks = doctor(healthy, capsys, "--no-cache")
    assert failed(checks)["sending-domain"].startswith("example.com is pending at Resend")
    _, checks = doctor({**healthy, "RESEND_API_URL": fake.url + "/v0"}, capsys, "--no-cache")
    assert "HTTP 404" in failed(checks)["resend-key"]
    assert "is RESEND_API_URL right?" in failed(checks)["resend-key"]
    unreachable = {**healthy, "RESEND_API_URL": f"http://127.0.0.1:{free_port()}"}
    _, checks = doctor(unreachable, capsys, "--no-cache")
    assert failed(checks)["resend-key"].startswith("Resend did not answer")
    no_key = {k: v for k, v in healthy.items() if k != "RESEND_API_KEY"}
    _, checks = doctor(no_key, capsys)
    assert "RESEND_API_KEY is not set" in failed(checks)["resend-key"]
    _, checks = doctor({**no_key, "RECEIPTS_MAIL_DIR": "/tmp/mail"}, capsys)
    assert checks["resend-key"] == (True, "not used: mail goes to .eml files in /tmp/mail")
    fake.set_domains([], restricted_keys=[RESEND_KEY])
    _, checks = doctor(healthy, capsys, "--no-cache")
    assert failed(checks) == {}
    assert "may only send (restricted_api_key)" in checks["sending-domain"][1]


def test_resends_answer_is_cached_for_an_hour(
    healthy: dict[str, str], fake: FakeProviderClient, capsys: Any
) -> None:
    """A second run answers from the cache (the domain turned pending meanwhile is not
    seen, and the line says the answer is cached); --no-cache asks again."""
    _, checks = doctor(healthy, capsys)
    assert checks["sending-domain"] == (True, "example.com is verified")
    fake.set_domains([{"name": "example.com", "status": "pending"}])
    _, checks = doctor(healthy, capsys)
    assert checks["sending-domain"] == (True, "example.com is verified (answer cached 0 min ago)")
    _, checks = doctor(healthy, capsys, "--no-cache")
    assert "pending" in failed(checks)["sending-domain"]
    cached = list(Path(healthy["XDG_CACHE_HOME"], "receipts").iterdir())
    assert len(cached) == 1 and RESEND_KEY not in cached[0].read_text()


def test_stripe_answers_each_fail_as_they_should(
    healthy: dict[str, str], stripe_api: FakeStripeClient, capsys: Any
) -> None:
    """A key Stripe refuses fails both Stripe checks; a key that may not list endpoints
    (403) passes stripe-key and fails stripe-webhook; no endpoint for invoice.paid (or
    only a disabled one) fails stripe-webhook listing what there is; no key is fine."""
    _, checks = doctor({**healthy, "STRIPE_API_KEY": "rk_test_wrong"}, capsys)
    assert failed(checks)["stripe-key"].startswith("Stripe refused STRIPE_API_KEY: HTTP 401")
    assert set(failed(checks)) == {"stripe-key", "stripe-webhook"}
    stripe_api.script({"status": 403, "path": "/v1/webhook_endpoints"})
    _, checks = doctor(healthy, capsys)
    assert set(failed(checks)) == {"stripe-webhook"}
    assert "Webhook Endpoints: Read" in failed(checks)["stripe-webhook"]
    stripe_api.reset()
    stripe_api.add(
        webhook_endpoints=[
            endpoint(id="we_1Other", enabled_events=["customer.created"]),
            endpoint(id="we_1Off", status="disabled"),
        ]
    )
    _, checks = doctor(healthy, capsys)
    problem = failed(checks)["stripe-webhook"]
    assert problem.startswith("no enabled webhook endpoint of this account is subscribed")
    assert "we_1Other enabled [customer.created]" in problem
    assert "we_1Off disabled [invoice.paid]" in problem
    no_key = {k: v for k, v in healthy.items() if k != "STRIPE_API_KEY"}
    _, checks = doctor(no_key, capsys)
    assert failed(checks) == {}
