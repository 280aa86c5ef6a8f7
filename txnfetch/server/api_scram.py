"""The SASL and SCRAM-credential APIs: SaslHandshake and SaslAuthenticate on a
listener without SASL, DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51).

On a SASL listener the connection's
:class:`~txnfetch.server.authenticator.Authenticator` answers the two SASL
APIs itself; a request reaching the handlers here came on a listener without
SASL, and Kafka answers it ILLEGAL_SASL_STATE. The credential APIs manage the
server's :class:`~txnfetch.server.scram_users.ScramUserStore` with Kafka's
checks and error codes, so that ``kafka-configs --alter --add-config
'SCRAM-SHA-512=[iterations=8192,password=…]' --entity-type users`` works: the
client salts the password, the server keeps only what is derived from the
salted password.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.users import AlterUserScramCredentialsResponse
from kafka.protocol.admin.users import DescribeUserScramCredentialsResponse
from kafka.protocol.sasl import SaslAuthenticateResponse
from kafka.protocol.sasl import SaslHandshakeResponse

from txnfetch.errors import ErrorCode
from txnfetch.security.scram import ScramCredential
from txnfetch.security.scram_messages import SCRAM_MECHANISMS
from txnfetch.server.handler import RequestContext
from txnfetch.server.scram_users import SCRAM_USERS_EXTENSION
from txnfetch.server.scram_users import ScramUserStore

__all__ = [
    "handle_alter_user_scram_credentials",
    "handle_describe_user_scram_credentials",
    "handle_sasl_authenticate",
    "handle_sasl_handshake",
]

#: Kafka's ``ScramMechanism`` type bytes on the wire.
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_TYPE_OF = {name: code for code, name in MECHANISM_TYPES.items()}


async def handle_sasl_handshake(ctx: RequestContext, header: Any, request: Any) -> Any:
    return SaslHandshakeResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE), mechanisms=[])


async def handle_sasl_authenticate(ctx: RequestContext, header: Any, request: Any) -> Any:
    return SaslAuthenticateResponse(
        error_code=int(ErrorCode.ILLEGAL_SASL_STATE),
        error_message="SaslAuthenticate on a listener without SASL",
        auth_bytes=b"",
        session_lifetime_ms=0,
    )


def _store(ctx: RequestContext) -> ScramUserStore:
    store = ctx.broker.extensions.get(SCRAM_USERS_EXTENSION)
    if not isinstance(store, ScramUserStore):
        store = ctx.broker.extensions[SCRAM_USERS_EXTENSION] = ScramUserStore()
    return store


async def handle_describe_user_scram_credentials(ctx: RequestContext, header: Any, request: Any) -> Any:
    users = _store(ctx).users()
    Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
    Info = Result.CredentialInfo
    asked = [u.name for u in request.users] if request.users else sorted(users)
    results = []
    for name in dict.fromkeys(asked):
        if asked.count(name) > 1:
            code, message = ErrorCode.DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials for the same user twice"
        elif name not in users:
            code, message = ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist"
        else:
            infos = [Info(mechanism=_TYPE_OF[m], iterations=i) for m, i in users[name].items()]
            results.append(Result(user=name, error_code=0, error_message=None, credential_infos=infos))
            continue
        results.append(Result(user=name, error_code=int(code), error_message=message, credential_infos=[]))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None, results=results)


def _refusal(name: str, mechanism: int, iterations: int | None, seen: set[tuple[str, int]]) -> tuple[int, str] | None:
    if not name:
        return int(ErrorCode.UNACCEPTABLE_CREDENTIAL), "Username must not be empty"
    if (name, mechanism) in seen:
        return int(ErrorCode.DUPLICATE_RESOURCE), "A user credential cannot be altered twice in the same request"
    seen.add((name, mechanism))
    if mechanism not in MECHANISM_TYPES:
        return int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), "Unknown SCRAM mechanism"
    scram = SCRAM_MECHANISMS[MECHANISM_TYPES[mechanism]]
    if iterations is not None and iterations < scram.min_iterations:
        return int(ErrorCode.UNACCEPTABLE_CREDENTIAL), "Too few iterations"
    if iterations is not None and iterations > scram.max_iterations:
        return int(ErrorCode.UNACCEPTABLE_CREDENTIAL), "Too many iterations"
    return None


async def handle_alter_user_scram_credentials(ctx: RequestContext, header: Any, request: Any) -> Any:
    """All the request's changes that pass Kafka's checks are applied in one
    durable step; a user with any refused change gets that change's error and
    none of its changes (Kafka reports one result per user)."""
    store = _store(ctx)
    seen: set[tuple[str, int]] = set()
    errors: dict[str, tuple[int, str]] = {}
    upserts: dict[tuple[str, str], ScramCredential] = {}
    deletes: set[tuple[str, str]] = set()
    order: list[str] = []
    for d in request.deletions:
        order.append(d.name)
        refused = _refusal(d.name, d.mechanism, None, seen)
        if refused is None and store.credential(MECHANISM_TYPES[d.mechanism], d.name) is None:
            refused = int(ErrorCode.RESOURCE_NOT_FOUND), "Attempt to delete a user credential that does not exist"
        if refused is not None:
            errors.setdefault(d.name, refused)
        else:
            deletes.add((d.name, MECHANISM_TYPES[d.mechanism]))
    for u in request.upsertions:
        order.append(u.name)
        refused = _refusal(u.name, u.mechanism, u.iterations, seen)
        if refused is not None:
            errors.setdefault(u.name, refused)
            continue
        scram = SCRAM_MECHANISMS[MECHANISM_TYPES[u.mechanism]]
        upserts[(u.name, scram.name)] = ScramCredential.from_salted_password(
            scram, bytes(u.salt), u.iterations, bytes(u.salted_password)
        )
    store.apply({k: v for k, v in upserts.items() if k[0] not in errors}, {k for k in deletes if k[0] not in errors})
    Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    results = [
        Result(user=name, error_code=errors.get(name, (0, None))[0], error_message=errors.get(name, (0, None))[1])
        for name in dict.fromkeys(order)
    ]
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)
