"""A stateful property test: no order of webhooks, worker runs and operator decisions,
some of them at once, makes the provider accept a second email for one receipt.

Hypothesis drives a ``RuleBasedStateMachine`` over a real database, the real
Flask app (Stripe webhooks), the real worker (``run_worker``) and a worker
killed mid-run (claimed, perhaps sent, never recorded), against the fake
Resend API, and every review decision with and without its flags, alone or
several at once on one receipt and its resends (threads, released together
while a worker may run). After every step:

* per invoice and purpose (a receipt and its resends), the provider accepted
  at most one email, unless a decision of that family recorded that the person
  accepted the duplicate risk;
* no decision reported success for an effect that did not happen: a dismissed
  receipt is never sent afterwards (unless the dismissal was undone), and each
  success is checked at once (retried: pending; resent: the copy queued;
  resolved: sent; dismissed: dismissed); a refusal changed nothing;
* no decision took a row from a worker: no attempt lost its lease.

The default run is two examples of a dozen steps (a few seconds). A long run::

    RECEIPTS_DECISION_EXAMPLES=300 RECEIPTS_DECISION_STEPS=40 \\
        .venv/bin/pytest tests/db/test_decision_machine.py -n 0 -s --timeout 0

prints how many steps it ran. A race whose worker ran meanwhile may not replay
the same way; Hypothesis then reports the failure as flaky, after the
assertion that failed.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from psycopg.rows import dict_row

from receipts.config import Settings, load_settings
from receipts.delivery.claims import RenderPayload, claim_ready
from receipts.delivery.configured import provider_from_settings
from receipts.delivery.first_render import payload_renderer
from receipts.delivery.providers.base import Provider
from receipts.delivery.worker import run_worker
from receipts.operations.resending import resend
from receipts.operations.review import Decider, Refused
from receipts.operations.review_decisions import dismiss, resolve, retry
from tests import stripe_events
from tests.fake_provider import FakeProviderClient, running_fake_provider
from tests.helpers import wait_for
from tests.stripe_events import TEST_SECRET, encode, sign

Db = psycopg.Connection[dict[str, Any]]

EXAMPLES = int(os.environ.get("RECEIPTS_DECISION_EXAMPLES", "2"))
STEPS = int(os.environ.get("RECEIPTS_DECISION_STEPS", "12"))
INVOICES = ("in_1MachineA", "in_1MachineB")
RESEND_SUFFIX = re.compile(r"/resend-\d+\Z")
ANSWERS: dict[str, dict[str, Any]] = {
    "accept": {},
    "refuse": {"status": 422, "name": "validation_error"},
    "fail": {"status": 500, "name": "internal_server_error"},
    "no id": {"no_id": True},
}
DECISIONS = ("retry", "resend", "dismiss", "resolve")


def family(key: str) -> str:
    return RESEND_SUFFIX.sub("", key)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """One operator decision as the CLI would make it."""

    kind: str
    key: str
    accept_risk: bool = False
    undo_dismiss: bool = False
    to: str | None = None
    provider_id: str = "re_found_in_logs"

    @property
    def flagged(self) -> bool:
        return self.accept_risk or self.undo_dismiss


@dataclass(frozen=True, kw_only=True)
class Choice:
    """A decision as drawn, before the state is known: which key and which provider id
    are picked by position among those that exist when it runs. (What Hypothesis draws
    must not depend on the database, or a replay would draw differently.)"""

    kind: str
    key_index: int
    accept_risk: bool
    undo_dismiss: bool
    to: str | None
    id_index: int

    def made(self, keys: list[str], ids: list[str]) -> Decision:
        return Decision(
            kind=self.kind,
            key=keys[self.key_index % len(keys)],
            accept_risk=self.accept_risk,
            undo_dismiss=self.undo_dismiss,
            to=self.to,
            provider_id=ids[self.id_index % len(ids)],
        )


# A flag one time in five: mostly the plain decisions, whose guards are under test.
SOMETIMES = st.integers(0, 4).map(lambda n: n == 0)
CHOICES = st.builds(
    Choice,
    kind=st.sampled_from(DECISIONS),
    key_index=st.integers(0, 15),
    accept_risk=SOMETIMES,
    undo_dismiss=SOMETIMES,
    to=st.sampled_from([None, "right@example.com"]),
    id_index=st.integers(0, 7),
)


@dataclass
class World:
    """The parts every example shares: the database, the app, the provider, settings."""

    database_url: str
    db: Db
    client: FlaskClient
    fake: FakeProviderClient
    settings: Settings
    provider: Provider
    render: RenderPayload
    steps: int = 0
    examples: int = 0


def decide(world: World, decision: Decision) -> str | None:
    """Run one decision on a connection of its own; None on success, else the refusal."""
    decider = Decider(performed_by="operator", reason="the property test")
    with psycopg.connect(world.database_url, row_factory=dict_row) as conn:
        try:
            if decision.kind == "retry":
                retry(conn, decision.key, decider, retry_cutoff_hours=23,
                      accept_duplicate_risk=decision.accept_risk,
                      undo_dismiss=decision.undo_dismiss)  # fmt: skip
            elif decision.kind == "resend":
                resend(conn, decision.key, decider, to=decision.to,
                       accept_duplicate_risk=decision.accept_risk,
                       undo_dismiss=decision.undo_dismiss)  # fmt: skip
            elif decision.kind == "dismiss":
                dismiss(conn, decision.key, decider)
            else:
                resolve(conn, decision.key, decider, provider_id=decision.provider_id,
                        accept_duplicate_risk=decision.accept_risk,
                        undo_dismiss=decision.undo_dismiss)  # fmt: skip
        except Refused as refused:
            assert str(refused), "a refusal says why"
            return str(refused)
    return None


@dataclass(frozen=True, kw_only=True)
class Deliver:
    """Stripe delivers invoice.paid, with or without the customer's address; or redelivers."""

    invoice: str
    address: bool
    again: bool


