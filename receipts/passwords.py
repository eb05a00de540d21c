"""Console passwords: argon2id hashes made and checked by ``argon2-cffi``.

``receipts console-user`` makes a hash; the console checks a login against
the hash in ``RECEIPTS_CONSOLE_USERS``. The parameters are OWASP's minimum
for argon2id (19 MiB, 2 passes, 1 lane: about 25 ms here), written into each
hash, so a hash made with other parameters still checks. A check costs that
memory for its duration; the console bounds how many run at once.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from argon2 import PasswordHasher

MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 1024  # a longer one is refused before it costs any hashing
_HASH_PREFIXES = ("$argon2id$", "$argon2i$", "$argon2d$")


@functools.cache
def _hasher() -> PasswordHasher:
    from argon2 import PasswordHasher

    return PasswordHasher(time_cost=2, memory_cost=19 * 1024, parallelism=1)


def hash_password(password: str) -> str:
    """A fresh argon2id hash (random salt) of ``password``."""
    return _hasher().hash(password)


def hash_like(encoded: str, password: str) -> str:
    """A hash of ``password`` made with the same parameters as ``encoded`` (same cost)."""
    from argon2 import PasswordHasher, extract_parameters

    return PasswordHasher.from_parameters(extract_parameters(encoded)).hash(password)


def password_problem(password: str) -> str | None:
    """Why a new password cannot be used, or None."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"the password must have at least {MIN_PASSWORD_LENGTH} characters"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"the password must have at most {MAX_PASSWORD_LENGTH} characters"
    return None


def hash_problem(encoded: str) -> str | None:
    """Why ``encoded`` is not an argon2 hash this module can check, or None."""
    from argon2 import extract_parameters
    from argon2.exceptions import InvalidHashError

    if not encoded.startswith(_HASH_PREFIXES):
        return "is not an argon2 hash ($argon2id$…); make one with `receipts console-user`"
    try:
        extract_parameters(encoded)
    except InvalidHashError:
        return "is not a complete argon2 hash (was it cut when pasted?)"
    return None


def password_matches(encoded: str, password: str) -> bool:
    """Whether ``password`` is the one ``encoded`` was made from."""
    from argon2.exceptions import InvalidHashError, VerificationError

    if len(password) > MAX_PASSWORD_LENGTH:
        return False
    try:
        return _hasher().verify(encoded, password)
    except (VerificationError, InvalidHashError):
        return False
