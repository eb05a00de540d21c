"""The randomized fault soak: ``python -m tests.soak --minutes N [--seed S]``.

Not part of the default suite (no module here is named ``test_*``). It runs the
whole product as it is deployed (gunicorn as the Procfile starts it, two
``receipts worker --loop`` processes and cron-style ``receipts worker
--max-seconds 20`` runs) against a throwaway PostgreSQL cluster reached through
a TCP proxy and the fake Resend API in a process of its own. It drives signed
Stripe webhooks, redeliveries and duplicates while a seeded random schedule
kills processes, restarts the database, cuts, blackholes and refuses the
database path and makes the provider slow, 5xx or 429. At the end it checks
the promise: every 200 has its row, every row is sent exactly once (or in
review with a reason), no key delivered twice, nothing stuck.

Modules: :mod:`.cluster` (the database), :mod:`.processes` (the product's
processes and the fake provider), :mod:`.traffic` (the webhooks),
:mod:`.faults` (the schedule), :mod:`.checker` (the verdict), ``__main__``
(the run).
"""
