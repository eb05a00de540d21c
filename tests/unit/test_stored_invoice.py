"""What ingest stores of a paid invoice (receipts.receipt.stored_invoice) renders the
same receipt as the whole invoice, stays small whatever the app hangs on the
invoice, and holds every field the readers take (docs/architecture.md, "The
frozen payload and the fingerprint")."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from receipts.ingest.verification import decode_event
from receipts.receipt.derivation import ReceiptJob, derive_receipt
from receipts.receipt.payload import read_render_input, render_payload
from receipts.receipt.rendering import Renderer
from receipts.receipt.stored_invoice import LEFT_OUT_EVERYWHERE, RENDERED_FIELDS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RENDERER = Renderer()


def jobs() -> Iterator[tuple[str, ReceiptJob, dict[str, Any]]]:
    """Each recorded invoice.paid event that makes a receipt: (name, job, whole invoice)."""
    for path in sorted(EXAMPLES.glob("invoice_paid*.json")):
        header, _ = decode_event(path.read_text(encoding="utf-8"))
        job = derive_receipt(header, email_from="Billing <billing@example.com>")
        if isinstance(job, ReceiptJob):
            yield path.stem, job, header.data_object


JOBS = list(jobs())


def with_whole_invoice(job: ReceiptJob, invoice: dict[str, Any]) -> dict[str, Any]:
    return {**job.render_input, "invoice": invoice}


def test_the_recorded_invoices_make_receipts() -> None:
    assert len(JOBS) >= 10


@pytest.mark.parametrize(("name", "job", "invoice"), JOBS, ids=[name for name, _, _ in JOBS])
def test_the_stored_part_renders_the_receipt_of_the_whole_invoice(
    name: str, job: ReceiptJob, invoice: dict[str, Any]
) -> None:
    whole = with_whole_invoice(job, invoice)
    assert read_render_input(job.render_input) == read_render_input(whole)
    assert render_payload(job.message_key, job.render_input, RENDERER) == render_payload(
        job.message_key, whole, RENDERER
    )


def test_an_invoice_of_a_megabyte_is_stored_in_a_few_kilobytes() -> None:
    """Metadata on the invoice, its lines and its subscription, and shipping details,
    a megabyte in all: none of it is stored, and the receipt is the same."""
    name, job, invoice = JOBS[0]
    padded = copy.deepcopy(invoice)
    filler = {f"key_{n}": "x" * 500 for n in range(50)}  # Stripe's metadata limits
    padded["metadata"] = filler
    for line in padded["lines"]["data"]:
        line["metadata"] = filler
    padded["subscription_details"] = {"metadata": filler}
    padded["shipping_details"] = {"name": "y" * 950_000}
    event = json.loads((EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))
    event["data"]["object"] = padded
    text = json.dumps(event)
    assert len(text) > 1_000_000

    header, _ = decode_event(text)
    big = derive_receipt(header, email_from="Billing <billing@example.com>")
    assert isinstance(big, ReceiptJob)
    assert len(json.dumps(big.render_input)) < 16_000
    assert big.render_input == job.render_input
    assert big.fingerprint == job.fingerprint  # what counts as a change is unchanged


class _Reads:
    """Every path the readers take into an invoice, as "a.b[].c"."""

    def __init__(self) -> None:
        self.paths: set[str] = set()

    def wrap(self, value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return _ReadDict(value, path, self)
        if isinstance(value, list):
            return _ReadList(value, path, self)
        return value


class _ReadDict(dict[str, Any]):
    def __init__(self, value: dict[str, Any], path: str, reads: _Reads) -> None:
        super().__init__(value)
        self._path, self._reads = path, reads

    def _read(self, name: str) -> Any:
        path = f"{self._path}.{name}"
        self._reads.paths.add(path)
        return self._reads.wrap(dict.__getitem__(self, name), path)

    def __getitem__(self, name: str) -> Any:
        return self._read(name)

    def get(self, name: str, default: Any = None) -> Any:
        return self._read(name) if dict.__contains__(self, name) else default

    def __contains__(self, name: object) -> bool:
        self._reads.paths.add(f"{self._path}.{name}")
        return dict.__contains__(self, name)

    def items(self) -> Any:
        return [(name, self._read(name)) for name in dict.keys(self)]

    def values(self) -> Any:
        return [self._read(name) for name in dict.keys(self)]


class _ReadList(list[Any]):
    def __init__(self, value: list[Any], path: str, reads: _Reads) -> None:
        super().__init__(value)
        self._path, self._reads = f"{path}[]", reads

    def __iter__(self) -> Iterator[Any]:
        return (self._reads.wrap(item, self._path) for item in list.__iter__(self))

    def __getitem__(self, index: Any) -> Any:
        found = list.__getitem__(self, index)
        if isinstance(index, slice):
            return [self._reads.wrap(item, self._path) for item in found]
        return self._reads.wrap(found, self._path)


def test_the_readers_take_no_invoice_field_that_is_not_stored() -> None:
    """Rendering each recorded invoice whole, every top-level field the readers touch
    is among those stored, and no path goes through metadata: a reader that starts
    reading another field fails here until the field is stored too."""
    reads = _Reads()
    for _, job, invoice in JOBS:
        whole = with_whole_invoice(job, reads.wrap(copy.deepcopy(invoice), "invoice"))
        render_payload(job.message_key, whole, RENDERER)
    assert reads.paths, "the readers were not watched"
    top_level = {path.split(".")[1].split("[")[0] for path in reads.paths}
    assert top_level - RENDERED_FIELDS == set()
    assert not [path for path in reads.paths if f".{LEFT_OUT_EVERYWHERE}" in path]
