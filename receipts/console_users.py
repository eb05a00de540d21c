"""Who may open the support console: ``RECEIPTS_CONSOLE_USERS``, read into users.

The variable holds entries separated by ``;``, each ``name:role:hash`` split
on its first two ``:`` (an argon2 hash has none, but nothing is lost if a
future one did). ``receipts console-user NAME --role R`` prints an entry. A
*viewer* searches and reads; an *operator* also takes review decisions, which
are recorded under the user's name. Errors name the entry by its position
and never echo a hash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from receipts.environment import ConfigError
from receipts.passwords import hash_problem

USERS_VARIABLE = "RECEIPTS_CONSOLE_USERS"
SECRET_VARIABLE = "RECEIPTS_CONSOLE_SECRET"
MIN_SECRET_LENGTH = 32
# A name is what the decision log records (the CLI's --by): short, one word.
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"


@dataclass(frozen=True, kw_only=True)
class ConsoleUser:
    name: str
    role: Role
    password_hash: str = ""

    @property
    def may_decide(self) -> bool:
        return self.role == Role.OPERATOR

    def __repr__(self) -> str:  # the hash stays out of logs and tracebacks
        return f"ConsoleUser(name={self.name!r}, role={self.role.value!r})"


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a console user's name, or None."""
    if USER_NAME.fullmatch(name):
        return None
    return "a user name is 1 to 64 letters, digits and . _ @ + - (starting with a letter or digit)"


def parse_users(raw: str | None) -> tuple[ConsoleUser, ...]:
    """The users of ``RECEIPTS_CONSOLE_USERS``; ConfigError naming the bad entry."""
    if raw is None or not raw.strip():
        return ()
    users: dict[str, ConsoleUser] = {}
    entries = [entry.strip() for entry in raw.split(";")]
    for position, entry in enumerate(entries, start=1):
        if not entry:
            continue  # a trailing ';'
        user = _parse_entry(entry, position)
        if user.name in users:
            raise ConfigError(USERS_VARIABLE, f"entry #{position} repeats the name {user.name!r}")
        users[user.name] = user
    if not users:
        raise ConfigError(USERS_VARIABLE, "names no user (only ';')")
    return tuple(users.values())


def _parse_entry(entry: str, position: int) -> ConsoleUser:
    parts = entry.split(":", 2)
    if len(parts) != 3:
        raise ConfigError(
            USERS_VARIABLE,
            f"entry #{position} is not name:role:hash (`receipts console-user NAME --role R` "
            "prints one)",
        )
    name, role, password_hash = (part.strip() for part in parts)
    problem = name_problem(name)
    if problem is not None:
        raise ConfigError(USERS_VARIABLE, f"entry #{position}: {problem}")
    if role not in {r.value for r in Role}:
        raise ConfigError(
            USERS_VARIABLE,
            f"entry #{position} ({name}): the role must be viewer or operator, got {role!r}",
        )
    problem = hash_problem(password_hash)
    if problem is not None:
        raise ConfigError(USERS_VARIABLE, f"entry #{position} ({name}): the hash {problem}")
    return ConsoleUser(name=name, role=Role(role), password_hash=password_hash)


def secret(raw: str | None, users: tuple[ConsoleUser, ...]) -> str | None:
    """``RECEIPTS_CONSOLE_SECRET``, required (and long enough) when there are users."""
    if not users:
        return raw
    if raw is None:
        raise ConfigError(
            SECRET_VARIABLE,
            f"is required when {USERS_VARIABLE} is set: it signs the console's sessions "
            "(`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'` makes one)",
        )
    if len(raw) < MIN_SECRET_LENGTH:
        raise ConfigError(
            SECRET_VARIABLE, f"must have at least {MIN_SECRET_LENGTH} characters, has {len(raw)}"
        )
    return raw
