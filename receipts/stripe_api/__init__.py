"""Stripe's API, read with an optional restricted key (``STRIPE_API_KEY``).

:mod:`receipts.stripe_api.client` makes the calls (the official library, bounded
time, Connect accounts, errors in our words); :mod:`receipts.stripe_api.facts`
looks up what a receipt may add from the API. Nothing here writes to Stripe.
"""
