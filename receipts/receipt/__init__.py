"""The receipt: from a Stripe invoice to the email its customer gets, with no I/O.

Reading an event's envelope (``event``) and an invoice across Stripe's API
versions (``invoice_facts``, ``invoice_lines``, ``invoice_totals``,
``invoice_details``, ``invoice_values``, ``invoice_summary``,
``payment_methods``), money and dates (``money``, ``dates``), text from the
customer's side (``untrusted``), the decision an event makes
(``derivation``, with ``fingerprints``), the rows that must add up
(``statement``), and the email (``payload``, ``rendering``,
``presentation``, ``template_env``, ``catalogs``, ``samples``, ``templates/``,
``locales/``). Ingest calls the derivation; the worker calls the payload
builder at a row's first claim; nothing here imports ingest, delivery or web.
"""
