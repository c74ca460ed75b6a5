"""The bcrypt hash type of the configuration files: `claims.writers` in the exporter's, and
`basic_auth_users` in the web configuration.

Apart from the web server's basic auth (web/auth.py), which checks passwords against these
hashes, so that loading a configuration needs bcrypt but not the web server and aiohttp.
"""

from __future__ import annotations

import re
from typing import Annotated

import bcrypt
from pydantic import AfterValidator

BCRYPT_HASH = re.compile(r"\$2[aby]\$([0-9]{2})\$[./A-Za-z0-9]{53}")
MIN_COST, MAX_COST = 4, 31
_EXPECTED_HASH = "expected a bcrypt hash ($2y$10$ and 53 more characters, as from `htpasswd -nBC 10 ''`)"


def check_bcrypt_hash(value: str) -> None:
    """Raise ValueError unless bcrypt can check passwords against `value`.

    Checked at load, so that a bad hash is a configuration error and not a 500 on first use.
    """
    match = BCRYPT_HASH.fullmatch(value)
    if match is None:
        if not value.startswith("$2"):
            raise ValueError(f"{_EXPECTED_HASH}, not a password")
        raise ValueError(f"{_EXPECTED_HASH}; this one is {len(value)} characters or has other characters")
    cost = int(match[1])
    if not MIN_COST <= cost <= MAX_COST:
        raise ValueError(f"{_EXPECTED_HASH}; its cost {match[1]} is not between 04 and 31")
    # bcrypt is stricter than the pattern (the salt's last character must carry no stray bits):
    # its own parser decides, at the lowest cost so that loading stays fast.
    try:
        bcrypt.checkpw(b"", f"{value[:4]}04{value[6:]}".encode())
    except ValueError:
        raise ValueError(f"{_EXPECTED_HASH}; its salt is not valid bcrypt base64") from None


def _checked_hash(value: str) -> str:
    check_bcrypt_hash(value)
    return value


BcryptHash = Annotated[str, AfterValidator(_checked_hash)]
"""A configuration value that must be a usable bcrypt hash (pydantic names the key in errors)."""