@dataclass(frozen=True, kw_only=True)
class WorkerRun:
    """`receipts worker`: the provider gives these answers first, then accepts."""

    answers: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class KilledWorker:
    """A worker claims rows and dies: before the send, or after the provider accepted."""

    send: bool
    limit: int


@dataclass(frozen=True, kw_only=True)
class TimePasses:
    """Leases run out and retry delays pass."""


@dataclass(frozen=True, kw_only=True)
class Decides:
    """One person takes one decision."""

    choice: Choice


@dataclass(frozen=True, kw_only=True)
class Race:
    """Two to four decisions on one receipt at the same moment, perhaps with a worker."""

    key_index: int
    choices: tuple[Choice, ...]
    with_worker: bool


# What the provider answers a worker run's first sends (then it accepts): refusals
# most often, since they are what brings a receipt to a person.
ANSWER_LISTS = st.lists(
    st.sampled_from(["refuse", "accept", "refuse", "fail", "no id"]), max_size=3
).map(tuple)
STEP_KINDS: dict[str, st.SearchStrategy[Any]] = {
    "deliver": st.builds(
        Deliver, invoice=st.sampled_from(INVOICES), address=SOMETIMES.map(lambda n: not n),
        again=st.booleans(),
    ),
    "worker": st.builds(WorkerRun, answers=ANSWER_LISTS),
    "killed": st.builds(KilledWorker, send=st.booleans(), limit=st.integers(1, 2)),
    "later": st.just(TimePasses()),
    "decides": st.builds(Decides, choice=CHOICES),
    "race": st.builds(
        Race, key_index=st.integers(0, 15),
        choices=st.lists(CHOICES, min_size=2, max_size=4).map(tuple), with_worker=st.booleans(),
    ),
}  # fmt: skip
# One rule draws every step, so each kind keeps its weight in every example (separate
# rules would be switched off at random per example, and decisions would be rare).
WEIGHTS = {"decides": 4, "worker": 3, "race": 2, "deliver": 1, "killed": 1, "later": 1}
STEPS_DRAWN = st.sampled_from([kind for kind, n in WEIGHTS.items() for _ in range(n)]).flatmap(
    STEP_KINDS.__getitem__
)


