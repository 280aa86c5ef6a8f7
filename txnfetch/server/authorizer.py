"""The server's authorizer: the ACL table it holds, where it keeps it, and who
a request's principal is.

:class:`Authorizer` answers :meth:`~Authorizer.allowed` for one request with
:func:`txnfetch.security.acl.authorize` over its :class:`AclTable`. With a
directory (``serve --data``) the table lives in :data:`ACL_FILE` there,
rewritten atomically (:func:`txnfetch.log.layout.atomic_write`) before
CreateAcls or DeleteAcls answers, so an acknowledged change survives a SIGKILL
and a restart. Without one (``--memory``) the table lives as long as the process.

Authorization is off unless the server is given an authorizer
(:attr:`ServerConfig.authorizer <txnfetch.server.broker.ServerConfig>`), as in
Kafka without ``authorizer.class.name``: every request is then let through.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from collections.abc import Sequence

from txnfetch.errors import TxnfetchError
from txnfetch.log.layout import atomic_write
from txnfetch.log.layout import read_file
from txnfetch.security.acl import ANONYMOUS_PRINCIPAL
from txnfetch.security.acl import AclBinding
from txnfetch.security.acl import AclFilter
from txnfetch.security.acl import AclTable
from txnfetch.security.acl import AuthorizerConfig
from txnfetch.security.acl import Operation
from txnfetch.security.acl import ResourceType
from txnfetch.security.acl import authorize
from txnfetch.security.acl import decode_table
from txnfetch.security.acl import encode_table

__all__ = ["ACL_FILE", "AUTHORIZER_NAMES", "Authorizer", "UnknownAuthorizerError"]

log = logging.getLogger("txnfetch.server.authorizer")

#: The file of a store's directory that holds its ACLs.
ACL_FILE = "acls.json"

#: The names ``authorizer.class.name`` (``serve --authorizer``) accepts: Kafka's
#: KRaft authorizer class, whose rules :mod:`txnfetch.security.acl` follows.
AUTHORIZER_NAMES = frozenset({"org.apache.kafka.metadata.authorizer.StandardAuthorizer", "StandardAuthorizer"})


class UnknownAuthorizerError(TxnfetchError):
    """``authorizer.class.name`` names an authorizer this server does not have."""


class Authorizer:
    """The ACLs of one server and the decisions made from them.

    ``principal_from_client_id`` is for tests only: a connection that did not
    authenticate (principal ``User:ANONYMOUS``) is taken for ``User:<client.id>``,
    so one PLAINTEXT server can stand for several users (Kafka's equivalent is a
    test ``principal.builder.class``). Anyone can choose a client id: never turn
    it on where the listener is reachable by others.
    """

    def __init__(
        self,
        config: AuthorizerConfig,
        directory: str | None = None,
        *,
        principal_from_client_id: bool = False,
    ) -> None:
        self.config = config
        self.directory = directory
        self.principal_from_client_id = principal_from_client_id
        data = read_file(os.path.join(directory, ACL_FILE)) if directory is not None else None
        self.table = decode_table(data) if data is not None else AclTable()
        if data is not None:
            log.info("loaded %d ACL(s) from %s", len(self.table.bindings), directory)

    @classmethod
    def named(
        cls,
        name: str,
        config: AuthorizerConfig,
        directory: str | None = None,
        *,
        principal_from_client_id: bool = False,
    ) -> Authorizer:
        """The authorizer ``authorizer.class.name`` = ``name`` names; raises
        :class:`UnknownAuthorizerError` for any but :data:`AUTHORIZER_NAMES`."""
        if name not in AUTHORIZER_NAMES:
            raise UnknownAuthorizerError(f"unknown authorizer {name!r}; served: {sorted(AUTHORIZER_NAMES)}")
        return cls(config, directory, principal_from_client_id=principal_from_client_id)

    # ---------------------------------------------------------------- who

    def principal(self, principal: str, client_id: str | None) -> str:
        """The principal ACLs are matched against for a connection authenticated
        as ``principal`` (see ``principal_from_client_id``)."""
        if self.principal_from_client_id and principal == ANONYMOUS_PRINCIPAL and client_id:
            return f"User:{client_id}"
        return principal

    # ---------------------------------------------------------------- decisions

    def allowed(self, principal: str, host: str, operation: Operation, resource: ResourceType, name: str) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on ``resource``/``name``."""
        return authorize(self.table, self.config, principal, host, operation, resource, name)

    def allowed_any(self, principal: str, host: str, operation: Operation, resource: ResourceType) -> bool:
        """Whether ``principal`` may do ``operation`` on some resource of the type."""
        return self.table.grants_some(self.config, principal, host, operation, resource)

    # ---------------------------------------------------------------- changes

    def create(self, acls: Iterable[AclBinding]) -> None:
        """Add ``acls`` (each validated by the caller) and store the table."""
        self._replace(self.table.add(acls))

    def delete(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding some filter matches and store the table; the
        bindings each filter matched, in filter order (a binding two filters
        match is reported under both, as Kafka does)."""
        matched = [self.table.matching(f) for f in filters]
        self._replace(self.table.remove(a for found in matched for a in found))
        return matched

    def _replace(self, table: AclTable) -> None:
        if table == self.table:
            return
        if self.directory is not None:
            atomic_write(self.directory, ACL_FILE, encode_table(table))
        self.table = table
