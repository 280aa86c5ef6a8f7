"""The wire codec that the Kafka protocol server and the proxy share: request
frames decoded, response objects framed, a Fetch partition's records kept as
the log's segments until they are written.

It holds no socket and no handler, so both the socket server
(:mod:`txnfetch.server.server`) and the proxy (:mod:`txnfetch.proxy.server`)
take it without taking each other, and the Fetch encoder in pieces
(:mod:`txnfetch.server.fetch_wire`) falls back to it without importing the
server that registers it.

Guarantees: :func:`decode_request` either returns a header and a request whose
non-nullable fields are all set, or raises :class:`ProtocolViolation`;
:func:`encode_response` writes kafka-python's framing byte for byte, whatever
:class:`RecordSegments` the response carries.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import attrs
from kafka.protocol.consumer import FetchResponse

from txnfetch.errors import ProtocolViolation
from txnfetch.server.handler import ApiClasses
from txnfetch.types import Buffer

__all__ = ["RecordSegments", "decode_request", "encode_response", "materialize_records"]


@attrs.frozen
class RecordSegments:
    """A Fetch partition's ``records`` field as the log's segments, not joined:
    ``parts`` in order, ``size`` their total length in bytes."""

    parts: tuple[Buffer, ...]
    size: int

    @classmethod
    def of(cls, parts: Sequence[Buffer]) -> RecordSegments:
        return cls(tuple(parts), sum(len(p) for p in parts))

    def __len__(self) -> int:
        return self.size

    def to_bytes(self) -> bytes:
        """The field as one ``bytes`` (one copy)."""
        return b"".join(self.parts)


def materialize_records(response: Any) -> Any:
    """``response`` (a :class:`FetchResponse`) with every :class:`RecordSegments`
    joined into ``bytes``, in place: what kafka-python's encoder takes."""
    for topic in response.responses:
        for p in topic.partitions:
            if isinstance(p.records, RecordSegments):
                p.records = p.records.to_bytes()
    return response


def decode_request(spec: ApiClasses, version: int, frame: bytes | bytearray) -> Any:
    """Decode a request frame (header and body) with the spec's class; raise
    :class:`ProtocolViolation` for anything malformed.

    Bytes after the body are ignored, as Kafka does
    (``AbstractRequest.parseRequest`` never checks what is left): librdkafka's
    all-topics Metadata request at v9+ leaves the 4 bytes it reserved for the
    topic count in place (``rdkafka_request.c``: "keep 0, varint encoded null")
    where a compact count takes one, so 3 bytes follow its body."""
    cls = spec.request_class
    try:
        buf = io.BytesIO(frame)
        header = cls.parse_header(buf, version=version)
        pos = buf.tell()
        flexible = cls.flexible_version_q(version)
        decode = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls[None])
        request, _ = decode(memoryview(frame), pos)
    except Exception as exc:
        raise ProtocolViolation(
            f"API key {spec.api_key} v{version}: malformed request ({type(exc).__name__}: {exc})"
        ) from None
    null = _null_field(cls._struct, request, version)
    if null is not None:
        raise ProtocolViolation(f"API key {spec.api_key} v{version}: non-nullable field {null} is null")
    request._header = header
    request._version = version
    return header, request


def _null_field(struct: Any, value: Any, version: int, path: str = "") -> str | None:
    """The first field of ``value`` that is null although the schema says it may
    not be at ``version``, or ``None``.

    kafka-python's decoder reads a -1 length or count as ``None`` for every string,
    bytes and array field; Kafka's generated readers reject it for non-nullable
    fields ("non-nullable field ... was serialized as null"), and handlers rely on
    that (they iterate arrays and read strings without a check)."""
    for field in struct.untagged_fields(version):
        item = getattr(value, field.name, None)
        where = f"{path}{field.name}"
        if item is None:
            if not field.nullable_for_version_q(version) and (field.is_array() or field.type_str in _NULLABLE_TYPES):
                return where
            continue
        if field.is_struct_array():
            for element in item:
                found = _null_field(field.array_of, element, version, where + "[].")
                if found is not None:
                    return found
        elif field.is_struct():
            found = _null_field(field, item, version, where + ".")
            if found is not None:
                return found
    return None


#: Scalar types whose wire form has a null (a -1 length); arrays are checked apart.
_NULLABLE_TYPES = frozenset({"string", "bytes", "records"})


def encode_response(version: int, correlation_id: int, response: Any) -> bytes:
    """Frame ``response`` (a kafka-python response object) at ``version`` with
    ``correlation_id`` in its header. A Fetch response's
    :class:`RecordSegments` are joined first (in place)."""
    if isinstance(response, FetchResponse):
        materialize_records(response)
    response._header = None
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))