class DecisionMachine(RuleBasedStateMachine):
    world: World  # set by the test before the machine runs

    def __init__(self) -> None:
        super().__init__()
        world = self.world
        world.examples += 1
        world.db.execute(
            "TRUNCATE email_outbox, email_attempts, operator_actions, stripe_events, resend_events"
        )
        world.fake.reset()
        self.dismissed: dict[str, int] = {}  # key -> deliveries when dismissed
        self.events: list[dict[str, Any]] = []

    @initialize(missing=st.lists(SOMETIMES, min_size=len(INVOICES), max_size=len(INVOICES)),
                answers=ANSWER_LISTS)  # fmt: skip
    def invoices_are_paid_and_a_worker_runs(
        self, missing: list[bool], answers: tuple[str, ...]
    ) -> None:
        """Every example starts with the invoices paid (now and then without an address)
        and one worker run, so that the steps after it find receipts to send and decide."""
        for invoice, no_address in zip(INVOICES, missing, strict=True):
            self.deliver(Deliver(invoice=invoice, address=not no_address, again=False))
        self.worker(WorkerRun(answers=answers))

    @rule(step=STEPS_DRAWN)
    def something_happens(self, step: Any) -> None:
        self.world.steps += 1
        handlers: dict[type, Callable[[Any], None]] = {
            Deliver: self.deliver, WorkerRun: self.worker, KilledWorker: self.killed,
            TimePasses: self.later, Decides: self.decides, Race: self.race,
        }  # fmt: skip
        handlers[type(step)](step)

    # --- what the world does ----------------------------------------------------

    def deliver(self, step: Deliver) -> None:
        if step.again and self.events:
            event = self.events[-1]
        else:
            data = stripe_events.invoice(id=step.invoice)
            if not step.address:
                data["customer_email"] = None
            event = stripe_events.event(data)
            self.events.append(event)
        body = encode(event)
        answer = self.world.client.post(
            "/webhooks/stripe", data=body, headers={"Stripe-Signature": sign(body, TEST_SECRET)}
        )
        assert answer.status_code == 200

    def worker(self, step: WorkerRun) -> None:
        self.world.fake.script(*(ANSWERS[answer] for answer in step.answers))
        summary = run_worker(self.world.settings, self.world.provider, concurrency=1)
        assert summary.error is None
        self.world.fake.clear_script()

    def killed(self, step: KilledWorker) -> None:
        with psycopg.connect(self.world.database_url, autocommit=True, row_factory=dict_row) as c:
            claim = claim_ready(
                c, limit=step.limit, worker_id="killed", lease_seconds=600,
                max_attempts=self.world.settings.max_attempts, retry_cutoff_hours=23,
                render=self.world.render,
            )  # fmt: skip
        for row in claim.rows if step.send else []:
            self.world.provider.send(row.message_key, row.payload)

    def later(self, step: TimePasses) -> None:
        # To their creation time, not to now(): rows then come up in the order they were
        # made, as they would, and each replay of a run claims them in the same order.
        self.world.db.execute(
            "UPDATE email_outbox SET locked_until = created_at WHERE status = 'processing'"
        )
        self.world.db.execute(
            "UPDATE email_outbox SET available_at = created_at "
            "WHERE status = 'pending' AND available_at > now()"
        )

    # --- what people decide -----------------------------------------------------

    def decides(self, step: Decides) -> None:
        """One decision, with or without its flags; a refusal must change nothing."""
        keys = self._keys()
        decision = step.choice.made(keys, self._provider_ids())
        before = self._snapshot()
        last_action = self._last_action_id()
        refused = decide(self.world, decision)
        if refused is not None:
            assert self._snapshot() == before, f"{decision} was refused but changed something"
            return
        self._check_effect(decision, before)
        self._follow_dismissals(last_action)

    def race(self, step: Race) -> None:
        """Decisions on one receipt and its resends, all started before any can lock its
        row (the test holds them), then let go at once: they queue for the locks and run
        one after the other in the order they came (PostgreSQL serves lock waiters first
        come, first served), so a replay runs the same race; perhaps a worker runs
        meanwhile. Unless one carries a flag, at most one wins, and only the winners
        leave actions behind."""
        keys = self._keys()
        chosen = keys[step.key_index % len(keys)]
        # The family's keys, those in review twice as likely (as in _keys); each decision
        # one place further along them, so a race spans the receipt and its resends.
        relatives = [key for key in keys if family(key) == family(chosen)]
        ids = self._provider_ids()
        decisions = [
            choice.made(relatives[i:] + relatives[:i], ids) for i, choice in enumerate(step.choices)
        ]
        actions_before = self._count("operator_actions")
        last_action = self._last_action_id()
        outcomes: dict[int, str | None] = {}
        failures: list[BaseException] = []

        def run(index: int, decision: Decision) -> None:
            try:
                outcomes[index] = decide(self.world, decision)
            except BaseException as failure:  # re-raised below, in the test's thread
                failures.append(failure)

        def work() -> None:
            try:
                run_worker(self.world.settings, self.world.provider, concurrency=1)
            except BaseException as failure:
                failures.append(failure)

        threads = [threading.Thread(target=run, args=item) for item in enumerate(decisions)]
        with psycopg.connect(self.world.database_url) as gate, gate.transaction():
            gate.execute(
                "SELECT 1 FROM email_outbox WHERE message_key = ANY(%s) FOR UPDATE",
                (sorted(set(relatives)),),
            )
            for waiting, thread in enumerate(threads, start=1):
                thread.start()
                wait_for(functools.partial(self._waiting_for_at_least, waiting), 30, "a decision")
        if step.with_worker:
            threads.append(threading.Thread(target=work))
            threads[-1].start()
        for thread in threads:
            thread.join(timeout=60)
        if failures:
            raise failures[0]
        assert len(outcomes) == len(decisions)
        won = [decisions[i] for i, refused in outcomes.items() if refused is None]
        if not any(decision.flagged for decision in decisions):
            assert len(won) <= 1, f"several decisions won a race on {set(relatives)}: {won}"
        expected = sum(2 if decision.kind == "resend" else 1 for decision in won)
        assert self._count("operator_actions") - actions_before == expected
        self._follow_dismissals(last_action)

    def _waiting_for_at_least(self, sessions: int) -> bool:
        return self._waiting_for_locks() >= sessions

    def _waiting_for_locks(self) -> int:
        """Sessions of this database waiting for a lock (each waits for one at a time)."""
        found = self.world.db.execute(
            "SELECT count(DISTINCT l.pid) AS n FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.datname = current_database()"
        ).fetchone()
        assert found is not None
        return int(found["n"])

    # --- the promise ------------------------------------------------------------

    @invariant()
    def at_most_one_email_per_receipt_unless_a_person_accepted_more(self) -> None:
        accepted = Counter(family(d["key"]) for d in self.world.fake.deliveries())
        risked = {
            family(row["message_key"])
            for row in self.world.db.execute(
                "SELECT message_key FROM operator_actions "
                "WHERE details ->> 'accepted_duplicate_risk' = 'true'"
            )
        }
        doubled = {key: n for key, n in accepted.items() if n > 1 and key not in risked}
        assert doubled == {}, f"second emails nobody accepted: {doubled}"

    @invariant()
    def a_dismissed_receipt_is_never_sent_afterwards(self) -> None:
        delivered = Counter(d["key"] for d in self.world.fake.deliveries())
        for key, count in self.dismissed.items():
            assert delivered[key] == count, f"{key} was dismissed, then sent"

    @invariant()
    def no_decision_took_a_row_from_a_worker(self) -> None:
        lost = self.world.db.execute(
            "SELECT count(*) AS n FROM email_attempts WHERE outcome = 'lease_lost'"
        ).fetchone()
        assert lost == {"n": 0}

    # --- helpers ----------------------------------------------------------------

    def _keys(self) -> list[str]:
        """Every key, those in review (where decisions apply) twice as likely."""
        rows = self.world.db.execute(
            "SELECT message_key, status FROM email_outbox ORDER BY message_key"
        ).fetchall()
        review = [row["message_key"] for row in rows if row["status"] == "review"]
        return review + review + [row["message_key"] for row in rows]

    def _provider_ids(self) -> list[str]:
        """What an operator could find in the provider's logs, and an id from elsewhere."""
        return ["re_found_in_logs"] + [d["id"] for d in self.world.fake.deliveries()]

    def _snapshot(self) -> tuple[list[dict[str, Any]], int]:
        rows = self.world.db.execute("SELECT * FROM email_outbox ORDER BY message_key").fetchall()
        return rows, self._count("operator_actions")

    def _count(self, table: str) -> int:
        found = self.world.db.execute(f"SELECT count(*) AS n FROM {table}").fetchone()
        assert found is not None
        return int(found["n"])

    def _row(self, key: str) -> dict[str, Any]:
        found = self.world.db.execute(
            "SELECT * FROM email_outbox WHERE message_key = %s", (key,)
        ).fetchone()
        assert found is not None, key
        return found

    def _check_effect(self, decision: Decision, before: tuple[list[dict[str, Any]], int]) -> None:
        """What the decision said it did is what the rows show; it acted on a row nobody held."""
        earlier = {row["message_key"]: row for row in before[0]}[decision.key]
        after = self._row(decision.key)
        if decision.kind == "resend":
            assert earlier["status"] in ("review", "sent"), earlier["status"]
            new_key = after["resent_as"]
            assert new_key is not None and new_key not in {row["message_key"] for row in before[0]}
            copy = self._row(new_key)
            assert copy["status"] == "pending"
            if decision.to is not None:
                assert copy["customer_email"] == decision.to
        else:
            assert earlier["status"] == "review", earlier["status"]
            expected = {"retry": "pending", "dismiss": "review", "resolve": "sent"}[decision.kind]
            assert after["status"] == expected
            if decision.kind == "dismiss":
                assert after["review_reason"] == "dismissed"
            if decision.kind == "resolve":
                assert after["provider_id"] == decision.provider_id

    def _last_action_id(self) -> int:
        found = self.world.db.execute(
            "SELECT coalesce(max(id), 0) AS id FROM operator_actions"
        ).fetchone()
        assert found is not None
        return int(found["id"])

    def _follow_dismissals(self, since: int) -> None:
        """In the order they committed: a dismissal, and the decisions that undid one."""
        delivered = Counter(d["key"] for d in self.world.fake.deliveries())
        for action in self.world.db.execute(
            "SELECT message_key, action, details FROM operator_actions WHERE id > %s ORDER BY id",
            (since,),
        ):
            key = action["message_key"]
            if action["action"] == "dismiss":
                self.dismissed[key] = delivered[key]
            elif action["details"].get("undid_dismiss"):
                self.dismissed.pop(key, None)


