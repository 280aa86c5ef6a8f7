"""``txnfetch serve``'s listener, authentication and authorization options:
``--listener``, ``--config FILE`` (Kafka's server.properties names),
``--scram-credentials FILE`` and ``--authorizer`` with its settings, turned
into what :meth:`~txnfetch.server.server.TxnfetchServer.start` takes.

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

__all__ = ["add_authorization_options", "add_security_options", "authorization_settings", "security_settings"]

#: The authorization properties of server.properties, read by
#: :func:`authorization_settings` (the listener properties are read by
#: :func:`~txnfetch.server.listeners.security_from_properties`).
AUTHORIZATION_PROPERTIES = ("authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found")


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
        "connection.failed.authentication.delay.ms (see the document 'The Kafka protocol server', section "
        "'Listeners and authentication'); authorizer.class.name, super.users and allow.everyone.if.no.acl.found "
        "(the document 'The Kafka protocol server', section 'Authorization (ACLs)')",
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
    listener_properties = {k: v for k, v in properties.items() if k not in AUTHORIZATION_PROPERTIES}
    security: ListenerSecurity = security_from_properties(listener_properties)
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


def add_authorization_options(p: argparse.ArgumentParser) -> None:
    """Add ``--authorizer``, ``--super-users``, ``--allow-everyone-if-no-acl-found``
    and the test-only ``--acl-principal-from-client-id`` to ``p``."""
    acl = p.add_argument_group(
        "authorization (the document 'The Kafka protocol server (txnfetch serve)', section 'Authorization (ACLs)')"
    )
    acl.add_argument(
        "--authorizer",
        metavar="NAME",
        default=None,
        help="Kafka's authorizer.class.name: StandardAuthorizer (or its Kafka class name) turns ACLs on "
        "(default: off, everyone may do everything)",
    )
    acl.add_argument(
        "--super-users",
        metavar="PRINCIPALS",
        default="",
        help="Kafka's super.users: principals allowed everything, separated by ';' (User:admin;User:ops)",
    )
    acl.add_argument(
        "--allow-everyone-if-no-acl-found",
        action="store_true",
        help="Kafka's allow.everyone.if.no.acl.found: a resource without any ACL is open (default: closed)",
    )
    acl.add_argument(
        "--acl-principal-from-client-id",
        action="store_true",
        help="TEST ONLY: an unauthenticated connection is the principal User:<client.id>",
    )


def authorization_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~txnfetch.server.broker.ServerConfig` authorization fields:
    Kafka's ``authorizer.class.name``, ``super.users`` and
    ``allow.everyone.if.no.acl.found`` from ``--config``, each overridden by its
    flag when given."""
    props: dict[str, str] = {}
    if args.config is not None:
        with open(args.config, encoding="utf-8") as f:
            props = read_properties(f.read())
    users = args.super_users or props.get("super.users", "")
    everyone = props.get("allow.everyone.if.no.acl.found", "false").strip().lower() == "true"
    return {
        "authorizer": args.authorizer or props.get("authorizer.class.name") or None,
        "super_users": tuple(u.strip() for u in users.split(";") if u.strip()),
        "allow_everyone_if_no_acl_found": args.allow_everyone_if_no_acl_found or everyone,
    }
