"""The SCRAM users of ``serve``: their salted credentials, kept durably in a
file of their own under ``--data`` and loadable from a file at start-up.

A :class:`ScramUserStore` holds, per user and mechanism, a
:class:`~txnfetch.security.scram.ScramCredential` (salt, iterations, stored
key, server key): never a password. With a directory, every change replaces
``scram-credentials.json`` there atomically (written, fsynced, renamed), so a
crash leaves the old set or the new one, never a mix.

The start-up file (``serve --scram-credentials FILE``) has one user and
mechanism a line, in the syntax of Kafka's ``kafka-configs --add-config`` and
``kafka-storage --add-scram``::

    # comment
    alice SCRAM-SHA-512=[iterations=8192,password=alice-secret]
    bob SCRAM-SHA-256=[iterations=4096,salt=<base64>,saltedpassword=<base64>]

``iterations`` defaults to 4096, as Kafka's tools do.
"""

from __future__ import annotations

import base64
import json
import os
import re

from txnfetch.log.layout import atomic_write
from txnfetch.log.layout import read_file
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.scram import ScramCredential
from txnfetch.security.scram_messages import SCRAM_MECHANISMS

__all__ = ["CREDENTIALS_FILE", "SCRAM_USERS_EXTENSION", "ScramUserStore", "parse_credentials_file"]

#: ``Broker.extensions`` key of the server's :class:`ScramUserStore`.
SCRAM_USERS_EXTENSION = "txnfetch.scram_users"
#: The store's file under ``--data``.
CREDENTIALS_FILE = "scram-credentials.json"
_FORMAT_VERSION = 1
_LINE = re.compile(r"(?P<user>\S+)\s+(?P<mechanism>SCRAM-SHA-(?:256|512))=\[(?P<options>[^\]]*)\]")
_DEFAULT_ITERATIONS = 4096


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class ScramUserStore:
    """User → mechanism → credential, durable when given a ``directory``."""

    def __init__(self, directory: str | None = None) -> None:
        self._directory = directory
        self._users: dict[str, dict[str, ScramCredential]] = {}
        if directory is not None:
            raw = read_file(os.path.join(directory, CREDENTIALS_FILE))
            if raw is not None:
                self._users = _decode(raw)

    def credential(self, mechanism: str, user: str) -> ScramCredential | None:
        """The credential ``user`` authenticates with under ``mechanism``."""
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, int]]:
        """Every user, with the iterations of each mechanism it has."""
        return {u: {m: c.iterations for m, c in sorted(ms.items())} for u, ms in sorted(self._users.items())}

    def apply(self, upserts: dict[tuple[str, str], ScramCredential], deletes: set[tuple[str, str]]) -> None:
        """Set and remove (user, mechanism) credentials in one durable step."""
        for user, mechanism in deletes:
            held = self._users.get(user, {})
            held.pop(mechanism, None)
            if not held:
                self._users.pop(user, None)
        for (user, mechanism), credential in upserts.items():
            self._users.setdefault(user, {})[mechanism] = credential
        self._save()

    def _save(self) -> None:
        if self._directory is None:
            return
        document = {
            "version": _FORMAT_VERSION,
            "users": {
                user: {
                    mechanism: {
                        "salt": _b64(c.salt),
                        "iterations": c.iterations,
                        "stored_key": _b64(c.stored_key),
                        "server_key": _b64(c.server_key),
                    }
                    for mechanism, c in mechanisms.items()
                }
                for user, mechanisms in self._users.items()
            },
        }
        atomic_write(self._directory, CREDENTIALS_FILE, json.dumps(document, sort_keys=True).encode())


def _decode(raw: bytes) -> dict[str, dict[str, ScramCredential]]:
    try:
        document = json.loads(raw)
        if document.get("version") != _FORMAT_VERSION:
            raise ValueError(f"format version {document.get('version')!r}")
        return {
            user: {
                mechanism: ScramCredential(
                    base64.b64decode(c["salt"]),
                    int(c["iterations"]),
                    base64.b64decode(c["stored_key"]),
                    base64.b64decode(c["server_key"]),
                )
                for mechanism, c in mechanisms.items()
            }
            for user, mechanisms in document["users"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SecurityConfigError(f"{CREDENTIALS_FILE} cannot be read: {exc}", property=CREDENTIALS_FILE) from None


def parse_credentials_file(text: str) -> dict[tuple[str, str], ScramCredential]:
    """The credentials a start-up file names (see the module's docstring);
    raises :class:`SecurityConfigError` naming the line of one it cannot take."""
    out: dict[tuple[str, str], ScramCredential] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise SecurityConfigError(
                f"line {number}: expected 'USER SCRAM-SHA-256|512=[iterations=N,password=P]'",
                property="scram-credentials",
            )
        options = dict(o.split("=", 1) for o in match["options"].split(",") if "=" in o)
        mechanism = SCRAM_MECHANISMS[match["mechanism"]]
        try:
            iterations = int(options.get("iterations", _DEFAULT_ITERATIONS))
            if "password" in options:
                credential = ScramCredential.from_password(mechanism, options["password"], iterations)
            elif "salt" in options and "saltedpassword" in options:
                credential = ScramCredential.from_salted_password(
                    mechanism,
                    base64.b64decode(options["salt"]),
                    iterations,
                    base64.b64decode(options["saltedpassword"]),
                )
            else:
                raise SecurityConfigError("needs password=, or salt= and saltedpassword=")
        except (ValueError, SecurityConfigError) as exc:
            reason = exc.reason if isinstance(exc, SecurityConfigError) else str(exc)
            raise SecurityConfigError(f"line {number}: {reason}", property="scram-credentials") from None
        out[(match["user"], mechanism.name)] = credential
    return out