@pytest.fixture
def world(
    database_url: str, db: Db, client: FlaskClient, environ: dict[str, str]
) -> Iterator[World]:
    with running_fake_provider() as fake:
        worker_settings = load_settings(
            {
                **environ,
                "RESEND_API_KEY": "re_machine",
                "RESEND_API_URL": fake.url,
                "RECEIPTS_SEND_RATE": "0",
                "RECEIPTS_MAX_ATTEMPTS": "3",
                # A retried row waits until the machine lets time pass.
                "RECEIPTS_RETRY_BASE_SECONDS": "3600",
                "RECEIPTS_PROVIDER_TIMEOUT": "2",
                "RECEIPTS_PROVIDER_CONNECT_TIMEOUT": "1",
            }
        )
        provider = provider_from_settings(worker_settings, concurrency=1)
        try:
            yield World(
                database_url=database_url, db=db, client=client, fake=fake,
                settings=worker_settings, provider=provider,
                render=payload_renderer(worker_settings),
            )  # fmt: skip
        finally:
            provider.close()


def test_no_sequence_of_decisions_sends_a_second_receipt_unasked(world: World) -> None:
    DecisionMachine.world = world
    run_state_machine_as_test(
        DecisionMachine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    print(f"decision machine: {world.examples} examples, {world.steps} steps")
