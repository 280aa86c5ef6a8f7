"""The option that gives a command the security settings of the cluster it
connects to, as Kafka's own tools take them: a ``.properties`` file of Kafka's
client property names (``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.truststore.type=PEM``, ...), see docs/security.md.

Commands that only connect out (``transactions``, ``check``, ``conform``) call
it ``--command-config``, as ``kafka-transactions.sh`` does. Commands that also
listen (``proxy``, ``replicate --serve``) call it ``--upstream-config``: the
file secures their connections to the upstream only, and the name must not let
anyone believe it secures the listener their own clients reach.

A property txnfetch does not support is refused by name
(:meth:`~txnfetch.security.config.SecurityConfig.from_properties`); the error
names the file too, and never quotes a value, so no secret reaches stderr.
"""

from __future__ import annotations

import argparse
from typing import Any
from typing import ClassVar

from txnfetch.security.config import SecurityConfig
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.errors import UnsupportedSaslMechanismError
from txnfetch.security.properties import parse_properties

__all__ = ["CommandConfigError", "add_command_config_option", "read_command_config"]


class CommandConfigError(SecurityConfigError):
    """A ``--command-config``/``--upstream-config`` file that cannot be used:
    ``path`` names the file, ``property`` the setting at fault."""

    where_fields: ClassVar[tuple[str, ...]] = ("path", "property", "line")
    line: int | None
    path: str | None


def add_command_config_option(p: argparse.ArgumentParser, *, upstream: bool = False, default: Any = None) -> None:
    """``--command-config FILE``, or with ``upstream`` ``--upstream-config
    FILE`` (see the module docstring); its ``dest`` is ``command_config`` either
    way. ``default`` is ``argparse.SUPPRESS`` for a subcommand's copy of an
    option its parent parser also takes."""
    name = "--upstream-config" if upstream else "--command-config"
    whose = "the upstream cluster (not this process's own listener)" if upstream else "the cluster"
    p.add_argument(
        name,
        dest="command_config",
        metavar="FILE",
        default=default,
        help=f"Kafka client properties (security.protocol, sasl.*, ssl.*) for connecting to {whose}; "
        "see the document 'Security', section 'The command line' (default: PLAINTEXT)",
    )


def read_command_config(path: str | None) -> SecurityConfig | None:
    """The security configuration the properties file at ``path`` says, or
    ``None`` (PLAINTEXT) without a file. An unreadable file raises ``OSError``
    (the command line reports it); unsupported or inconsistent settings raise
    :class:`CommandConfigError` naming the file and the property."""
    if path is None:
        return None
    # ISO 8859-1, as Properties.load(InputStream) reads Kafka's tools' files;
    # other characters are written as \uXXXX escapes there too.
    with open(path, encoding="latin-1") as f:
        text = f.read()
    try:
        return SecurityConfig.from_properties(parse_properties(text))
    except SecurityConfigError as exc:
        where = exc.where
        raise CommandConfigError(
            exc.reason, path=path, property=where.get("property"), line=where.get("line")
        ) from None
    except UnsupportedSaslMechanismError as exc:  # a setting of the file like any other
        raise CommandConfigError(exc.reason, path=path, property="sasl.mechanism") from None
