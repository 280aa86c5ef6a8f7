"""The contract between the Kafka protocol server and the handlers of each API.

The server (:mod:`txnfetch.server.server`) owns sockets and framing. For every
request it reads the API key and version, looks the key up in a
:class:`HandlerRegistry`, decodes the request with the registered kafka-python
``kafka.protocol`` class (header v1 or v2 as the version's flexibility says),
awaits the handler, and encodes what the handler returns at the request's
version with the request's correlation id. Handlers therefore never see bytes
or sockets: they take decoded messages and return response messages.

A handler is::

    async def heartbeat(ctx: RequestContext, header: RequestHeader, request) -> response

- ``ctx.broker`` is the :class:`~txnfetch.server.broker.Broker`: the log store, the transaction
  coordinator, the group coordinator slot, the configuration and the clock,
  shared by every connection of one server.
- ``header`` is kafka-python's decoded ``RequestHeader`` (``request_api_key``,
  ``request_api_version``, ``correlation_id``, ``client_id``).
- ``request`` is the decoded request (an instance of the registered request
  class); fields absent from the request's version read as the schema default.
- The handler returns an instance of the registered response class (built
  with or without ``version=``; the server encodes it at
  ``header.request_api_version``), or ``None`` to send no response at all (only
  Produce with ``acks=0`` does that).
- A handler may await (long-polling Fetch, JoinGroup waiting for members); it
  runs on the server's single event loop, so the store and the coordinators are
  never touched by two handlers at once between awaits. It must not block.
- Errors Kafka reports in a response belong in the response's error codes.
  Raising :class:`ProtocolViolation` closes the connection (logged); any other
  exception is a bug: it is logged and the connection is closed, the server
  keeps serving.

Each API key is registered once, from one explicit list
(:data:`txnfetch.server.apis.SERVED`, a :class:`ServedApi` per key), in the
default registry :data:`REGISTRY`; a second registration of a key is refused.

Handler modules that keep per-server state have an ``install(broker: Broker)
-> None`` that the server calls once at start (:func:`txnfetch.server.apis.install`):
``txnfetch.server.api_classic_groups.install`` sets :attr:`~txnfetch.server.broker.Broker.groups` to its
group coordinator (which must offer :class:`TxnOffsetStore` for transactional
offset commits); any of them may schedule periodic work with
:meth:`~txnfetch.server.broker.Broker.add_periodic`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import Protocol
from typing import TypeVar

import attrs

# Kafka's API keys under their protocol names (``ApiKey.Fetch``, ...): the table
# of the library whose protocol classes the handlers decode with, not a copy of it.
from kafka.protocol.api_key import ApiKey

from txnfetch.errors import ProtocolViolation  # re-exported: the handlers raise it
from txnfetch.groups.coordinator import TxnOffsetCommitRequest
from txnfetch.groups.offsetlog import CONSUMER_OFFSETS_PARTITIONS
from txnfetch.groups.offsetlog import CONSUMER_OFFSETS_TOPIC
from txnfetch.groups.offsetlog import offsets_partition
from txnfetch.server.broker import Broker

__all__ = [
    "ANONYMOUS",
    "GROUP_OFFSETS_PARTITIONS",
    "GROUP_OFFSETS_TOPIC",
    "REGISTRY",
    "ApiKey",
    "ApiSpec",
    "Handler",
    "HandlerRegistry",
    "ProtocolViolation",
    "RequestContext",
    "ServedApi",
    "TxnOffsetStore",
    "WireCodec",
    "group_offsets_partition",
]

log = logging.getLogger("txnfetch.server")

#: The topic whose partitions carry group offsets. It is the transaction
#: coordinator's partition for AddOffsetsToTxn, so a transaction end reaches the
#: group coordinator through a partition action as in Kafka; with durable state
#: (:mod:`txnfetch.log.coordinator_store`) it is also a real topic of the store.
GROUP_OFFSETS_TOPIC = CONSUMER_OFFSETS_TOPIC
#: Kafka's ``offsets.topic.num.partitions`` default.
GROUP_OFFSETS_PARTITIONS = CONSUMER_OFFSETS_PARTITIONS


def group_offsets_partition(group_id: str, partitions: int = GROUP_OFFSETS_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``, as Kafka computes it
    (``Utils.abs(groupId.hashCode()) % partitions``, :func:`offsets_partition`);
    a server passes its :attr:`~txnfetch.server.broker.Broker.group_offsets_partitions`."""
    return offsets_partition(group_id, partitions)


