"""Reading Resend's batch answer: which email of the batch each id or refusal is about.

An id is only ever recorded on a row when the answer accounts for every email of
the batch exactly once (docs/architecture.md, "Batches"); anything else is a 2xx
that names no row, retried under the same key.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from receipts.delivery.answers import (
    BATCH_ANSWER_UNREADABLE,
    BatchItem,
    classify_batch_response,
)


def answer(document: Any) -> bytes:
    return json.dumps(document).encode()


def test_ids_go_to_the_emails_in_order_skipping_the_refused_indexes() -> None:
    body = answer(
        {"data": [{"id": "a"}, {"id": "c"}], "errors": [{"index": 1, "message": "Bad\n`to`."}]}
    )
    read = classify_batch_response(200, {"ratelimit-limit": "5"}, body, 3)
    assert read.items == (
        BatchItem(provider_id="a"),
        BatchItem(error_message="Bad `to`."),
        BatchItem(provider_id="c"),
    )
    assert read.answer.accepted and read.answer.rate_limit_limit == 5


def test_a_strict_answer_without_errors_gives_every_email_its_id() -> None:
    read = classify_batch_response(200, {}, answer({"data": [{"id": "a"}, {"id": "b"}]}), 2)
    assert read.items == (BatchItem(provider_id="a"), BatchItem(provider_id="b"))


@pytest.mark.parametrize(
    "document",
    [
        {"data": [{"id": "a"}]},  # one email unaccounted for
        {"data": [{"id": "a"}, {"id": "b"}, {"id": "c"}]},  # one too many
        {"data": [{"id": "a"}], "errors": [{"index": 5, "message": "x"}]},  # no such index
        {"data": [], "errors": [{"index": 0, "message": "x"}, {"index": 0, "message": "y"}]},
        {"data": [{"id": ""}, {"id": "b"}]},  # an empty id
        {"data": [{"id": "a"}], "errors": [{"index": True, "message": "x"}]},
        {"id": "a"},  # a single send's answer
    ],
)
def test_an_answer_that_does_not_account_for_each_email_once_names_no_row(
    document: dict[str, Any],
) -> None:
    read = classify_batch_response(200, {}, answer(document), 2)
    assert read.items is None
    assert read.answer.error == BATCH_ANSWER_UNREADABLE and not read.answer.accepted


def test_an_error_answer_stands_for_the_whole_batch() -> None:
    body = answer({"statusCode": 409, "name": "invalid_idempotent_request", "message": "x"})
    read = classify_batch_response(409, {}, body, 2)
    assert read.items is None and read.answer.error == "invalid_idempotent_request"
