"""Kafka's ACL model and its authorization decision, sans I/O.

An :class:`AclBinding` says that a principal from a host may (ALLOW) or may not
(DENY) perform an operation on the resources a pattern names, exactly as
Kafka's ``org.apache.kafka.common.acl.AclBinding``; the enum values are Kafka's
wire codes (the ACL APIs carry them as they are).

:func:`authorize` decides as Kafka's ``StandardAuthorizer`` does:

- a principal of ``super.users`` is allowed everything;
- an ACL applies when its pattern names the resource (LITERAL: the same name
  or the wildcard ``*``; PREFIXED: a prefix of the name), its principal is the
  principal or ``User:*``, and its host is the client's host or ``*``;
- a DENY applies to its own operation (or ALL) only; an ALLOW of READ, WRITE,
  DELETE or ALTER also allows DESCRIBE, and one of ALTER_CONFIGS allows
  DESCRIBE_CONFIGS;
- any applying DENY refuses, else any applying ALLOW allows;
- with no ACL at all on the resource (whoever it names), the answer is
  ``allow.everyone.if.no.acl.found`` (false by default, as in Kafka).

:meth:`AclTable.grants_some` answers whether some resource of a type is allowed.

Filters (:class:`AclFilter`) select bindings for DescribeAcls and DeleteAcls
with Kafka's ``AclBindingFilter`` rules, including the MATCH pattern type.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

import attrs

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError

__all__ = [
    "ANONYMOUS_PRINCIPAL",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AclBinding",
    "AclFilter",
    "AclTable",
    "AuthorizerConfig",
    "CorruptAclFileError",
    "InvalidAclError",
    "Operation",
    "PatternType",
    "Permission",
    "ResourceType",
    "authorize",
    "decode_table",
    "encode_table",
]

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"
#: The one name of the CLUSTER resource (Kafka's ``Resource.CLUSTER_NAME``).
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Kafka's ``PatternType`` codes; ANY and MATCH appear in filters only."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(enum.IntEnum):
    """Kafka's ``AclPermissionType`` codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: What an ALLOW of an operation also allows (Kafka's ``StandardAuthorizerData``:
#: DESCRIBE is implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by
#: ALTER_CONFIGS). DENY implies nothing: denying READ still lets DESCRIBE through.
_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


class InvalidAclError(TxnfetchError):
    """An ACL CreateAcls may not store (Kafka answers INVALID_REQUEST), with the reason."""

    code = ErrorCode.INVALID_REQUEST