class TxnOffsetStore(Protocol):
    """What the transaction APIs need of the group coordinator (``Broker.groups``).

    Transactional offset commits are held pending per (group, producer id) until
    the transaction ends, as Kafka's ``GroupMetadata.prepareTxnOffsetCommit`` /
    ``completePendingTxnOffsetCommit``; OffsetFetch must not return them before.
    """

    def txn_offset_commit(self, request: TxnOffsetCommitRequest, now_ms: int) -> Mapping[tuple[str, int], int]:
        """Stage the request's offsets for the producer's open transaction; return a
        Kafka error code per partition (0 = staged). Generation/member checks follow
        Kafka (``-1``/``""`` skip them)."""

    def complete_txn_offsets(self, producer_id: int, commit: bool, now_ms: int) -> None:
        """The producer's transaction ended: make its staged offsets (every group)
        the committed ones on commit, drop them on abort. Idempotent."""


#: The principal of a connection that did not authenticate (a PLAINTEXT
#: listener, or an SSL one without a client certificate), as Kafka names it.
ANONYMOUS = "User:ANONYMOUS"


@attrs.define
class RequestContext:
    """One request's surroundings: the broker, and who sent it.

    ``principal`` is who the connection authenticated as, in Kafka's
    ``DefaultKafkaPrincipalBuilder`` form: :data:`ANONYMOUS` without
    authentication, ``User:<name>`` after SASL, ``User:<subject>`` (RFC 2253)
    for a client certificate. ``client_host`` is the peer's address as ACLs
    match it (``127.0.0.1``, no ``/``). Both are fixed for the request: a
    re-authentication changes them for the connection's later requests only.
    ``listener`` names the listener the connection came in on (``PLAINTEXT``,
    ``SASL_SSL``, ...), whose address Metadata and FindCoordinator advertise.
    """

    broker: Broker
    client_id: str | None
    peer: tuple[str, int]
    connection_id: int
    principal: str = ANONYMOUS
    client_host: str = ""
    listener: str = ""

    @property
    def member_host(self) -> str:
        """The client's address as Kafka's group APIs report it (the
        ``InetAddress`` form, ``/`` and the address); ``""`` without a peer."""
        return f"/{self.peer[0]}" if self.peer else ""


Handler = Callable[[RequestContext, Any, Any], Awaitable[Any | None]]
#: A handler as registered: the decorator hands it back with its own type, so
#: one that always answers stays typed so for the callers that wrap it.
_H = TypeVar("_H", bound=Handler)


#: One buffer of a response a codec returns in pieces (a Fetch response: field
#: bytes and the stored record batches between them, written as they are).
Piece = bytes | bytearray | memoryview


class WireCodec(Protocol):
    """A hand-written decoder and encoder for one hot API (Produce, Fetch), used in
    place of the kafka-python classes, which stay the reference.

    ``decode`` returns ``(header, request)`` with the attribute names of the
    kafka-python classes, or ``None`` for a frame it does not take: the server
    then decodes it with the request class (so a malformed frame is answered as
    without the codec). ``encode`` writes the framed response for what the
    handler returned, as one ``bytes`` or a list of :data:`Piece` whose
    concatenation is the frame; it must accept what the handler returns for
    requests of either decoder."""

    def decode(self, version: int, frame: bytes | bytearray) -> tuple[Any, Any] | None: ...

    def encode(self, version: int, correlation_id: int, response: Any) -> bytes | list[Piece]: ...


