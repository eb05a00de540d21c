"""Ingest: a verified delivery becomes stored rows, once.

Verify the signature and decode the envelope (``verification``; thin
notifications in ``thin_notifications`` and ``thin_events``), derive the
receipt (``deriving``, which calls :mod:`receipts.receipt` with the Stripe
API's facts when keyed), and store the event and its outbox row in one
statement (``store``), then wake the workers (``wakeup``). Resend's delivery
events are recorded by ``delivery_events``. Outcomes, never HTTP answers:
the routes in :mod:`receipts.web` answer.
"""
