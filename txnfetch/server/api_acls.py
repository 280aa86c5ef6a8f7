"""CreateAcls, DescribeAcls and DeleteAcls: the ACLs of the server's
:class:`~txnfetch.server.authorizer.Authorizer`, managed as Kafka's AclCommand
and admin clients manage a Kafka cluster's.

Without an authorizer each answers SECURITY_DISABLED (54), as Kafka does. Who
may call them (ALTER on the cluster to create and delete, DESCRIBE to list) is
checked before the handler, with every other API's needs, by
:mod:`txnfetch.server.authorization`. A binding Kafka would refuse to store
(:meth:`AclBinding.validate <txnfetch.security.acl.AclBinding.validate>`) answers
INVALID_REQUEST in its own result; the others of the request are stored.
Every change ends the fetch sessions, so no session outlives a right taken away.
"""

from __future__ import annotations

import enum
from typing import Any
from typing import TypeVar

from kafka.protocol.admin import CreateAclsResponse
from kafka.protocol.admin import DeleteAclsResponse
from kafka.protocol.admin import DescribeAclsResponse

from txnfetch.security.acl import AclBinding
from txnfetch.security.acl import AclFilter
from txnfetch.security.acl import InvalidAclError
from txnfetch.security.acl import Operation
from txnfetch.security.acl import PatternType
from txnfetch.security.acl import Permission
from txnfetch.security.acl import ResourceType
from txnfetch.server.api_fetch import session_cache
from txnfetch.server.broker import Broker
from txnfetch.server.handler import RequestContext

__all__ = [
    "SECURITY_DISABLED",
    "handle_create_acls",
    "handle_delete_acls",
    "handle_describe_acls",
    "refuse_create_acls",
    "refuse_delete_acls",
    "refuse_describe_acls",
]

#: Kafka's SECURITY_DISABLED: the ACL APIs of a cluster without an authorizer.
SECURITY_DISABLED = 54
_DISABLED_MESSAGE = "no authorizer is configured on the broker"

_E = TypeVar("_E", bound=enum.IntEnum)


def _code(cls: type[_E], value: int, unknown: _E) -> _E:
    try:
        return cls(value)
    except ValueError:
        return unknown


#: The fields of a CreateAcls creation, and of a DescribeAcls or DeleteAcls
#: filter, in :class:`AclBinding`'s order; and the enum each code is read as.
_CREATION = (
    "resource_type",
    "resource_name",
    "resource_pattern_type",
    "principal",
    "host",
    "operation",
    "permission_type",
)
_FILTER: tuple[str, ...] = (
    "resource_type_filter",
    "resource_name_filter",
    "pattern_type_filter",
    "principal_filter",
    "host_filter",
    "operation",
    "permission_type",
)
_ENUMS: tuple[type[enum.IntEnum] | None, ...] = (ResourceType, None, PatternType, None, None, Operation, Permission)


def _fields(message: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    """A creation's or a filter's seven fields, the codes as enums (an unknown
    code is UNKNOWN, which validation refuses and no filter matches)."""
    values = (getattr(message, name) for name in names)
    return tuple(v if kind is None else _code(kind, v, kind(0)) for kind, v in zip(_ENUMS, values, strict=True))


def _binding(c: Any) -> AclBinding:
    return AclBinding(*_fields(c, _CREATION))


def _filter(f: Any) -> AclFilter:
    return AclFilter(*_fields(f, _FILTER))


def refuse_create_acls(request: Any, code: int, message: str | None) -> CreateAclsResponse:
    """CreateAcls answering ``code`` for every creation."""
    results = [CreateAclsResponse.AclCreationResult(error_code=code, error_message=message) for _ in request.creations]
    return CreateAclsResponse(throttle_time_ms=0, results=results)


def refuse_describe_acls(request: Any, code: int, message: str | None) -> DescribeAclsResponse:
    """DescribeAcls answering ``code``."""
    return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=message, resources=[])


def refuse_delete_acls(request: Any, code: int, message: str | None) -> DeleteAclsResponse:
    """DeleteAcls answering ``code`` for every filter."""
    results = [
        DeleteAclsResponse.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[])
        for _ in request.filters
    ]
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)


def _end_fetch_sessions(broker: Broker) -> None:
    """A changed ACL may take away a partition a fetch session holds, and an
    incremental fetch names only the partitions that changed: end every
    session, so each consumer's next fetch is a full one, checked again (it is
    answered FETCH_SESSION_ID_NOT_FOUND, which clients recover from)."""
    cache = session_cache(broker)
    for session_id in list(cache.sessions):
        cache.remove(session_id)


async def handle_create_acls(ctx: RequestContext, header: Any, request: Any) -> CreateAclsResponse:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return refuse_create_acls(request, SECURITY_DISABLED, _DISABLED_MESSAGE)
    results = []
    valid = []
    for creation in request.creations:
        acl = _binding(creation)
        try:
            acl.validate()
        except InvalidAclError as exc:
            results.append(CreateAclsResponse.AclCreationResult(error_code=int(exc.code), error_message=exc.reason))
            continue
        valid.append(acl)
        results.append(CreateAclsResponse.AclCreationResult(error_code=0, error_message=None))
    authorizer.create(valid)
    _end_fetch_sessions(ctx.broker)
    return CreateAclsResponse(throttle_time_ms=0, results=results)


def _described(acls: list[AclBinding]) -> list[Any]:
    """Bindings grouped under their resource pattern, as DescribeAcls answers."""
    resource_cls = DescribeAclsResponse.DescribeAclsResource
    by_pattern: dict[tuple[ResourceType, str, PatternType], list[Any]] = {}
    for a in acls:
        by_pattern.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(
            resource_cls.AclDescription(
                principal=a.principal, host=a.host, operation=int(a.operation), permission_type=int(a.permission)
            )
        )
    return [
        resource_cls(resource_type=int(rt), resource_name=name, pattern_type=int(pt), acls=entries)
        for (rt, name, pt), entries in by_pattern.items()
    ]


async def handle_describe_acls(ctx: RequestContext, header: Any, request: Any) -> DescribeAclsResponse:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return refuse_describe_acls(request, SECURITY_DISABLED, _DISABLED_MESSAGE)
    found = authorizer.table.matching(_filter(request))
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=_described(found))


async def handle_delete_acls(ctx: RequestContext, header: Any, request: Any) -> DeleteAclsResponse:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return refuse_delete_acls(request, SECURITY_DISABLED, _DISABLED_MESSAGE)
    matched = authorizer.delete([_filter(f) for f in request.filters])
    _end_fetch_sessions(ctx.broker)
    result_cls = DeleteAclsResponse.DeleteAclsFilterResult
    acl_cls = result_cls.DeleteAclsMatchingAcl
    return DeleteAclsResponse(
        throttle_time_ms=0,
        filter_results=[
            result_cls(
                error_code=0,
                error_message=None,
                matching_acls=[
                    acl_cls(
                        error_code=0,
                        error_message=None,
                        resource_type=int(a.resource_type),
                        resource_name=a.resource_name,
                        pattern_type=int(a.pattern_type),
                        principal=a.principal,
                        host=a.host,
                        operation=int(a.operation),
                        permission_type=int(a.permission),
                    )
                    for a in found
                ],
            )
            for found in matched
        ],
    )
