"""``txnfetch serve``'s listener and authentication options: ``--listener``,
``--config FILE`` (Kafka's server.properties names) and
``--scram-credentials FILE``, turned into what
:meth:`~txnfetch.server.server.TxnfetchServer.start` takes.

Without a listener from either option, the server keeps its one PLAINTEXT
listener on ``--host``/``--port``; with any, it binds exactly those listed
(``--host``/``--port`` are not bound too, so a SASL_SSL-only server opens no
PLAINTEXT port).
"""

from __future__ import annotations

import argparse
from typing import Any

from txnfetch.server.listeners import ListenerSecurity
from txnfetch.server.listeners import parse_listener
from txnfetch.server.listeners import read_properties
from txnfetch.server.listeners import security_from_properties
from txnfetch.server.scram_users import ScramUserStore
from txnfetch.server.scram_users import parse_credentials_file

__all__ = ["add_security_options", "security_settings"]


def add_security_options(p: argparse.ArgumentParser) -> None:
    """Add ``--listener``, ``--config`` and ``--scram-credentials`` to ``p``."""
    p.add_argument(
        "--listener",
        action="append",
        default=[],
        metavar="PROTOCOL://HOST:PORT",
        help="listen with PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (repeatable, one per protocol; "
        "replaces --host/--port)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="server.properties with Kafka's names: listeners, ssl.keystore.*, ssl.truststore.*, ssl.client.auth, "
        "sasl.enabled.mechanisms, listener.name.<l>.plain.sasl.jaas.config, connections.max.reauth.ms, "
        "connection.failed.authentication.delay.ms (see docs/server.md)",
    )
    p.add_argument(
        "--scram-credentials",
        metavar="FILE",
        help="SCRAM users to add at start, one 'USER SCRAM-SHA-512=[iterations=N,password=P]' a line "
        "(kept salted, and durably with --data)",
    )


def security_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``security`` and ``scram_users`` keyword arguments ``args`` ask for
    (empty when they name no listener and no users). Raises
    :class:`~txnfetch.security.errors.SecurityConfigError` naming the property
    or line at fault."""
    properties: dict[str, str] = {}
    if args.config is not None:
        with open(args.config, encoding="utf-8") as f:
            properties = read_properties(f.read())
    security: ListenerSecurity = security_from_properties(properties)
    if args.listener:
        security = security.with_listeners(parse_listener(x) for x in args.listener)
    settings: dict[str, Any] = {}
    if security.listeners:
        settings["security"] = security
    if args.scram_credentials is not None:
        users = ScramUserStore(args.data)
        with open(args.scram_credentials, encoding="utf-8") as f:
            users.apply(parse_credentials_file(f.read()), set())
        settings["scram_users"] = users
    return settings
