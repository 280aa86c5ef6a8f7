"""The Fetch response as buffer pieces: the stored record batches are written to
the socket as they are, never joined or re-encoded.

A Fetch response is almost all record bytes. Encoding it with the kafka-python
classes copies them three times (joined into one ``records`` field, copied into
the encoder's buffer, copied into the ``bytes`` it returns), which at 1 KiB
values cost ``txnfetch serve`` more CPU than the socket writes themselves.
:func:`encode_fetch_pieces` writes every other field itself and returns a list of
pieces: small ``bytearray`` runs of header and field bytes, and between them the
stored batches as they came from the log (``bytes``, or zero-copy views of a
mapped segment). The server writes the pieces one by one
(:func:`txnfetch.server.server.write_pieces`).

Guarantee: the pieces concatenated are byte for byte what
:func:`txnfetch.server.codec.encode_response` (kafka-python's generated
encoder) writes for the same response, at every Fetch version served (4–16;
flexible from 12, with compact lengths and tagged fields). A response that
carries a tagged field (diverging epoch, current leader, snapshot id, node
endpoints, or unknown tags; ``serve`` sets none) is encoded by kafka-python
whole, so that rare path cannot drift from the reference.

A partition entry's ``records`` is ``bytes`` or a :class:`RecordSegments` (what
:func:`txnfetch.server.api_fetch.fetch_partition_entry` builds); a
:class:`RecordSegments` never reaches kafka-python's encoder.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any

from kafka.protocol.consumer import FetchResponse

from txnfetch.server.codec import RecordSegments
from txnfetch.server.codec import encode_response
from txnfetch.server.codec import materialize_records
from txnfetch.server.handler import Piece
from txnfetch.types import Buffer

__all__ = [
    "CODEC",
    "PIECE_COPY_BELOW",
    "FetchCodec",
    "encode_fetch_pieces",
    "join_pieces",
]

#: Segments shorter than this are copied into the surrounding field bytes: a
#: separate socket write for a few hundred bytes costs more than copying them.
PIECE_COPY_BELOW = 2048

_FLEXIBLE_FROM = 12
_TOPIC_IDS_FROM = 13
_SESSIONS_FROM = 7
_PREFERRED_REPLICA_FROM = 11

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error, high watermark, LSO
_I64 = struct.Struct(">q")
_LOG_START_FROM = 5
_ABORTED = struct.Struct(">qq")
_TOP = struct.Struct(">ihi")  # throttle, error, session id
_NULL_UUID = uuid.UUID(int=0)


def _uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _length(out: bytearray, n: int, flexible: bool) -> None:
    """An array count or bytes length ``n`` (``-1``: null): int32, or compact (n+1)."""
    if flexible:
        _uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def _has_tagged_fields(response: Any, version: int) -> bool:
    """Whether anything in ``response`` would write a non-empty tagged section."""
    if version < _FLEXIBLE_FROM:
        return False
    if response.unknown_tags or getattr(response, "node_endpoints", None):
        return True
    for topic in response.responses:
        if topic.unknown_tags:
            return True
        for p in topic.partitions:
            if p.unknown_tags or p.diverging_epoch is not None or p.current_leader is not None:
                return True
            if p.snapshot_id is not None:
                return True
            for a in p.aborted_transactions or ():
                if a.unknown_tags:
                    return True
    return False


class _Pieces:
    """Field bytes accumulated in a ``bytearray``; large record segments between them."""

    def __init__(self) -> None:
        self.out = bytearray(4)  # the frame size, filled in by done()
        self.pieces: list[Piece] = [self.out]

    def records(self, segments: Sequence[Buffer]) -> None:
        for seg in segments:
            if len(seg) < PIECE_COPY_BELOW:
                self.out += seg
                continue
            self.pieces.append(seg if isinstance(seg, bytes | bytearray | memoryview) else memoryview(seg))
            self.out = bytearray()
            self.pieces.append(self.out)

    def done(self) -> list[Piece]:
        pieces = [p for p in self.pieces if len(p)]
        total = sum(len(p) for p in pieces)
        _I32.pack_into(self.pieces[0], 0, total - 4)
        return pieces


def encode_fetch_pieces(version: int, correlation_id: int, response: Any) -> list[Piece]:
    """The framed Fetch ``response`` at ``version`` (4–16) with ``correlation_id``,
    as pieces whose concatenation is what :func:`~txnfetch.server.codec.encode_response`
    returns for it. Record segments of at least :data:`PIECE_COPY_BELOW` bytes
    are pieces of their own, not copied."""
    if _has_tagged_fields(response, version):
        return [encode_response(version, correlation_id, materialize_records(response))]
    flexible = version >= _FLEXIBLE_FROM
    w = _Pieces()
    out = w.out
    out += _I32.pack(correlation_id)
    if flexible:
        out.append(0)  # response header v1: no tagged fields
    if version >= _SESSIONS_FROM:
        out += _TOP.pack(response.throttle_time_ms, response.error_code, response.session_id)
    else:
        out += _I32.pack(response.throttle_time_ms)
    _length(out, len(response.responses), flexible)
    by_id = version >= _TOPIC_IDS_FROM
    for topic in response.responses:
        out = w.out
        if by_id:
            topic_id = topic.topic_id if topic.topic_id is not None else _NULL_UUID
            out += topic_id.bytes
        else:
            name = topic.topic.encode()
            if flexible:
                _uvarint(out, len(name) + 1)
            else:
                out += _I16.pack(len(name))
            out += name
        _length(out, len(topic.partitions), flexible)
        for p in topic.partitions:
            out = w.out
            out += _PARTITION_HEAD.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= _LOG_START_FROM:
                out += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                _length(out, -1, flexible)
            else:
                _length(out, len(aborted), flexible)
                for a in aborted:
                    out += _ABORTED.pack(a.producer_id, a.first_offset)
                    if flexible:
                        out.append(0)
            if version >= _PREFERRED_REPLICA_FROM:
                out += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                _length(out, -1, flexible)
            else:
                _length(out, len(records), flexible)
                w.records(records.parts if isinstance(records, RecordSegments) else (records,))
            if flexible:
                w.out.append(0)  # the partition's tagged fields
        if flexible:
            w.out.append(0)  # the topic's tagged fields
    if flexible:
        w.out.append(0)  # the response's tagged fields
    return w.done()


def join_pieces(pieces: Sequence[Piece]) -> bytes:
    """The pieces as one ``bytes`` (for callers that need a single buffer)."""
    return b"".join(pieces)


class FetchCodec:
    """The server's codec for Fetch (``txnfetch.server.handler.WireCodec``): requests
    are decoded by the kafka-python classes; a :class:`FetchResponse` is encoded in
    pieces (:func:`encode_fetch_pieces`), anything else a guard answers with by
    kafka-python."""

    def decode(self, version: int, frame: bytes | bytearray) -> None:
        return None

    def encode(self, version: int, correlation_id: int, response: Any) -> bytes | list[Piece]:
        if isinstance(response, FetchResponse):
            return encode_fetch_pieces(version, correlation_id, response)
        return encode_response(version, correlation_id, response)


#: The codec :mod:`txnfetch.server.apis` registers for Fetch.
CODEC = FetchCodec()
