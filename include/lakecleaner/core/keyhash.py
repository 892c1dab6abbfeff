"""The hash that names a key wherever the key itself must not go: the erasure audit, the erasure
request table once a request is done, and the offending rows of data-quality results.

An unsalted SHA-256 of an id or an e-mail address is reversible by guessing (a million candidate ids
in under a second) and alike in every table, so the hash is HMAC-SHA256 under a per-deployment
secret that the audit's readers do not hold. Its scheme is recorded beside each hash
(``hmac-sha256:<key id>``; ``sha256`` for the unkeyed hash of a deployment with no secret, and for
rows audited before secrets existed), so requests already audited keep being checked after a
deployment adds a secret.

One message, two renderings held equal by tests: ``digest`` (Python's hmac) and ``hash_sql``
(the same HMAC in Spark's own SQL functions, computed by Spark wherever keys are hashed: the
request's keys, every record of a table the quality suite checks, the few offending rows it lists).
Spark 3.5 has no HMAC function; HMAC is H((K^opad) || H((K^ipad) || m)), and the two pads reach the
SQL as the one row of a temporary view (PADS_VIEW) built from Python data, never as SQL text (which
the quality suite keeps in its stored expectations) and never as literals in a plan (Spark prints a
view over local data by its columns only). Where they still are is said in the README.
"""
from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field
from typing import Mapping

SECRET_ENV = "LAKECLEANER_KEY_HASH_SECRET"  # the default variable that carries the deployment's secret
UNKEYED = "sha256"
KEYED_PREFIX = "hmac-sha256:"
MIN_SECRET_BYTES = 16
BLOCK = 64  # SHA-256's block size, HMAC's key length
PADS_VIEW = "lc_key_hash_pads"  # the session's one-row view of (ipad, opad), see register_pads
PADS = "lc_pads"  # the alias a query gives that view


class KeySecretError(ValueError):
    """The configured secret is unusable; the message names the variable, never its value."""


@dataclass(frozen=True)
class KeyHasher:
    scheme: str
    secret: bytes | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_environment(cls, variable: str = SECRET_ENV, environ: Mapping[str, str] | None = None) -> "KeyHasher":
        raw = (os.environ if environ is None else environ).get(variable)
        if not raw:
            return cls(UNKEYED)
        secret = raw.encode()
        if len(secret) < MIN_SECRET_BYTES:
            raise KeySecretError(f"{variable}: the key-hash secret must be at least {MIN_SECRET_BYTES} bytes "
                                 "(e.g. 32 random bytes, hex-encoded)")
        return cls(KEYED_PREFIX + key_id(secret), secret)

    @property
    def keyed(self) -> bool:
        return self.secret is not None

    def digest(self, message: str) -> str:
        data = message.encode()
        if not self.keyed:
            return hashlib.sha256(data).hexdigest()
        return hmac.new(self.secret, data, hashlib.sha256).hexdigest()

    def pads(self) -> tuple[bytes, bytes]:
        """(K ^ ipad, K ^ opad) as HMAC defines them (RFC 2104), for the SQL rendering."""
        key = self.secret if len(self.secret) <= BLOCK else hashlib.sha256(self.secret).digest()
        key = key.ljust(BLOCK, b"\0")
        return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


UNKEYED_HASHER = KeyHasher(UNKEYED)


def key_hasher(cfg) -> KeyHasher:
    """The deployment's hasher: its secret from the environment variable the config names."""
    return KeyHasher.from_environment(cfg.erasure.key_hash_secret_env)


def key_id(secret: bytes) -> str:
    """A short name of the secret, so an audit row says which secret hashed it (rotation)."""
    return hashlib.sha256(b"lakecleaner key id\0" + secret).hexdigest()[:12]


def hash_sql(hasher: KeyHasher, message: str) -> str:
    """SQL: the hash of ``message`` (an SQL string expression). For a keyed hasher the query must
    join the pads: ``... CROSS JOIN {PADS_VIEW} {PADS}`` (pads_join), after register_pads."""
    if not hasher.keyed:
        return f"sha2({message}, 256)"
    return f"sha2(concat({PADS}.opad, unhex(sha2(concat({PADS}.ipad, encode({message}, 'UTF-8')), 256))), 256)"


def pads_join(hasher: KeyHasher) -> str:
    """The join a query over hash_sql needs ('' for the unkeyed hash)."""
    return f" CROSS JOIN {PADS_VIEW} {PADS}" if hasher.keyed else ""


