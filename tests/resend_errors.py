"""Every error Resend documents (https://resend.com/docs/api-reference/errors).

The decision table's tests (tests/unit/test_decisions.py) and the worker's run
against the fake Resend (tests/db/test_provider_answers.py) take each of them.
"""

from __future__ import annotations

# As Resend's page lists them: status, name, a message.
DOCUMENTED = [
    (400, "invalid_idempotency_key", "The key must be between 1-256 chars."),
    (400, "validation_error", "The `to` field must be a valid email address."),
    (400, "validation_error", "API key is invalid"),
    (401, "missing_api_key", "Missing API key in the authorization header."),
    (401, "restricted_api_key", "This API key is restricted to only send emails."),
    (401, "validation_error", "API key is invalid"),
    (403, "invalid_api_key", "API key is invalid."),
    (403, "validation_error", "You can only send testing emails to your own email address."),
    (403, "validation_error", "The example.com domain is not verified."),
    (404, "not_found", "The requested endpoint does not exist."),
    (405, "method_not_allowed", "Method is not allowed for the requested path."),
    (409, "invalid_idempotent_request", "Same idempotency key used with a different payload."),
    (409, "concurrent_idempotent_requests", "Same idempotency key used while in progress."),
    (422, "invalid_attachment", "Attachment must have either a `content` or `path`."),
    (422, "invalid_from_address", "Invalid `from` field."),
    (422, "invalid_access", 'Access must be "full_access" | "sending_access".'),
    (422, "invalid_parameter", "The `parameter` must be a valid UUID."),
    (422, "invalid_region", 'Region must be "us-east-1" | "eu-west-1" | "sa-east-1".'),
    (422, "missing_required_field", "The request body is missing one or more required fields."),
    (429, "monthly_quota_exceeded", "You have reached your monthly email quota."),
    (429, "daily_quota_exceeded", "You have reached your daily email quota."),
    (429, "rate_limit_exceeded", "Too many requests. Please limit the number of requests."),
    (451, "security_error", "We may have found a security issue with the request."),
    (500, "application_error", "An unexpected error occurred."),
    (500, "internal_server_error", "An unexpected error occurred."),
]