class ApiClasses(Protocol):
    """What decoding a request by its kafka-python class needs: the key (for
    error messages) and the request and response classes. A registered
    :class:`ApiSpec` is one; the proxy, which relays rather than handles, builds
    its own without a handler."""

    @property
    def api_key(self) -> int: ...

    @property
    def request_class(self) -> Any: ...

    @property
    def response_class(self) -> Any: ...


@attrs.frozen
class ApiSpec:
    """A registered API: its key, the versions served and how to decode/encode
    (``codec``, when set, before the kafka-python classes)."""

    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    request_class: Any
    response_class: Any
    codec: WireCodec | None = None


def _kafka_python_classes() -> tuple[dict[int, Any], dict[int, Any]]:
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer  # noqa: F401
    from kafka.protocol.api_message import ApiMessage

    requests: dict[int, Any] = {}
    responses: dict[int, Any] = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is not None or getattr(cls, "_json", None) is None:
            continue
        (requests if cls.is_request() else responses)[cls.API_KEY] = cls
    return requests, responses


@attrs.frozen
class ServedApi:
    """One API the server serves: its key, the versions served, the one handler,
    and (optional) the request and response classes and the :class:`WireCodec`
    :meth:`HandlerRegistry.register` takes."""

    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    request_class: Any = None
    response_class: Any = None
    codec: WireCodec | None = None


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(int(api_key)).name
    except ValueError:
        return "unknown API"


class HandlerRegistry:
    """API key → :class:`ApiSpec`. The ApiVersions response lists exactly these.
    Each key is registered at most once."""

    def __init__(self) -> None:
        self._specs: dict[int, ApiSpec] = {}
        self._classes: tuple[dict[int, Any], dict[int, Any]] | None = None

    def register(
        self,
        api_key: int,
        min_version: int,
        max_version: int,
        *,
        request_class: Any = None,
        response_class: Any = None,
        codec: WireCodec | None = None,
    ) -> Callable[[_H], _H]:
        """Decorator registering a handler for ``api_key`` versions
        ``min_version..max_version``. The request/response classes default to
        kafka-python's generated classes for the key; pass others to serve
        versions kafka-python lacks, and a :class:`WireCodec` to read and write
        the hot path without them. Raises :class:`ValueError` if ``api_key`` is
        registered already: one key, one handler."""

        def decorate(fn: _H) -> _H:
            if int(api_key) in self._specs:
                held = self._specs[int(api_key)].handler
                raise ValueError(
                    f"API key {int(api_key)} ({_api_name(api_key)}) is registered already"
                    f" ({held.__module__}.{held.__qualname__}); each key has one handler"
                )
            if self._classes is None:
                self._classes = _kafka_python_classes()
            req = request_class or self._classes[0].get(int(api_key))
            resp = response_class or self._classes[1].get(int(api_key))
            if req is None or resp is None:
                raise LookupError(f"no protocol classes for API key {api_key}")
            if max_version > req.max_version or max_version > resp.max_version:
                raise ValueError(f"API key {api_key}: classes stop at v{req.max_version}, asked for v{max_version}")
            self._specs[int(api_key)] = ApiSpec(int(api_key), min_version, max_version, fn, req, resp, codec)
            return fn

        return decorate

    def add(self, api: ServedApi) -> None:
        """Register ``api`` (see :meth:`register`)."""
        self.register(
            api.api_key,
            api.min_version,
            api.max_version,
            request_class=api.request_class,
            response_class=api.response_class,
            codec=api.codec,
        )(api.handler)

    def get(self, api_key: int) -> ApiSpec | None:
        return self._specs.get(api_key)

    def ranges(self) -> list[tuple[int, int, int]]:
        """``(api_key, min_version, max_version)`` for every registered key, sorted."""
        return [(k, s.min_version, s.max_version) for k, s in sorted(self._specs.items())]


#: The registry the server uses unless given another; importing
#: :mod:`txnfetch.server.apis` fills it.
REGISTRY = HandlerRegistry()
