"""The claim ledger's database as the configuration names it: a SQLite file, or a PostgreSQL URL
with its password from libpq's environment or `claims.password_file`."""

from __future__ import annotations

from pathlib import Path

from virtcap.claims.database import ClaimDatabase
from virtcap.claims.redact import redact
from virtcap.claims.storage import ClaimStorage
from virtcap.config import ClaimSettings, ConfigError


def claim_storage(settings: ClaimSettings, source: str) -> ClaimStorage:
    """Raises ConfigError naming `source` (the configuration file) for a password file that
    cannot be read."""
    if not settings.shared:
        return ClaimDatabase(settings.database)
    password: str | None = None
    if settings.password_file is not None:
        password = read_password(settings.password_file, source)
    # psycopg is imported only where the claims are shared: a tenth of a second of every start
    from virtcap.claims.postgres import PostgresClaimDatabase  # noqa: PLC0415

    return PostgresClaimDatabase(settings.database, password)


def read_password(path: str, source: str) -> str:
    expected = "expected a readable file whose content is the PostgreSQL password"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(
            f"{source}: claims.password_file: cannot read {path}: {error.strerror}; {expected}"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: claims.password_file: {path} is not UTF-8 text; {expected}") from None
    password = text.rstrip("\r\n")  # a file written by `echo` ends with a newline no password has
    if not password:
        raise ConfigError(f"{source}: claims.password_file: {path} is empty; {expected}")
    return password


def database_description(settings: ClaimSettings) -> str:
    """Where the claims are, for logs: a URL without any password."""
    return redact(settings.database) if settings.shared else settings.database
