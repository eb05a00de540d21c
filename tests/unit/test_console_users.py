"""RECEIPTS_CONSOLE_USERS and `receipts console-user`: entries made, read and refused."""

from __future__ import annotations

import io
from typing import Any

import pytest

from receipts.cli import main
from receipts.config import ConfigError, load_settings
from receipts.console_users import Role
from receipts.passwords import password_matches
from tests.console_client import SECRET, cheap_hash


def _settings(users: str, secret: str | None = SECRET) -> Any:
    environ = {"RECEIPTS_CONSOLE_USERS": users}
    if secret is not None:
        environ["RECEIPTS_CONSOLE_SECRET"] = secret
    return load_settings(environ)


def test_entries_are_split_on_semicolons_and_the_first_two_colons() -> None:
    olga, victor = cheap_hash(), cheap_hash()
    settings = _settings(f" olga:operator:{olga} ; victor:viewer:{victor};")
    assert [(u.name, u.role, u.password_hash) for u in settings.console_users] == [
        ("olga", Role.OPERATOR, olga),
        ("victor", Role.VIEWER, victor),
    ]
    assert settings.console_enabled
    assert settings.console_users[0].may_decide and not settings.console_users[1].may_decide
    assert olga not in repr(settings.console_users)


def test_without_users_the_console_is_off_and_needs_no_secret() -> None:
    assert not load_settings({}).console_enabled
    assert not _settings("  ", secret=None).console_enabled


@pytest.mark.parametrize(
    ("users", "words"),
    [
        ("olga:operator", "entry #1 is not name:role:hash"),
        ("olga:admin:{hash}", "entry #1 (olga): the role must be viewer or operator"),
        ("ol ga:viewer:{hash}", "entry #1: a user name is 1 to 64"),
        ("olga:viewer:{hash};olga:operator:{hash}", "entry #2 repeats the name 'olga'"),
        ("olga:viewer:secret", "entry #1 (olga): the hash is not an argon2 hash"),
        ("olga:viewer:$argon2id$v=19$m=8", "entry #1 (olga): the hash is not a complete"),
        (";;", "names no user"),
    ],
)
def test_a_malformed_entry_is_named_by_position_and_never_echoed(users: str, words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _settings(users.replace("{hash}", cheap_hash()))
    assert raised.value.variable == "RECEIPTS_CONSOLE_USERS"
    assert words in str(raised.value)
    assert "secret" not in str(raised.value)  # the third entry's "hash" is not echoed


def test_the_secret_is_required_with_users_and_must_be_long() -> None:
    entry = f"olga:operator:{cheap_hash()}"
    with pytest.raises(ConfigError, match="RECEIPTS_CONSOLE_SECRET: is required"):
        _settings(entry, secret=None)
    with pytest.raises(ConfigError, match="at least 32 characters, has 5"):
        _settings(entry, secret="short")


def test_console_user_prints_an_entry_the_settings_accept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--password-stdin` reads one line; the printed entry parses, and its hash checks
    that password (and no other)."""
    monkeypatch.setattr("sys.stdin", io.StringIO("correct horse battery\nignored\n"))
    assert main(["console-user", "olga", "--role", "operator", "--password-stdin"], {}) == 0
    entry = capsys.readouterr().out.strip()
    assert entry.startswith("olga:operator:$argon2id$")
    [user] = _settings(entry).console_users
    assert password_matches(user.password_hash, "correct horse battery")
    assert not password_matches(user.password_hash, "correct horse battery\n")


@pytest.mark.parametrize(
    ("argv", "stdin", "words"),
    [
        (["olga", "--role", "viewer", "--password-stdin"], "short\n", "at least 12 characters"),
        (["olga", "--role", "viewer", "--password-stdin"], "", "standard input is empty"),
        (["olga", "--role", "viewer"], "a long password here\n", "pipe it in with"),
        (["o lga", "--role", "viewer", "--password-stdin"], "a long password\n", "user name"),
    ],
)
def test_console_user_refuses_what_it_cannot_use(
    argv: list[str],
    stdin: str,
    words: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(["console-user", *argv], {}) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and words in captured.err


def test_console_user_refuses_an_unknown_role(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["console-user", "olga", "--role", "admin"], {})
    assert raised.value.code == 2
    assert "invalid choice: 'admin'" in capsys.readouterr().err