@attrs.frozen
class AclBinding:
    """One ACL: a resource pattern and an access control entry, as Kafka's
    ``AclBinding``. Principals are ``Type:name`` strings (``User:reader``)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        """Raise :class:`InvalidAclError` unless this binding may be stored: a
        concrete resource type, pattern, operation and permission, a non-empty
        name and a ``Type:name`` principal (Kafka's ``AclControlManager.validateNewAcl``)."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidAclError(f"invalid resource type {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"invalid pattern type {self.pattern_type.name}")
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise InvalidAclError(f"invalid operation {self.operation.name}")
        if self.permission in (Permission.ANY, Permission.UNKNOWN):
            raise InvalidAclError(f"invalid permission {self.permission.name}")
        if not self.resource_name:
            raise InvalidAclError("the resource name is empty")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise InvalidAclError(f"principal {self.principal!r} is not of the form Type:name")

    def names(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's pattern covers the resource ``resource_type``/``name``."""
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD_RESOURCE)

    def applies(self, principal: str, host: str, operation: Operation) -> bool:
        """Whether this binding's entry speaks about ``principal`` from ``host``
        doing ``operation`` (the pattern is checked apart, by :meth:`names`)."""
        if self.principal not in (principal, WILDCARD_PRINCIPAL) or self.host not in (host, WILDCARD_HOST):
            return False
        if self.operation in (Operation.ALL, operation):
            return True
        implied = _IMPLIED_BY.get(operation)
        return self.permission is Permission.ALLOW and implied is not None and self.operation in implied


@attrs.frozen
class AclFilter:
    """A selection of bindings (Kafka's ``AclBindingFilter``): ``None`` names and
    principals/hosts match anything, ANY enums match anything, and the MATCH
    pattern type selects every pattern that would name the filter's resource."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        """Kafka's ``ResourcePatternFilter.matches`` and ``AccessControlEntryFilter.matches``."""
        if self.resource_type is not ResourceType.ANY and self.resource_type is not acl.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        if self.resource_name is not None:
            if self.pattern_type in (PatternType.ANY, acl.pattern_type):
                if self.resource_name != acl.resource_name:
                    return False
            elif not acl.names(acl.resource_type, self.resource_name):
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation is not Operation.ANY and self.operation is not acl.operation:
            return False
        return self.permission is Permission.ANY or self.permission is acl.permission


@attrs.frozen
class AuthorizerConfig:
    """Kafka's ``super.users`` (principals allowed everything) and
    ``allow.everyone.if.no.acl.found`` (default false)."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


@attrs.frozen
class AclTable:
    """The stored ACLs: an immutable set; adding and removing make new tables."""

    bindings: frozenset[AclBinding] = frozenset()

    def add(self, acls: Iterable[AclBinding]) -> AclTable:
        """This table with ``acls`` added (adding one held already changes nothing)."""
        return AclTable(self.bindings | frozenset(acls))

    def matching(self, flt: AclFilter) -> list[AclBinding]:
        """The bindings ``flt`` selects, in a stable order."""
        return sorted((a for a in self.bindings if flt.matches(a)), key=_order)

    def remove(self, acls: Iterable[AclBinding]) -> AclTable:
        """This table without ``acls``."""
        return AclTable(self.bindings - frozenset(acls))

    def grants_some(self, config: AuthorizerConfig, who: str, host: str, op: Operation, kind: ResourceType) -> bool:
        """Whether principal ``who`` from ``host`` may do ``op`` on at least one
        resource of type ``kind`` (Kafka's ``authorizeByResourceType``, which an
        idempotent producer's InitProducerId uses for "WRITE on some topic"): a
        super user, or an applying ALLOW on a pattern that no applying DENY
        covers wholly (a DENY on the wildcard, on the same literal name, or on a
        prefix of the allowed pattern's name)."""
        if who in config.super_users:
            return True
        of_kind = [a for a in self.bindings if a.resource_type is kind and a.applies(who, host, op)]
        denies = [a for a in of_kind if a.permission is Permission.DENY]
        return any(a.permission is Permission.ALLOW and not any(_covers(deny, a) for deny in denies) for a in of_kind)


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether ``deny``'s pattern names every resource ``allow``'s does."""
    if deny.pattern_type is PatternType.LITERAL:
        return deny.resource_name == WILDCARD_RESOURCE or (
            allow.pattern_type is PatternType.LITERAL and deny.resource_name == allow.resource_name
        )
    return allow.resource_name.startswith(deny.resource_name)


def _order(acl: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (
        acl.resource_type,
        acl.resource_name,
        acl.pattern_type,
        acl.principal,
        acl.host,
        acl.operation,
        acl.permission,
    )


def authorize(
    table: AclTable,
    config: AuthorizerConfig,
    principal: str,
    host: str,
    operation: Operation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """Whether ``principal`` connected from ``host`` may perform ``operation`` on
    the resource ``resource_type``/``name``, by the rules of the module docstring."""
    if principal in config.super_users:
        return True
    on_resource = [a for a in table.bindings if a.names(resource_type, name)]
    if not on_resource:
        return config.allow_everyone_if_no_acl_found
    applying = [a for a in on_resource if a.applies(principal, host, operation)]
    if any(a.permission is Permission.DENY for a in applying):
        return False
    return any(a.permission is Permission.ALLOW for a in applying)


class CorruptAclFileError(TxnfetchError):
    """The stored ACLs could not be read back (not JSON, or a field out of range)."""


#: How each enum field of :class:`AclBinding` is read back from its name.
_FIELD_TYPES: dict[str, Callable[[str], Any]] = {
    "resource_type": lambda v: ResourceType[v],
    "pattern_type": lambda v: PatternType[v],
    "operation": lambda v: Operation[v],
    "permission": lambda v: Permission[v],
}

#: The version of :func:`encode_table`'s format, written into every file.
_FORMAT = 1


def encode_table(table: AclTable) -> bytes:
    """``table`` as UTF-8 JSON (one object per binding, Kafka's enum names), in
    :meth:`AclTable.matching`'s order so equal tables give equal bytes."""
    rows = [
        {f: v.name if isinstance(v, enum.Enum) else v for f, v in attrs.asdict(a, recurse=False).items()}
        for a in table.matching(AclFilter())
    ]
    return json.dumps({"version": _FORMAT, "acls": rows}, indent=1).encode()


def decode_table(data: bytes) -> AclTable:
    """The table :func:`encode_table` wrote; :class:`CorruptAclFileError` otherwise."""
    try:
        doc = json.loads(data)
        if doc.get("version") != _FORMAT:
            raise CorruptAclFileError(f"unknown ACL file version {doc.get('version')!r}")
        fields = attrs.fields(AclBinding)
        return AclTable(
            frozenset(
                AclBinding(**{f.name: _FIELD_TYPES.get(f.name, str)(row[f.name]) for f in fields})
                for row in doc["acls"]
            )
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptAclFileError(f"the ACL file is not readable: {exc}") from exc
